"""The demo's chat receiver: a local HTTP endpoint standing in for a Discord channel's incoming
webhook (the box has no way out to Discord), which keeps what it is sent and checks each body
against Discord's documented limits (`lanes.base.chatformat.discord_problems`)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lanes.base.chatformat import discord_problems


class Receiver:
    def __init__(self) -> None:
        # each POST as it came: a JSON document from the sender, read by key in the demo's checks
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        me = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = {"unreadable": True}
                with me.lock:
                    me.bodies.append(doc)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *a: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def landed(self) -> tuple[dict[str, Any] | None, list[str]]:
        """The last body of a landing it was sent (its embed's title says "landed"), and what in it
        breaks Discord's limits."""
        with self.lock:
            found = [b for b in self.bodies if " landed" in str((b.get("embeds") or [{}])[0].get("title", ""))]
        if not found:
            return None, []
        return found[-1], discord_problems(found[-1])
