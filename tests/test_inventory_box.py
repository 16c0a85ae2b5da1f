"""The inventory on the rig-in-a-box: `nev rig status --lane N` reads the lane's snapshot over SSH."""

from __future__ import annotations

import datetime as dt
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def iso(t: dt.datetime) -> str:
    return t.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def test_status_lane_reads_the_lanes_snapshot_over_ssh(box, tmp_path):
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
    path.write_text(json.dumps(snap))
    pw = pwd.getpwnam("lane")
    for p in (lane.host_home / ".local", lane.host_home / ".local" / "share", path.parent, path):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    env = {**os.environ, **box.env, "PYTHONPATH": str(ROOT), "NEV_INVENTORY": str(tmp_path / "local.json")}
    r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "status", "--lane", "1", "--json"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["snapshot"].startswith("lane 1") and data["snapshot"].endswith(":.local/share/nev/inventory.json")
    rows = {x["alias"]: x for x in data["aliases"]}
    assert rows["fast"]["status"] == "failing" and 700 <= rows["fast"]["held_for_s"] <= 800
    assert rows["old"]["status"] == "retired"
    assert 25 <= data["snapshot_age_s"] <= 120
    r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "status", "--lane", "0"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3
    assert r.stderr.startswith("nev: no inventory snapshot at lane 0") and "nev rig probe" in r.stderr
