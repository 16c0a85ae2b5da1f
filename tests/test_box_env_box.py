"""#33's acceptance on the box: in a person's shell (no NEV_* setting, a folder that is not the
checkout, no local snapshot), `eval "$(nev box env)"` and nothing else is enough for `nev rig
status` and `nev rig dashboard` to show the aliases and the Dagu runs from the rig's own
services (lane0's collector and probe, Dagu on lane 0), and for `git clone "$NEV_FORGE_URL"`."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.helpers.standin_pool import free_port

ROOT = Path(__file__).resolve().parent.parent
DAGU = "/opt/nev/dagu-1.30.2/dagu"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _person(tmp: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "GIT_CONFIG"))
    }
    return {**env, "PYTHONPATH": str(ROOT), "HOME": str(tmp / "home")}


def _nev(
    env: dict[str, str], cwd: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rig.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _eval_box_env(env: dict[str, str], cwd: Path) -> dict[str, str]:
    r = _nev(env, cwd, "box", "env")
    assert r.returncode == 0, r.stderr
    out = dict(env)
    for line in r.stdout.splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        out[k] = shlex.split(v)[0]
    return out


def test_status_dashboard_and_clone_work_after_box_env_and_nothing_else(box, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "home").mkdir()
    elsewhere.mkdir()
    # the box's name is all a person with several boxes gives; its folder comes from the registry
    env = _eval_box_env({**_person(tmp_path), "NEV_BOX_NAME": box.name}, elsewhere)
    assert "NEV_INVENTORY" not in env and env["NEV_BOX_DIR"] == str(box.dir.parent)

    declared = {
        a
        for a, d in json.loads(Path(box.folknet_file).read_text())["aliases"].items()
        if not d.get("retired")
    }
    deadline = time.monotonic() + 180  # lane0's probe: a round a minute
    while True:
        r = _nev(env, elsewhere, "rig", "status", "--json")
        assert r.returncode == 0, r.stderr
        s = json.loads(r.stdout)
        ready = {a["alias"] for a in s["aliases"] if a["status"] == "ready"}
        if declared <= ready or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert s["snapshot"].endswith(":.local/share/nev/inventory.json"), s["snapshot"]
    assert declared <= ready, s["aliases"]
    text = _nev(env, elsewhere, "rig", "status").stdout
    assert "nothing probes" not in text and "down:" not in text, text

    # Dagu on lane 0, as the rig's operator starts it (the box does not), with one run going
    denv = {**env, "NEV_DAGU_BINARY": DAGU}
    up = _nev(denv, ROOT, "dagu", "up", timeout=300)
    assert up.returncode == 0, up.stderr
    run = _nev(denv, ROOT, "dagu", "run", "queued", "--param", "SECONDS=60", "--detach")
    assert run.returncode == 0, run.stderr
    run_id = run.stdout.split()[0]
    port = free_port()
    dash = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rig.cli",
            "rig",
            "dashboard",
            "--port",
            str(port),
            "--refresh",
            "2",
        ],
        env=env,
        cwd=elsewhere,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        data: dict = {}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with OPENER.open(f"http://127.0.0.1:{port}/data.json", timeout=10) as resp:
                    data = json.loads(resp.read())
            except OSError:
                data = {}
            if isinstance(data.get("dagu"), list) and any(
                x["run_id"] == run_id for x in data["dagu"]
            ):
                break
            time.sleep(1)
        assert isinstance(data.get("dagu"), list) and any(
            x["run_id"] == run_id for x in data["dagu"]
        ), data
        rows = data["aliases"]["rows"]
        assert declared <= {a["alias"] for a in rows if a["status"] == "ready"}, rows
        assert data["aliases"]["snapshot"].endswith(":.local/share/nev/inventory.json")
    finally:
        dash.send_signal(signal.SIGTERM)
        dash.communicate(timeout=30)
        _nev(denv, ROOT, "dagu", "stop-run", run_id)
        _nev(denv, ROOT, "dagu", "stop")

    clone = subprocess.run(
        ["git", "clone", "-q", env["NEV_FORGE_URL"], str(tmp_path / "engine")],
        env={**env, "GIT_TERMINAL_PROMPT": "0"},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=elsewhere,
    )
    assert clone.returncode == 0, clone.stderr
    assert (tmp_path / "engine" / "README.md").exists()
