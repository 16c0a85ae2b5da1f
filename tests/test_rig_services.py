"""`nev rig services` on this machine (the lane side: plan, apply, the supervisor, here, once):
real processes, the real crontab (put back as it was), a temporary HOME. The lanes' own run
under the box is in tests/test_rig_services_box.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lanes.base.errors import ConfigError
from rig import services as svc
from rig import services_lane as lane_svc

ROOT = Path(__file__).resolve().parent.parent


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plan(port: int, key: str = "sk-test-probe-0123456789abcdef") -> svc.Plan:
    folknet = json.dumps({"aliases": {"m": {"pool": "gpu0", "max_inflight": 1, "provider": "self-hosted",
                                            "keys": ["batch"]}}, "providers": ["self-hosted"]})
    return svc.plan_for("lane9", "127.0.0.1", {"name": "lane9", "role": "lane"}, True, folknet_text=folknet,
                        seeds=[], probe_key=key, probe_every=3600, model_url=f"http://127.0.0.1:{port}")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A lane user's home; the real crontab is kept and put back."""
    before = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("NEV_INSTALL", raising=False)
    yield h
    lane_svc.stop_supervisor(h)
    if before.returncode == 0:
        subprocess.run(["crontab", "-"], input=before.stdout, text=True, check=True)
    else:
        subprocess.run(["crontab", "-r"], capture_output=True)


def _wait(cond, timeout: float = 20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_the_collector_plan_probes_with_its_own_key_kept_out_of_argv():
    p = _plan(1)
    assert [s.name for s in p.services] == ["advertise", "collect", "probe"]
    probe = p.services[2]
    assert probe.env["NEV_MODEL_KEY_FILE"] == "{config}/probe.key" and p.secret == ["probe.key"]
    assert not any("sk-test" in a for s in p.services for a in s.args)
    assert svc.Plan.from_json(json.loads(json.dumps(p.to_json()))).to_json() == p.to_json()
    other = svc.plan_for("lane1", "10.0.0.2", {"name": "lane1"}, False)
    assert [s.name for s in other.services] == ["advertise"] and "probe.key" not in other.files
    # every lane probes its own snapshot (a job checks the lane it runs on); only one collects
    probing = svc.plan_for("lane1", "10.0.0.2", {"name": "lane1"}, False, probes=True,
                           folknet_text="{}", probe_key="sk-x", model_url="http://g")
    assert [s.name for s in probing.services] == ["advertise", "probe"]
    with pytest.raises(ConfigError, match="gateway key"):
        svc.plan_for("lane0", "10.0.0.1", {}, True, folknet_text="{}", model_url="http://x")


@pytest.mark.parametrize("bad", [
    {"lane": "x", "services": [{"name": "shell", "args": ["sh"], "env": {}}], "files": {}, "secret": []},
    {"lane": "x", "services": [], "files": {"../escape": "x"}, "secret": []},
    {"lane": "x", "services": "no", "files": {}, "secret": []},
])
def test_a_bad_plan_is_refused_in_one_line(bad):
    with pytest.raises(ConfigError) as e:
        svc.Plan.from_json(bad)
    assert "\n" not in str(e.value)


def test_apply_runs_the_services_under_one_supervisor_restarts_them_and_removes_them(home):
    port = _closed_port()          # a gateway that refuses: each probe round fails fast, then waits
    plan = _plan(port)
    plan.services = [s for s in plan.services if s.name == "probe"]
    out = lane_svc.apply(plan, home)
    assert "changed: supervisor started" in out and "changed: @reboot line installed" in out
    key = lane_svc.config_dir(home) / "probe.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((lane_svc.config_dir(home) / "folknet.json").stat().st_mode) == 0o644
    tab = subprocess.run(["crontab", "-l"], capture_output=True, text=True).stdout
    assert [ln for ln in tab.splitlines() if ln.endswith(svc.TAG)][0].startswith("@reboot ")
    here = _wait(lambda: (h := lane_svc.here(home)).services[0].state == "running" and h)
    assert here.supervisor and here.autostart
    pid = here.services[0].pid
    # the same plan again changes nothing and keeps the supervisor
    sup = here.supervisor
    assert lane_svc.apply(plan, home) == ["unchanged: services running as planned"]
    assert lane_svc.supervisor_pid(home) == sup
    # a service that dies is started again by the supervisor
    os.kill(pid, signal.SIGKILL)
    again = _wait(lambda: (r := lane_svc.here(home).services[0]).pid not in (None, pid) and r)
    assert again.restarts == 1 and again.last_exit == -9
    assert "sk-test-probe" not in (lane_svc.state_dir(home) / "probe.log").read_text()
    # remove: supervisor, line and files gone; the service with it
    gone = lane_svc.apply(None, home)
    assert "changed: supervisor stopped" in gone and "changed: @reboot line removed" in gone
    assert lane_svc.supervisor_pid(home) is None and not list(lane_svc.config_dir(home).glob("*"))
    assert svc.TAG not in subprocess.run(["crontab", "-l"], capture_output=True, text=True).stdout
    _wait(lambda: not Path(f"/proc/{again.pid}").exists())


def test_a_changed_plan_restarts_the_supervisor_and_a_second_one_refuses_to_run(home):
    plan = _plan(_closed_port())
    plan.services = [s for s in plan.services if s.name == "probe"]
    lane_svc.apply(plan, home)
    first = lane_svc.supervisor_pid(home)
    cp = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "services", "run"], capture_output=True,
                        text=True, timeout=30, cwd=ROOT)
    assert cp.returncode == 0 and "already runs" in cp.stderr
    plan.files["probe.key"] = "sk-test-probe-another-key-000000\n"
    out = lane_svc.apply(plan, home)
    assert "changed: probe.key" in out and "changed: supervisor started" in out
    assert lane_svc.supervisor_pid(home) not in (None, first)


