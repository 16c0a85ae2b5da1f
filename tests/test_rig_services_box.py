"""The inventory's services on the box's lanes, as `nev box up` installs them (`nev rig services
install`): lane0's own collector and probe keep the snapshot jobs check fresh with nothing else
done, and a rebooted lane brings them back by its own @reboot line (#33)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.reboot import boots, reboot_lane

ROOT = Path(__file__).resolve().parent.parent


def _nev(box, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full = {**os.environ, **box.env, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=timeout)


def _probed_at(box) -> dt.datetime | None:
    snap = box.lanes[0].host_home / ".local/share/nev/inventory.json"
    try:
        raw = json.loads(snap.read_text()).get("probed_at")
    except (OSError, ValueError):
        return None
    return dt.datetime.fromisoformat(raw.replace("Z", "+00:00")) if raw else None


def _next_probe(box, after: dt.datetime | None, timeout: float = 150) -> dt.datetime:
    t0 = time.monotonic()
    while True:
        at = _probed_at(box)
        if at is not None and (after is None or at > after):
            return at
        assert time.monotonic() - t0 < timeout, f"lane0's probe did not write a round after {after}"
        time.sleep(1)


def test_lane0s_own_probe_keeps_the_snapshot_fresh_enough_for_a_jobs_inventory_check(box, tmp_path):
    """No probe from here, no copied snapshot: the check runs with NEV_INVENTORY_MAX_AGE=90 (the
    rig's is 15 min) on lane0's snapshot, after a round its own probe wrote since this test began."""
    first = _probed_at(box)
    latest = _next_probe(box, first)
    alias = json.loads(Path(box.folknet_file).read_text())["aliases"]
    name = next(a for a, d in alias.items() if not d.get("retired"))
    m = tmp_path / "job.yaml"
    m.write_text(json.dumps({"name": "fresh", "base": "0" * 40, "spec": "specs/fresh.md", "key": "batch",
                             "limit": "1h", "stages": [{"name": "s", "kind": "batch", "models": [name],
                                                        "command": "true"}]}))
    snap = box.lanes[0].host_home / ".local/share/nev/inventory.json"
    r = _nev(box, "job", "check", "inventory", str(m), str(snap), env={"NEV_INVENTORY_MAX_AGE": "90"})
    age = (dt.datetime.now(dt.UTC) - latest).total_seconds()
    print(f"\nlane0's probe wrote a round {age:.0f} s before the check (previous: {first})")
    assert r.returncode == 0, r.stderr
    assert "is ready" in r.stderr


def test_a_rebooted_lane_runs_its_services_again_by_its_own_autostart(box):
    assert boots(box), "box lanes are LXC guests (the default): netns lanes cannot boot"
    assert _nev(box, "rig", "services", "status").returncode == 0
    state_file = box.dir / "box.json"
    before = state_file.stat().st_mtime_ns
    probed = _probed_at(box)
    took = reboot_lane(box, box.lanes[0].name)
    t0 = time.monotonic()
    while True:
        r = _nev(box, "rig", "services", "status", "--json", "--lane", "0")
        rows = json.loads(r.stdout) if r.returncode in (0, 1) and r.stdout.strip() else []
        if r.returncode == 0:
            break
        assert time.monotonic() - t0 < 90, f"lane0's services did not come back: {rows or r.stderr}"
        time.sleep(1)
    back = time.monotonic() - t0
    assert all(s["restarts"] == 0 for s in rows[0]["services"])       # a new supervisor, from boot
    after = _next_probe(box, probed, timeout=60)                      # the probe's first round at start
    print(f"\nlane0 rebooted in {took:.2f} s; its services running {back:.1f} s later; probed at {after}")
    assert state_file.stat().st_mtime_ns == before, "the box wrote its state: it did something"
