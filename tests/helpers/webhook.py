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


def rig_file(folder: Path, url: str, inline: bool = False, rig: str = "testrig") -> Path:
    """A rig file whose `notify` names the webhook: in its own file (mode 600) unless inline."""
    folder.mkdir(parents=True, exist_ok=True)
    if inline:
        notify: dict[str, str] = {"webhook": url, "rig": rig}
    else:
        (folder / "webhook.url").write_text(url + "\n")
        (folder / "webhook.url").chmod(0o600)
        notify = {"webhook_file": "webhook.url", "rig": rig}
    path = folder / "rig.local.json"
    path.write_text(json.dumps({"notify": notify}))
    return path
