"""The inventory on the rig-in-a-box: `nev rig status --lane N` reads the lane's snapshot over SSH."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rig.box.poolctl import pool_control

ROOT = Path(__file__).resolve().parent.parent


def iso(t: dt.datetime) -> str:
    return t.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def test_status_lane_reads_the_lanes_snapshot_over_ssh(box, tmp_path):
    # Lane 1: lane 0 may run the box's own collector, which keeps writing its snapshot.
    now = dt.datetime.now(dt.UTC)
    lane = box.lanes[1]
    snap = {"schema": 1, "probed_at": iso(now - dt.timedelta(seconds=30)), "collected_at": None,
            "aliases": {"fast": {"status": "failing", "since": iso(now - dt.timedelta(minutes=12)),
                                 "last_answer": iso(now - dt.timedelta(minutes=14)),
                                 "last_error": "HTTP 503: stand-in told to"},
                        "old": {"status": "retired", "retired": "2026-09-22"}},
            "hosts": {}}
    path = lane.host_home / ".local" / "share" / "nev" / "inventory.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = path.with_name("inventory.json.kept-by-test")
    if path.exists():  # another area's test may have left one: set it aside, then put it back
        path.rename(kept)
    env = {**os.environ, **box.env, "PYTHONPATH": str(ROOT), "NEV_INVENTORY": str(tmp_path / "local.json")}
    try:
        r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "status", "--lane", "1"], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 1
        assert r.stderr.startswith("nev: no inventory snapshot at lane 1") and "nev rig probe" in r.stderr
        path.write_text(json.dumps(snap))
        path.chmod(0o644)
        # the lane user as this machine numbers it: the home's owner (an LXC guest's lane is a
        # mapped uid, not this machine's `lane`; a folder of another owner breaks its installs)
        home = lane.host_home.stat()
        for p in (lane.host_home / ".local", lane.host_home / ".local" / "share", path.parent, path):
            os.chown(p, home.st_uid, home.st_gid)
        r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "status", "--lane", "1", "--json"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    finally:
        path.unlink(missing_ok=True)
        if kept.exists():
            kept.rename(path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["snapshot"].startswith("lane 1") and data["snapshot"].endswith(":.local/share/nev/inventory.json")
    rows = {x["alias"]: x for x in data["aliases"]}
    assert rows["fast"]["status"] == "failing" and 700 <= rows["fast"]["held_for_s"] <= 800
    assert rows["old"]["status"] == "retired"
    assert 25 <= data["snapshot_age_s"] <= 120


# -- probes through the box's real gateway, HAProxy and stand-in pools ----------------------

FAST = "qwen3.8-27b-fast"      # pool gpu0
DEEP = "deepseek-v4.1-flash"   # pool gpu1


def probe_env(box, tmp_path: Path, health: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The box's environment, with its folknet plus a retired alias (and health URLs if given)."""
    decl = json.loads(Path(box.folknet_file).read_text())
    decl["aliases"]["glm-5.3-flash"] = {"pool": "gpu0", "max_inflight": 8, "provider": "self-hosted",
                                        "retired": "2026-09-22", "keys": []}
    for alias, url in (health or {}).items():
        decl["aliases"][alias]["health"] = url
    folknet_file = tmp_path / "folknet.json"
    folknet_file.write_text(json.dumps(decl))
    env = {**os.environ, **box.env, "PYTHONPATH": str(ROOT), "NEV_INVENTORY": str(tmp_path / "inventory.json"),
           "NEV_FOLKNET_FILE": str(folknet_file),
           "NEV_PROBE_FAILS": "2", "NEV_PROBE_OKS": "3", "NEV_PROBE_TIMEOUT": "20"}
    env.update(extra)
    return env


def nev(env: dict[str, str], *args: str, timeout: float = 120, netns: str | None = None) -> subprocess.CompletedProcess:
    """nev on the development box, or (with `netns`) on a rig host of the box, as on a lane."""
    where = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*where, sys.executable, "-m", "rig.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def statuses(env: dict[str, str]) -> dict[str, str]:
    r = nev(env, "rig", "probe")
    assert r.returncode == 0, r.stderr
    snap = json.loads(Path(env["NEV_INVENTORY"]).read_text())
    return {a: s["status"] for a, s in snap["aliases"].items()}


