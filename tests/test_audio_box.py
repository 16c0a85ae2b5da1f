"""The lanes' audio sink on the rig-in-a-box (lanes/audio.py): on an LXC lane made from the image,
a page in each of the three browsers gets a realtime AudioContext that runs (`nev oracle audio`
with the lane's installed nev); with the lane's PulseAudio stopped, `nev doctor` names it,
Firefox's context no longer runs, and `nev lane provision` starts it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lanes import audio
from lanes.base.ssh import Connection, Target

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.parts  # the three browsers run on the lane
LANE = 1


def nev(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    full.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "rig.cli", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def on_lane(box, cmd: str) -> subprocess.CompletedProcess:
    """A command as the lane user over SSH, as a gate's command runs."""
    host = f"{box.name}-{box.lanes[LANE].name}"
    return subprocess.run(
        ["ssh", "-F", str(box.ssh_config), host, cmd], capture_output=True, text=True, timeout=300
    )


def as_root(box, cmd: str) -> None:
    """A command as the guest's root, over SSH through the jump host (as provisioning reaches
    it)."""
    lane = box.lanes[LANE]
    with Connection(
        Target.parse(f"root@{lane.addr}"),
        known_hosts=box.known_hosts,
        key_file=box.ssh_key,
        jump=Target.parse(box.jump),
    ).connect() as c:
        c.run(cmd, check=True)


def audio_on_lane(box, engines: str = "chromium,firefox,webkit") -> tuple[int, dict[str, dict]]:
    r = on_lane(box, f".local/bin/nev oracle audio --json --engines {engines}")
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, {o["engine"]: o for o in json.loads(r.stdout)}


def test_a_realtime_audio_context_runs_in_the_three_browsers_on_a_lane_and_the_sink_is_checked(
    box, tmp_path
):
    env = {**box.env, "NEV_STATE_DIR": str(tmp_path / "state")}
    inst = nev(env, "lane", "install", "--lane", str(LANE))
    assert inst.returncode == 0, inst.stderr
    rc, got = audio_on_lane(box)
    assert rc == 0, got
    assert sorted(got) == ["chromium", "firefox", "webkit"]
    for o in got.values():
        assert o["state"] == "running" and o["clock_s"] > 0 and o["sample_rate"] > 0, o

    guest = box.lanes[LANE].name
    as_root(box, f"systemctl stop {audio.UNIT}")
    try:
        r = nev(env, "doctor", "--json", timeout=120)
        checks = {c["check"]: c for c in json.loads(r.stdout)}
        sink = checks[f"lane {LANE} ({guest}): audio sink"]
        assert not sink["ok"] and "no PulseAudio daemon answers" in sink["detail"], sink
        assert f"nev lane provision --lane {LANE}" in sink["detail"]
        rc, got = audio_on_lane(box, "firefox")  # measured: Firefox's context needs a sink to run
        assert rc == 1 and got["firefox"]["state"] != "running", got
        prov = nev(
            env, "lane", "provision", "--lane", str(LANE), "--packages", ",".join(audio.PACKAGES)
        )
        assert prov.returncode == 0, prov.stdout + prov.stderr
        assert (
            f"lane {LANE}: changed: audio sink (PulseAudio, null sink {audio.SINK})" in prov.stdout
        )
    finally:
        as_root(box, f"systemctl start {audio.UNIT}")
    r = nev(env, "doctor", "--json", timeout=120)
    sink = {c["check"]: c for c in json.loads(r.stdout)}[f"lane {LANE} ({guest}): audio sink"]
    assert sink["ok"] and audio.SINK in sink["detail"], sink
    rc, got = audio_on_lane(box, "firefox")
    assert rc == 0 and got["firefox"]["state"] == "running", got