def test_once_runs_one_round_with_the_planned_environment(home):
    plan = _plan(_closed_port())
    lane_svc.apply(plan, home)
    lane_svc.stop_supervisor(home)
    code = lane_svc.once(home, "probe")
    snap = json.loads((home / ".local/share/nev/inventory.json").read_text())
    assert code == 0 and snap["probed_at"] and "m" in snap["aliases"]
    with pytest.raises(ConfigError, match="no service 'nothing'"):
        lane_svc.once(home, "nothing")


def test_status_renders_an_unreachable_lane_in_one_line():
    wire = {
        "supervisor": 7,
        "autostart": True,
        "services": [
            {
                "service": "advertise",
                "state": "running",
                "pid": 9,
                "up_s": 3.0,
                "restarts": 0,
                "last_exit": None,
            }
        ],
    }
    rows = [svc.LaneServices("lane 0 (lane0)", error="connect: timed out"),
            svc.LaneServices("lane 1 (lane1)", svc.Here.from_json(wire, "lane 1"))]
    text = svc.render(rows)
    assert "lane 0 (lane0)   unavailable: connect: timed out" in text and "advertise" in text
    assert not svc.healthy(rows) and svc.healthy(rows[1:])


def test_a_second_install_keeps_the_lanes_probe_key_when_the_gateway_still_holds_it(home):
    """`install` sends a new key only when the lane's (by digest) is not the gateway's: a plan
    that keeps it leaves the file as it is, and one whose kept key is missing is refused."""
    import hashlib

    plan = _plan(_closed_port())
    plan.services = [s for s in plan.services if s.name == "probe"]
    lane_svc.apply(plan, home)
    key = lane_svc.config_dir(home) / "probe.key"
    digest = lane_svc.here(home).probe_key_sha256
    assert digest == hashlib.sha256(key.read_text().strip().encode()).hexdigest()
    sup = lane_svc.supervisor_pid(home)
    kept = svc.plan_for("lane9", "127.0.0.1", {"name": "lane9", "role": "lane"}, True,
                        folknet_text=plan.files["folknet.json"], seeds=[], keep_key=True,
                        probe_every=3600, model_url=plan.services[0].env["NEV_MODEL_URL"])
    kept.services = [s for s in kept.services if s.name == "probe"]
    assert "probe.key" not in kept.files and kept.keep == ["probe.key"]
    assert svc.Plan.from_json(json.loads(json.dumps(kept.to_json()))).keep == ["probe.key"]
    assert lane_svc.apply(kept, home) == ["unchanged: services running as planned"]
    assert key.exists() and lane_svc.here(home).probe_key_sha256 == digest
    assert lane_svc.supervisor_pid(home) == sup
    key.unlink()
    with pytest.raises(ConfigError, match="is to be kept but is missing"):
        lane_svc.apply(kept, home)


def test_drift_does_not_compare_a_rig_services_key():
    from rig.serving import drift

    keys = json.dumps({"batch": {"name": "batch", "models": ["m"]},
                       "service:probe-lane0": {"name": "service:probe-lane0", "service": "probe-lane0",
                                               "models": ["m", "n"], "sha256": "x"},
                       "job:j": {"name": "job:j", "job": "j", "models": ["m"], "sha256": "y"}})
    assert drift.parse_keys(keys, "keys.json") == {"batch": ["m"]}
