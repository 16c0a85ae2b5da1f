"""Box lanes are system containers that boot their own init, as the rig's lanes do (#33): a TTY
for `ssh -tt`, real Ansible through the jump host, cron running, and a reboot inside the guest
that brings the lane back (network, sshd, the lane user's @reboot lines) with nothing done by
the box. Skipped nowhere: netns lanes (NEV_BOX_LANES=netns) cannot boot, and say so by failing
the reboot test's first assertion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rig.box import guests
from rig.box.netns import run_in
from tests.helpers.reboot import boots, reboot_lane

ROOT = Path(__file__).resolve().parent.parent


def _ssh(box, lane, *args: str, tty: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
    argv = ["ssh", "-F", str(box.ssh_config), *(["-tt"] if tty else []), f"{box.name}-{lane.name}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_ssh_tt_into_a_lane_gets_a_tty(box):
    for lane in box.lanes:
        r = _ssh(box, lane, "tty", tty=True)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().startswith("/dev/pts/"), (r.stdout, r.stderr)
        assert "PTY allocation request failed" not in r.stderr


def test_real_ansible_pings_both_lanes_through_the_jump_host(box, tmp_path):
    """The development box's Ansible inventory (`nev rig status --lane 0 --ansible`), used by
    ansible-core with its default settings: both lanes answer `ping` through the jump host."""
    ansible = Path(sys.executable).with_name("ansible")
    assert ansible.exists(), "ansible-core is a dev dependency (pyproject.toml)"
    env = {**os.environ, **box.env, "PYTHONPATH": str(ROOT)}
    inv = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "status", "--lane", "0", "--ansible"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert inv.returncode == 0, inv.stderr
    data = json.loads(inv.stdout)
    assert sorted(data["lane"]["hosts"]) == sorted(ln.name for ln in box.lanes)
    script = tmp_path / "inventory.sh"           # Ansible's script form of a --list inventory
    (tmp_path / "inventory.json").write_text(inv.stdout)
    script.write_text(f"#!/bin/sh\ncat {tmp_path / 'inventory.json'}\n")
    script.chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    clean["ANSIBLE_HOME"] = str(tmp_path / "ansible-home")     # no state left in ~/.ansible
    r = subprocess.run([str(ansible), "-i", str(script), "lane", "-m", "ping"], env=clean,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    for lane in box.lanes:
        assert f"{lane.name} | SUCCESS" in r.stdout, r.stdout
    assert "UNREACHABLE" not in r.stdout


def test_a_lane_boots_its_own_init_with_cron_and_rsync(box):
    lane = box.lanes[0]
    # as a person on the lane sees it: over SSH through the jump host
    r = _ssh(box, lane, "cat /proc/1/comm; pgrep -x cron >/dev/null && echo cron; command -v rsync; "
                        "systemctl is-system-running || true")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    assert lines[0] == "systemd" and "cron" in lines and "/usr/bin/rsync" in lines, r.stdout
    # not "degraded": no unit failed at boot (`systemctl --failed` names one if it did)
    assert lines[-1] == "running", _ssh(box, lane, "systemctl --failed --no-pager").stdout


def test_a_reboot_inside_the_lane_brings_it_back_with_its_reboot_lines_and_the_box_does_nothing(box):
    """`reboot` as the guest's root: a new init, the network back on the rig's bridge, sshd
    answering through the jump host, and the lane user's @reboot crontab line run by the guest's
    own cron. The box's state file is not written meanwhile (the box did nothing)."""
    assert boots(box), "box lanes are LXC guests (NEV_BOX_LANES=lxc, the default): netns lanes cannot boot"
    lane = box.lanes[1]
    stamp = f"/home/lane/rebooted-{os.getpid()}"
    line = f"@reboot touch {stamp} # test-lane-boot"     # (a % in a crontab line is a newline)
    as_lane = ["runuser", "-u", "lane", "--", "sh", "-c"]
    tab = run_in(box, lane.name, [*as_lane, "crontab -l 2>/dev/null || true"]).stdout
    new = "".join(ln + "\n" for ln in tab.splitlines() if "# test-lane-boot" not in ln) + line + "\n"
    assert run_in(box, lane.name, [*as_lane, "crontab -"], input=new).returncode == 0
    state_file = box.dir / "box.json"
    before = state_file.stat().st_mtime_ns
    try:
        took = reboot_lane(box, lane.name)
        t0 = time.monotonic()
        while True:
            r = _ssh(box, lane, f"test -e {stamp} && echo ran", timeout=30)
            if r.returncode == 0 and r.stdout.strip() == "ran":
                break
            assert time.monotonic() - t0 < 60, f"no @reboot line ran after the reboot: {r.stderr}"
            time.sleep(0.5)
        print(f"\n{lane.name}: new init {took:.2f} s after `reboot`; its @reboot line ran and SSH through "
              f"the jump host answered {time.monotonic() - t0:.2f} s later")
        assert guests.init_pid(box.dir, lane.name) is not None
        assert state_file.stat().st_mtime_ns == before, "the box wrote its state during the lane's reboot"
    finally:
        tab = run_in(box, lane.name, [*as_lane, "crontab -l 2>/dev/null || true"]).stdout
        keep = "".join(ln + "\n" for ln in tab.splitlines() if "# test-lane-boot" not in ln)
        run_in(box, lane.name, [*as_lane, "crontab -"], input=keep)
        run_in(box, lane.name, ["rm", "-f", stamp])
