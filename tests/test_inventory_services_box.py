"""The box's inventory services on the rig-in-a-box: every host advertises its role, lane0 collects.

The services are those `rig.box.inventory_services.services` describes. While the box does not
start them itself, the fixture starts them here the way the box would (each in its host's
namespaces, lane services as `lane` inside the lane's network and mount namespaces) and stops
them by PID at the end; when the box already runs them, it uses those.
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

from lanes import create

pytestmark = pytest.mark.box

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def services(box) -> Iterator[dict]:
    from lanes.base import procs
    from rig.box import inventory_services as isv
    from rig.box import inventory_up, plan, state

    st = state.read_state(box.dir)
    assert st is not None
    layout = plan.Layout(box.name, box.net, len(box.lanes))
    svcs = isv.services(layout, box.dir, st.lanes_kind)
    snap = box.lanes[0].host_home / ".local" / "share" / "nev" / "inventory.json"
    started = []
    t0 = time.monotonic()
    try:
        if not all(procs.alive(st.procs.get(s.key)) for s in svcs):
            snap.unlink(missing_ok=True)
            # what the box's own start does: files, nev on the lanes, then the services in order
            lane_pids = {ln.name: st.procs[f"{ln.name}.sshd"].pid for ln in box.lanes}
            t_prep = time.monotonic()
            svcs, changed = inventory_up.prepare(layout, box.dir, st.lanes_kind, lane_pids)
            print(f"\nprepared in {time.monotonic() - t_prep:.1f} s: {changed}")
            t0 = time.monotonic()
            for s in svcs:
                pid = st.procs[f"{s.host}.sshd"].pid if s.in_lane else None
                started.append(procs.spawn(s.key, s.host, s.argv(pid), s.log, env=s.env, cwd=s.cwd))
        yield {"services": svcs, "snapshot": snap, "t0": t0, "records": started}
    finally:
        for rec in started:
            procs.stop(rec)


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
    assert lane_uid != 0 and lane_uid in {pwd.getpwnam("lane").pw_uid, create.IDMAP_BASE + create.LANE_UID}
    assert services["snapshot"].stat().st_uid == lane_uid
    # a lane service's recorded PID is the service itself, running as `lane` (setpriv execs)
    from rig.box import state

    st = state.read_state(box.dir)
    assert st is not None
    lane_recs = [r for r in [*services["records"], *st.procs.values()]
                 if r.host.startswith("lane") and r.key.endswith((".advertise", ".collect"))]
    assert {r.key for r in lane_recs} >= {"lane0.advertise", "lane1.advertise", "lane0.collect"}
    for rec in lane_recs:
        if rec.host.startswith("lane"):
            status = Path(f"/proc/{rec.pid}/status").read_text()
            uid = next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Uid:"))
            assert int(uid) == lane_uid, rec.key


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
    for s in services["services"]:
        text = s.log.read_text(errors="replace")
        assert not [x for x in secrets if x in text], s.key
    snap_text = services["snapshot"].read_text()
    assert not [x for x in secrets if x in snap_text]
