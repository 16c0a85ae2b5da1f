"""A real webhook receiver (http.server in a thread) for the notification tests: it records every
POST's path and JSON body, and answers 500 (or is shut) when a test says the receiver is down."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TOKEN = "hook-Tok3n-s3cr3t-9f2b"  # the secret part of the webhook's URL: never in a log line


class Receiver:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.posts: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.status = 200
        self.lock = threading.Lock()
        me = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                code = me.status
                if code == 200:
                    with me.lock:
                        me.posts.append(json.loads(body))
                        me.paths.append(self.path)
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}/hooks/{TOKEN}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kinds(self) -> list[tuple[str, str, str]]:
        """(kind, state, subject) of every POST taken, in order."""
        with self.lock:
            return [(p["kind"], p["state"], p["subject"]) for p in self.posts]

    def wait(self, n: int, timeout: float = 20.0) -> list[tuple[str, str, str]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.kinds()) < n:
            time.sleep(0.05)
        return self.kinds()


def rig_file(folder: Path, url: str, inline: bool = False, rig: str = "testrig",
             fmt: str | None = None) -> Path:
    """A rig file whose `notify` names the webhook: in its own file (mode 600) unless inline;
    `fmt`: the body's format (nev, discord, slack)."""
    folder.mkdir(parents=True, exist_ok=True)
    if inline:
        notify: dict[str, str] = {"webhook": url, "rig": rig}
    else:
        (folder / "webhook.url").write_text(url + "\n")
        (folder / "webhook.url").chmod(0o600)
        notify = {"webhook_file": "webhook.url", "rig": rig}
    if fmt is not None:
        notify["format"] = fmt
    path = folder / "rig.local.json"
    path.write_text(json.dumps({"notify": notify}))
    return path


# What each service documents its incoming webhooks take (checked, not trusted to nev's code):
# Discord: content <= 2,000 characters; <= 10 embeds; an embed's title <= 256, description
# <= 4,096, <= 25 fields (name <= 256, value <= 1,024), footer text <= 2,048, <= 6,000 characters
# across all of them. Slack: `text` and <= 50 blocks; a header's plain_text <= 150; a section's
# text <= 3,000; context elements <= 10.


def discord_problems(body: dict[str, Any]) -> list[str]:
    bad = []
    if set(body) - {"content", "embeds", "username", "avatar_url", "tts", "allowed_mentions"}:
        bad.append(f"unknown keys {sorted(set(body) - {'content', 'embeds'})}")
    if not isinstance(body.get("content", ""), str) or len(body.get("content", "")) > 2000:
        bad.append("content over 2,000")
    embeds = body.get("embeds", [])
    if not isinstance(embeds, list) or len(embeds) > 10:
        bad.append("embeds not a list of <= 10")
        return bad
    total = 0
    for e in embeds:
        for key, limit in (("title", 256), ("description", 4096)):
            v = e.get(key, "")
            if not isinstance(v, str) or len(v) > limit:
                bad.append(f"embed {key} over {limit}")
            total += len(v)
        fields = e.get("fields", [])
        if len(fields) > 25:
            bad.append("over 25 fields")
        for f in fields:
            if not (isinstance(f.get("name"), str) and 0 < len(f["name"]) <= 256):
                bad.append("a field name empty or over 256")
            if not (isinstance(f.get("value"), str) and 0 < len(f["value"]) <= 1024):
                bad.append("a field value empty or over 1,024")
            total += len(f.get("name", "")) + len(f.get("value", ""))
        foot = (e.get("footer") or {}).get("text", "")
        if len(foot) > 2048:
            bad.append("footer over 2,048")
        total += len(foot)
    if total > 6000:
        bad.append(f"embeds hold {total} characters, over 6,000")
    return bad


def slack_problems(body: dict[str, Any]) -> list[str]:
    bad = []
    if not isinstance(body.get("text"), str):
        bad.append("no text (the fallback)")
    blocks = body.get("blocks", [])
    if not isinstance(blocks, list) or len(blocks) > 50:
        bad.append("blocks not a list of <= 50")
        return bad
    for b in blocks:
        t = b.get("type")
        if t == "header":
            txt = b.get("text") or {}
            if txt.get("type") != "plain_text" or not 0 < len(txt.get("text", "")) <= 150:
                bad.append("a header's plain_text empty or over 150")
        elif t == "section":
            txt = b.get("text") or {}
            size = len(txt.get("text", ""))
            if txt.get("type") not in ("mrkdwn", "plain_text") or not 0 < size <= 3000:
                bad.append("a section's text empty or over 3,000")
        elif t == "context":
            if not 0 < len(b.get("elements") or []) <= 10:
                bad.append("a context's elements not 1 to 10")
        else:
            bad.append(f"a block of type {t!r}")
    return bad
