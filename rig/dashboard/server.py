"""The dashboard's server: loopback only, collections in the background, the last one served."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lanes.base import jsonfile
from lanes.base.errors import NevError
from lanes.base.mask import known_secrets, mask
from rig.dashboard import collect, page
from rig.dashboard.sections import Collection

HOST = "127.0.0.1"


def _masked(obj: object) -> object:
    """A JSON document (the collection as /data.json serves it) with every string masked."""
    return jsonfile.map_strings(obj, lambda s: mask(s, extra=known_secrets()))


class Dashboard:
    """The latest collection, refreshed every `refresh_s` by a background thread."""

    def __init__(self, refresh_s: int, collectors: dict[str, Callable[[], object]] | None = None) -> None:
        self.refresh_s = refresh_s
        self.collectors = collectors
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.data = Collection()
        self.rounds = 0

    def collect_once(self) -> None:
        data = collect.gather(self.collectors, timeout=max(10.0, 3.0 * self.refresh_s))
        with self.lock:
            self.data = data
            self.rounds += 1

    def loop(self) -> None:
        while not self.stop.wait(self.refresh_s):
            self.collect_once()

    def html(self) -> str:
        with self.lock:
            return page.render(self.data, self.refresh_s)

    def json(self) -> str:
        with self.lock:
            return json.dumps(_masked(self.data.to_json()), default=str, sort_keys=True)


def make_handler(dash: Dashboard) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "nev-dashboard/1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return None

        def send(self, code: int, body: str, ctype: str) -> None:
            raw = body.encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(raw)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(raw)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self.send(200, dash.html(), "text/html; charset=utf-8")
            elif path == "/data.json":
                self.send(200, dash.json(), "application/json")
            elif path == "/health":
                self.send(200, json.dumps({"status": "ok", "rounds": dash.rounds}), "application/json")
            else:
                self.send(404, "not found\n", "text/plain")

        do_HEAD = do_GET

        def do_POST(self) -> None:
            self.send(405, "read-only\n", "text/plain")

        do_PUT = do_DELETE = do_PATCH = do_POST

    return Handler


def serve(port: int, refresh_s: int, say: Callable[[str], None],
          collectors: dict[str, Callable[[], object]] | None = None) -> int:
    """Collect once, listen on 127.0.0.1:port, refresh in the background; SIGTERM/Ctrl-C stop it (exit 0)."""
    if refresh_s < 1:
        raise NevError(f"dashboard: refresh of {refresh_s} s: give at least 1 (NEV_DASHBOARD_REFRESH)", 2)
    dash = Dashboard(refresh_s, collectors)
    try:
        srv = ThreadingHTTPServer((HOST, port), make_handler(dash))
    except OSError as e:
        raise NevError(f"dashboard: cannot listen on {HOST}:{port} ({e.strerror}); pick another --port") from None
    srv.daemon_threads = True
    say("dashboard: collecting ...")
    dash.collect_once()
    missing = dash.data.missing()
    say(f"dashboard: http://{HOST}:{srv.server_address[1]}/ (refresh every {refresh_s} s"
        + (f"; unavailable: {', '.join(missing)}" if missing else "") + ")")
    t = threading.Thread(target=dash.loop, daemon=True)
    t.start()

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        dash.stop.set()
        srv.server_close()
    say("dashboard: stopped")
    return 0