def test_pool_told_to_answer_503_fails_after_n_rounds_and_is_back_after_m(box, tmp_path):
    env = probe_env(box, tmp_path)
    try:
        assert statuses(env)[DEEP] == "ready"
        pool_control(box, "gpu1", fail="503")
        assert [statuses(env)[DEEP] for _ in range(2)] == ["ready", "failing"]
        r = nev(env, "rig", "status", "--json")
        row = {x["alias"]: x for x in json.loads(r.stdout)["aliases"]}[DEEP]
        assert row["status"] == "failing" and row["held_for_s"] is not None and row["held_for_s"] < 30
        assert "503" in row["last_error"]
        manifest = tmp_path / "job.yaml"
        manifest.write_text(f"name: j\nkey: batch\nstages:\n  - name: gen\n    models: [{FAST}, {DEEP}]\n")
        r = nev(env, "job", "check", "inventory", str(manifest), env["NEV_INVENTORY"], "--json")
        assert r.returncode == 3, r.stderr
        assert [x["alias"] for x in json.loads(r.stdout)["reasons"]] == [DEEP]
        pool_control(box, "gpu1", reset=True)
        seq = [statuses(env) for _ in range(3)]
        assert [s[DEEP] for s in seq] == ["failing", "failing", "ready"]
        assert {s[FAST] for s in seq} == {"ready"}
        r = nev(env, "job", "check", "inventory", str(manifest), env["NEV_INVENTORY"])
        assert r.returncode == 0, r.stderr
        r = nev(env, "rig", "status")
        lines = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines()[1:] if ln.strip()}
        assert lines[DEEP][1] == "ready" and lines[DEEP][3] == "s" and int(lines[DEEP][2]) < 10
        held = {x["alias"]: x["held_for_s"] for x in json.loads(nev(env, "rig", "status", "--json").stdout)["aliases"]}
        assert held[FAST] >= held[DEEP]  # ready since round 1, the other only since the last round
        since = {a: x["since"] for a, x in json.loads(Path(env["NEV_INVENTORY"]).read_text())["aliases"].items()
                 if a in (FAST, DEEP)}   # the same at full resolution (held_for_s is whole seconds)
        assert since[FAST] < since[DEEP], since
        assert lines["glm-5.3-flash"][1:4] == ["retired", "since", "2026-09-22"]
        manifest.write_text("name: j\nkey: batch\nstages:\n  - name: gen\n    models: [glm-5.3-flash]\n")
        retired = nev(env, "job", "check", "inventory", str(manifest), env["NEV_INVENTORY"])
        assert retired.returncode == 10 and "retired on 2026-09-22" in retired.stderr
    finally:
        pool_control(box, "gpu1", reset=True)


def test_hanging_pool_is_failing_after_the_timeout_and_does_not_delay_the_other(box, tmp_path):
    env = probe_env(box, tmp_path, NEV_PROBE_TIMEOUT="4")
    try:
        pool_control(box, "gpu1", fail="hang")
        t0 = time.monotonic()
        r = nev(env, "rig", "probe")
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stderr
        snap = json.loads(Path(env["NEV_INVENTORY"]).read_text())
        assert snap["aliases"][DEEP]["status"] == "failing"
        assert snap["aliases"][DEEP]["last_error"] == "no answer within 4 s"
        assert snap["aliases"][FAST]["status"] == "ready"
        assert snap["aliases"][FAST]["latency_s"] < 4
        # one process start (~1 s) plus the 4 s timeout: the two probes ran side by side
        assert took < 4 + 3, took
    finally:
        pool_control(box, "gpu1", reset=True)


def test_models_listing_answers_while_completions_fail(box, tmp_path):
    import requests

    env = probe_env(box, tmp_path)
    key = Path(box.env["NEV_MODEL_KEY_FILE"]).read_text().strip()
    try:
        pool_control(box, "gpu0", fail="503")
        models = requests.get(f"{box.gateway_local_url}/v1/models", headers={"Authorization": f"Bearer {key}"},
                              timeout=10)
        assert models.status_code == 200 and FAST in models.text
        assert statuses(env)[FAST] == "failing"
        assert key not in Path(env["NEV_INVENTORY"]).read_text()
    finally:
        pool_control(box, "gpu0", reset=True)


def test_declared_backend_health_must_answer_too(box, tmp_path):
    # A backend's health route is on the rig network: the probe runs on a lane, as on the rig,
    # and reaches the gateway at its rig address.
    pool = box.pools["gpu0"]
    lane_ns = box.lanes[0].netns
    good = probe_env(box, tmp_path, health={FAST: f"http://{pool.addr}:{pool.port}/health"},
                     NEV_MODEL_URL=box.gateway_url)
    r = nev(good, "rig", "probe", "--every", "0.1", "--rounds", "2", netns=lane_ns)
    assert r.returncode == 0 and "probe round 2" in r.stderr, r.stderr
    snap = json.loads(Path(good["NEV_INVENTORY"]).read_text())
    assert snap["aliases"][FAST]["status"] == "ready" and snap["aliases"][FAST]["oks"] == 2
    dead = f"http://{pool.addr}:{pool.port + 7}/health"
    bad = probe_env(box, tmp_path, health={FAST: dead}, NEV_INVENTORY=str(tmp_path / "other.json"),
                    NEV_MODEL_URL=box.gateway_url)
    r = nev(bad, "rig", "probe", netns=lane_ns)
    assert r.returncode == 0, r.stderr
    assert json.loads(Path(bad["NEV_INVENTORY"]).read_text())["aliases"][FAST]["status"] == "failing"
    snap = json.loads(Path(bad["NEV_INVENTORY"]).read_text())
    assert snap["aliases"][FAST]["last_error"].startswith(f"backend health {dead} unreachable")


def test_probe_without_a_gateway_key_is_one_clear_line(box, tmp_path):
    env = probe_env(box, tmp_path)
    for k in ("NEV_MODEL_API_KEY", "NEV_MODEL_KEY_FILE", "GENERA_MODEL_API_KEY", "GENERA_MODEL_KEY_FILE"):
        env.pop(k, None)
    r = nev(env, "rig", "probe")
    assert r.returncode == 1
    assert r.stderr.strip() == "nev: no gateway key: set NEV_MODEL_KEY_FILE to a file holding the key (mode 600)"
    assert not Path(env["NEV_INVENTORY"]).exists()
