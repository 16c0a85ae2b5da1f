"""Test helpers for `nev dagu`: run the CLI as a subprocess, read Dagu's API, wait for things."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

WORKTREE = Path(__file__).resolve().parents[2]
DAGU = "/opt/nev/dagu-1.30.2/dagu"

# Settings that must not leak from the developer's shell into these tests.
_CLEAR = ("NEV_LANE_SSH", "NEV_DAGU_LANE", "NEV_MODEL_API_KEY", "GENERA_LANE_SSH", "GENERA_DAGU_LANE",
          "GENERA_MODEL_API_KEY", "NEV_DAGU_BINARY", "GENERA_DAGU_BINARY")


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEAR}
    env["PYTHONPATH"] = str(WORKTREE)
    env.update(extra)
    return env


def nev(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=WORKTREE, env=env,
                          capture_output=True, text=True, timeout=timeout)


def ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r


def wait_for(pred: Callable[[], Any], timeout: float, every: float = 0.2, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


class Api:
    """A plain HTTP reader of a Dagu server for assertions (independent of dagu.api)."""

    def __init__(self, url: str, password: str) -> None:
        self.url = url.rstrip("/") + "/api/v2"
        self.auth = ("nev", password)

    def get(self, path: str, **params: str) -> Any:
        r = requests.get(self.url + path, auth=self.auth, params=params, timeout=10)
        r.raise_for_status()
        return r.json()

    def run(self, name: str, run_id: str) -> dict[str, Any]:
        return self.get(f"/dag-runs/{name}/{run_id}")["dagRunDetails"]

    def runs(self, name: str) -> list[dict[str, Any]]:
        return self.get("/dag-runs", name=name).get("dagRuns") or []

    def finished(self, name: str, run_ids: list[str]) -> list[dict[str, Any]] | None:
        """The runs' details once every one succeeded and carries both timestamps, else None.

        Dagu can report `succeeded` a moment before the run's `finishedAt` is written."""
        runs = [self.run(name, i) for i in run_ids]
        done = all(r["statusLabel"] == "succeeded" and r.get("startedAt") and r.get("finishedAt") for r in runs)
        return runs if done else None

    def running_in_queue(self) -> int:
        q = self.get("/queues")
        return sum(len(x.get("running") or []) for x in q["queues"])


def password_from_config(text: str) -> str:
    import yaml

    return str(yaml.safe_load(text)["auth"]["basic"]["password"])


def write_lanes_file(path: Path, lanes: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"lanes": lanes}))
    return path


def tree_contains(root: Path, needle: bytes) -> list[Path]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            try:
                if needle in p.read_bytes():
                    hits.append(p)
            except OSError:
                pass
    return hits
