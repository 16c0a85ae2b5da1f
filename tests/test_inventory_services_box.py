"""The inventory's services on the rig-in-a-box: every host advertises its role, lane0 collects
and probes.

The service hosts' advertisers are the box's (`rig.box.inventory_services.services`: namespaces of
this machine, no boot of their own); the lanes run their own, installed by the box with `nev rig
services install` as a user would, under each lane's supervisor (`rig/services.py`).
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lanes import create_lxc

pytestmark = pytest.mark.box

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def services(box) -> Iterator[dict]:
    """The box's services as `nev box up` left them: nothing is started here."""
    snap = box.lanes[0].host_home / ".local" / "share" / "nev" / "inventory.json"
    yield {"snapshot": snap, "t0": time.monotonic()}


def wait_for_every_host(box, snap: Path, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = json.loads(snap.read_text())
        except (OSError, ValueError):
            last = None
        hosts = (last or {}).get("hosts") or {}
        if all((hosts.get(h) or {}).get("status") == "up" for h in box.hosts):
            return last
        time.sleep(0.2)
    logs = "\n".join(f"{p.name}: {p.read_text(errors='replace')[-600:]}"
                     for p in sorted((box.dir / "logs").glob("*-collect.log")))
    raise AssertionError(f"lane0's snapshot does not list every host up after {timeout:.0f} s: "
                         f"{json.dumps((last or {}).get('hosts'), indent=1)[:3000]}\n{logs}")


def nev(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_lanes_snapshot_lists_every_host_with_its_role(box, services):
    from rig.box import plan

    snap = wait_for_every_host(box, services["snapshot"])
    took = time.monotonic() - services["t0"]
    print(f"\nlane0's collector listed all {len(box.hosts)} hosts up {took:.1f} s after the services started")
    hosts = snap["hosts"]
    assert sorted(h for h in hosts if h in box.hosts) == sorted(box.hosts)
    for name, h in box.hosts.items():
        assert hosts[name]["role"] == h["role"] and hosts[name]["addresses"] == [h["addr"]]
        assert hosts[name]["inventory"]["url"] == f"http://{h['addr']}:8787/inventory"
    for p in plan.POOLS:
        inv = hosts[p.name]["inventory"]
        assert inv["models"] == [p.alias] and inv["gpus"][0]["stand_in"] is True
        assert p.name in snap["aliases"][p.alias]["pool_hosts"]    # (other tests' advertisers may be there too)
    assert hosts["gateway"]["inventory"]["models"] == [p.alias for p in plan.POOLS]
    # written by the collector as the lane user, in the lane's own home (an LXC guest's `lane` is
    # uid 1000 shifted by the guest's id map; a netns lane's is this machine's `lane`)
    lane_uid = box.lanes[0].host_home.stat().st_uid
    assert lane_uid != 0 and lane_uid in {pwd.getpwnam("lane").pw_uid, create_lxc.IDMAP_BASE + create_lxc.LANE_UID}
    assert services["snapshot"].stat().st_uid == lane_uid
    # the lanes' services are the lanes' own: each lane's supervisor reports them running
    env = {**os.environ, **box.env, "PYTHONPATH": str(ROOT)}
    r = nev(env, "rig", "services", "status", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {row["lane"].split()[1]: row for row in json.loads(r.stdout)}
    assert {s["service"] for s in rows["0"]["services"]} == {"advertise", "collect", "probe"}
    assert {s["service"] for s in rows["1"]["services"]} == {"advertise", "probe"}
    assert all(s["state"] == "running" for row in rows.values() for s in row["services"])
    assert all(row["autostart"] and row["supervisor"] for row in rows.values())


def test_status_on_the_dev_box_reads_lane0s_snapshot_over_ssh(box, services):
    wait_for_every_host(box, services["snapshot"])
    env = {**os.environ, **box.env, "PYTHONPATH": str(ROOT), "NEV_INVENTORY": "/nonexistent/local.json"}
    r = nev(env, "rig", "status", "--lane", "0", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["snapshot"].endswith(":.local/share/nev/inventory.json")
    roles = {h["name"]: (h["role"], h["status"]) for h in data["hosts"]}
    assert {n: roles.get(n) for n in box.hosts} == {n: (h["role"], "up") for n, h in box.hosts.items()}
    text = nev(env, "rig", "status", "--lane", "0")
    ups = sum(1 for h in data["hosts"] if h["status"] == "up")
    assert text.returncode == 0 and f"hosts: {ups} up" in text.stdout, text.stdout


def test_ansible_export_reaches_lanes_and_service_hosts_through_the_jump(box, services):
    """Ansible's ssh, with the export's common args, reaches lane1 as `lane` and the proxy as root
    through the box's jump host (the development box has no other way onto the rig network)."""
    wait_for_every_host(box, services["snapshot"])
    env = {**os.environ, **box.env, "PYTHONPATH": str(ROOT)}
    assert env["NEV_LANE_JUMP"] == box.jump
    r = nev(env, "rig", "status", "--lane", "0", "--ansible")
    assert r.returncode == 0, r.stderr
    inv = json.loads(r.stdout)
    for name, h in box.hosts.items():
        assert name in inv[h["role"]]["hosts"]
    hv = inv["_meta"]["hostvars"]
    assert (hv["lane1"]["ansible_user"], hv["lane1"]["ansible_port"]) == ("lane", 22)
    assert hv["proxy"]["ansible_user"] == "root" and hv["gateway"]["ansible_user"] == "root"
    assert "ansible_user" not in hv["forge"]   # no sshd there
    secrets = [Path(p).read_text().strip() for p in (*box.keys.values(), box.master_key_file,
                                                      box.forge_token_file)]
    assert not [s for s in secrets if s in r.stdout]
    for host, who in (("lane1", "lane"), ("proxy", "root")):
        v = hv[host]
        assert box.jump_addr in v["ansible_ssh_common_args"]      # through the jump host, pinned
        t0 = time.monotonic()
        cp = subprocess.run(["ssh", *shlex.split(v["ansible_ssh_common_args"]), "-o", "BatchMode=yes",
                             "-o", f"IdentityFile={v['ansible_ssh_private_key_file']}",
                             "-o", f"User={v['ansible_user']}", "-o", f"Port={v['ansible_port']}",
                             v["ansible_host"], "id -un"], capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0 and cp.stdout.strip() == who, cp.stderr
        print(f"\nssh {host} through the jump: {time.monotonic() - t0:.2f} s")


def test_no_secret_in_the_services_logs_or_served_inventories(box, services):
    wait_for_every_host(box, services["snapshot"])
    secrets = [Path(p).read_text().strip() for p in (*box.keys.values(), box.master_key_file,
                                                      box.forge_token_file)]
    logs = [*(box.dir / "logs").glob("*-advertise.log"),          # the service hosts' (the box's)
            *(ln.host_home / ".local/state/nev/services" for ln in box.lanes)]   # the lanes' own
    files = [p for d in logs for p in ([d] if d.is_file() else sorted(d.glob("*.log")))]
    assert any(p.name == "probe.log" for p in files), files
    for p in files:
        text = p.read_text(errors="replace")
        assert not [x for x in secrets if x in text], p
    snap_text = services["snapshot"].read_text()
    assert not [x for x in secrets if x in snap_text]
