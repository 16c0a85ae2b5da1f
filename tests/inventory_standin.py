"""A stand-in GPU pool for the inventory tests: a small OpenAI-compatible server on loopback.

It is the one stand-in (there is no GPU here): it speaks the real protocol
(`/v1/chat/completions`, `/v1/models`, `/health`) and can be told, per model, to
answer normally, answer 503, hang, or be slow (`set_mode`). The real LiteLLM proxy
sits in front of it in the tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests


class StandinPool:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.modes: dict[str, str] = {}
        self.delay: dict[str, float] = {}
        self.health_code = 200
        self.completions = 0
        self._stop = threading.Event()
        pool = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, code: int, obj: Any) -> None:
                body = json.dumps(obj).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path.startswith("/v1/models"):
                    self._send(200, {"object": "list", "data": [{"id": "standin", "object": "model"}]})
                elif self.path.startswith("/health"):
                    self._send(pool.health_code, {"ok": pool.health_code == 200})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(n) or b"{}")
                model = str(req.get("model", ""))
                mode = pool.modes.get(model, pool.modes.get("*", "ok"))
                delay = pool.delay.get(model, 0.0)
                if delay:
                    time.sleep(delay)
                if mode == "503":
                    self._send(503, {"error": {"message": "stand-in pool told to answer 503"}})
                    return
                if mode == "hang":
                    pool._stop.wait(120)
                    return
                pool.completions += 1
                self._send(200, {
                    "id": "cmpl-standin", "object": "chat.completion", "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "finish_reason": "length",
                                 "message": {"role": "assistant", "content": "OK"}}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})

        self.server = ThreadingHTTPServer((host, port), H)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set_mode(self, model: str, mode: str, delay: float = 0.0) -> None:
        self.modes[model] = mode
        self.delay[model] = delay

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiteLLMProxy:
    """The real LiteLLM proxy from the venv, on loopback, one alias per stand-in model."""

    def __init__(self, workdir: Path, backends: dict[str, str], master_key: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = workdir / "litellm.yaml"
        lines = ["model_list:"]
        for alias, base in backends.items():
            lines += [f"  - model_name: {alias}",
                      "    litellm_params:",
                      f"      model: openai/{alias}",
                      f"      api_base: {base}/v1",
                      "      api_key: standin-no-key",
                      "      num_retries: 0",
                      "      max_retries: 0",
                      "      timeout: 60"]
        lines += ["litellm_settings:", "  num_retries: 0", "  request_timeout: 60",
                  "general_settings:", "  master_key: os.environ/LITELLM_MASTER_KEY"]
        cfg.write_text("\n".join(lines) + "\n")
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_MASTER_KEY=master_key,
                   NO_PROXY="*", no_proxy="*", LITELLM_LOG="ERROR")
        litellm = Path(sys.executable).parent / "litellm"
        self.log = workdir / "litellm.log"
        self.proc = subprocess.Popen([str(litellm), "--config", str(cfg), "--host", "127.0.0.1",
                                      "--port", str(self.port)], env=env, cwd=workdir,
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"litellm exited: {self.log.read_text()[-2000:]}")
            try:
                if requests.get(f"{self.url}/health/liveliness", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        self.close()
        raise RuntimeError(f"litellm did not start in 90 s: {self.log.read_text()[-2000:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
