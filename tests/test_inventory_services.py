"""The box's inventory services as pure data, and the Ansible export's way in through the jump host."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from lanes.base.inventory_record import HostDoc, Snapshot
from lanes.base.jsonfile import Fields
from lanes.base.mask import is_secret_name, mask
from lanes.base.ssh import Target
from rig.box import inventory_services as isv
from rig.box import plan
from rig.inventory import advertise, collect, reach

LAYOUT = plan.Layout("ibox", "198.18.44", 2)
BOX = Path("/srv/boxes/ibox")


def adverts(svcs: list[isv.Service]) -> dict[str, isv.Service]:
    return {s.host: s for s in svcs if s.key.endswith(".advertise")}


def test_every_host_gets_exactly_one_advertiser_on_its_own_address():
    svcs = isv.services(LAYOUT, BOX)
    keys = [s.key for s in svcs]
    assert len(keys) == len(set(keys))
    adv = adverts(svcs)
    assert sorted(adv) == sorted(h.name for h in LAYOUT.hosts())
    for h in LAYOUT.hosts():
        inner = list(adv[h.name].inner)
        assert inner[inner.index("--interface") + 1] == h.addr
        assert inner[inner.index("--name") + 1] == h.name
        assert inner[inner.index("--port") + 1] == "8787"    # tests start theirs on 8790+
        want = isv.lane_file(BOX, h.name, "host-inventory.json")[1] if h.role == "lane" else \
            str(isv.inventory_file(BOX, h.name))   # a lane reads its copy in its own home
        assert inner[inner.index("--inventory") + 1] == want


def test_lanes_run_as_lane_inside_their_namespaces_and_service_hosts_through_ip_netns():
    adv = adverts(isv.services(LAYOUT, BOX))
    lane = adv["lane1"]
    assert lane.in_lane and lane.user == "lane" and lane.env["HOME"] == "/home/lane"
    assert lane.inner[:6] == ("setpriv", "--reuid=lane", "--regid=lane", "--init-groups", "--",
                              "/home/lane/.local/bin/nev")   # the lane's own nev, as the lane user
    assert "PYTHONPATH" not in lane.env
    assert isv.lane_nev_marker(BOX, "lane1") in lane.conf_files   # a new install restarts it
    assert lane.argv(4242) == ["nsenter", "-t", "4242", "-n", "-m", "--", *lane.inner]
    lxc_lane = adverts(isv.services(LAYOUT, BOX, lanes_kind="lxc"))["lane1"]
    assert lxc_lane.argv(4242)[:5] == ["nsenter", "-t", "4242", "-U", "-n"]
    with pytest.raises(ValueError, match="sshd"):
        lane.argv()
    gw = adv["gateway"]
    assert not gw.in_lane and gw.user == "root"
    assert gw.argv() == ["ip", "netns", "exec", "ibox-gateway", *gw.inner]
    assert gw.log == BOX / "logs" / "gateway-advertise.log"
    assert isv.inventory_file(BOX, "gateway") in gw.conf_files


def test_lane0_runs_the_collector_writing_the_lanes_own_snapshot():
    svcs = isv.services(LAYOUT, BOX)
    [col] = [s for s in svcs if s.key.endswith(".collect")]
    assert col.key == "lane0.collect" and col.host == "lane0" and col.in_lane and col.user == "lane"
    inner = list(col.inner)
    assert inner[inner.index("--interface") + 1] == LAYOUT.lane_hosts()[0].addr
    assert inner[inner.index("--expect") + 1] == str(len(LAYOUT.hosts()))
    assert "--every" in inner
    # the snapshot is the default path in the lane's home, the one `nev rig status --lane 0` reads
    assert "NEV_INVENTORY" not in col.env and col.env["HOME"] == "/home/lane"
    host_path, seen = isv.lane_file(BOX, "lane0", "folknet.json")       # the box's, copied home
    assert col.env["NEV_FOLKNET_FILE"] == seen == "/home/lane/.config/nev/folknet.json"
    assert host_path in col.conf_files and host_path.parent.parent.parent == BOX / "lanes" / "lane0" / "home"
    assert svcs[-1] is col   # after every advertiser


def test_lxc_lanes_get_lane_services_entered_through_the_guests_user_namespace():
    svcs = isv.services(LAYOUT, BOX, lanes_kind="lxc")
    assert {s.host for s in svcs} == {h.name for h in LAYOUT.hosts() if h.role != "jump"}
    lane_svcs = [s for s in svcs if s.in_lane]
    assert {s.key for s in lane_svcs} >= {"lane0.advertise", "lane1.advertise", "lane0.collect"}
    for s in lane_svcs:
        argv = s.argv(4242)
        assert argv[:5] == ["nsenter", "-t", "4242", "-U", "-n"], argv
    netns_argv = next(s for s in isv.services(LAYOUT, BOX) if s.key == "lane0.advertise").argv(4242)
    assert "-U" not in netns_argv


def _names(value: object) -> list[str]:
    if isinstance(value, dict):
        return [str(k) for k in value] + [n for v in value.values() for n in _names(v)]
    if isinstance(value, list):
        return [n for v in value for n in _names(v)]
    return []


def test_no_secret_in_any_argv_env_or_inventory_file(tmp_path):
    svcs = isv.services(LAYOUT, tmp_path)
    for h in LAYOUT.lane_hosts():
        (tmp_path / "lanes" / h.name / "home").mkdir(parents=True)
    paths = isv.write_inventory_files(LAYOUT, tmp_path)
    for h in LAYOUT.lane_hosts():   # each lane's own copy, readable by the lane user
        copy = isv.lane_file(tmp_path, h.name, "host-inventory.json")[0]
        assert copy.read_bytes() == paths[h.name].read_bytes() and copy.stat().st_mode & 0o777 == 0o644
    for s in svcs:
        for text in [*s.argv(1), *s.env.values()]:
            assert mask(text) == text, (s.key, text)
        assert not [k for k in s.env if is_secret_name(k)], s.key
    for name, p in paths.items():
        assert p.stat().st_mode & 0o777 == 0o644
        doc = advertise.read_declared(p)
        assert not [n for n in _names(doc) if is_secret_name(n)], name
        assert mask(p.read_text()) == p.read_text(), name
        # the advertiser takes every field as it is: nothing dropped, nothing ignored
        served, notes = advertise.build(doc, "198.18.44.5", 8787, name, "2026-11-30T10:00:00Z")
        assert notes == [], (name, notes)
        assert served["role"] == LAYOUT.hosts()[[h.name for h in LAYOUT.hosts()].index(name)].role


def test_inventories_name_the_real_roles_and_match_the_pools():
    docs = isv.declared(LAYOUT)
    assert {n: d["role"] for n, d in docs.items()} == {h.name: h.role for h in LAYOUT.hosts()}
    aliases = [p.alias for p in plan.POOLS]
    assert docs["gateway"]["models"] == aliases and docs["gateway"]["ssh"]["user"] == "root"
    fronts = {f["pool"]: f for f in docs["proxy"]["serving"]}
    for p, ph in zip(plan.POOLS, LAYOUT.pool_hosts(), strict=True):
        d = docs[p.name]
        assert d["models"] == [p.alias] and d["pools"] == [p.name]
        assert d["gpus"][0]["stand_in"] is True
        [srv] = d["serving"]
        assert (srv["alias"], srv["tier"], srv["max_inflight"]) == (p.alias, p.tier, p.max_inflight)
        assert fronts[p.name]["maxconn"] == p.max_inflight
        assert fronts[p.name]["port"] == LAYOUT.proxy_port(p.name)
        assert fronts[p.name]["backend"] == f"{ph.addr}:{plan.POOL_PORT}"
    for lane in LAYOUT.lane_hosts():
        d = docs[lane.name]
        assert d["ssh"] == {"user": "lane", "port": 22}
        units = {s["unit"] for s in d["serving"]}
        assert {"sshd", "dagu"} <= units and ("nev rig collect" in units) == (lane.name == "lane0")
    [git] = docs["forge"]["serving"]
    assert git["port"] == 80 and git["protocol"] == "git smart-HTTP" and "ssh" not in docs["forge"]
    # only pools list pools: the collector's pool_hosts must name gpu0/gpu1 alone
    assert sorted(n for n, d in docs.items() if d["pools"]) == [p.name for p in plan.POOLS]


# -- the Ansible export --------------------------------------------------------------------

GOLDEN = Path(__file__).parent / "inventory_golden"
REACH = reach.Reach(jump=Target.parse("jump@198.19.0.2:2222"), known_hosts=Path("/box/ssh/known_hosts"),
                    key_file=Path("/box/ssh/id_ed25519"),
                    by_addr={"198.18.0.30": ("root", 2222)})   # the rig file names the proxy host


def test_golden_ansible_export_groups_by_role_and_goes_through_the_jump():
    import os

    served = {n: json.loads((GOLDEN / f"{n}.served.json").read_text())
              for n in ("gpu0", "gateway", "lane0", "proxy")}
    found = [collect.Found(name=n, url=d["url"], addresses=[d["address"]], role=d["role"], sources=["mdns"],
                           seen_after_s=0.04) for n, d in served.items()]
    import datetime as dt

    at = dt.datetime(2026, 11, 30, 10, 5, tzinfo=dt.UTC)
    fetched = {d["url"]: (HostDoc.from_json(d, Fields("t"), ""), None) for d in served.values()}
    hosts = collect.merge(found, [], fetched, at)
    got = collect.ansible(Snapshot(hosts=hosts), REACH)
    path = GOLDEN / "expected.ansible-jump.json"
    if os.environ.get("NEV_GOLDEN_WRITE") == "1":
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert json.loads(json.dumps(got)) == json.loads(path.read_text())
    assert {g: got[g]["hosts"] for g in ("forge", "gateway", "lane", "pool", "proxy") if g in got} == {
        "gateway": ["gateway"], "lane": ["lane0"], "pool": ["gpu0"], "proxy": ["proxy"]}
    hv = got["_meta"]["hostvars"]
    # lane0 is in no local file: its own inventory says how to reach it; the rig file wins for the proxy
    assert (hv["lane0"]["ansible_user"], hv["lane0"]["ansible_port"]) == ("lane", 22)
    assert (hv["proxy"]["ansible_user"], hv["proxy"]["ansible_port"]) == ("root", 2222)
    # recorded before hosts declared `ssh`, and in no local file: no user, no port
    assert "ansible_user" not in hv["gateway"] and "ansible_user" not in hv["gpu0"]
    args = shlex.split(hv["lane0"]["ansible_ssh_common_args"])
    proxy_cmd = next(a for a in args if a.startswith("ProxyCommand="))
    assert shlex.split(proxy_cmd.removeprefix("ProxyCommand="))[-5:] == ["-p", "2222", "-W", "%h:%p",
                                                                         "jump@198.19.0.2"]
    assert "UserKnownHostsFile=/box/ssh/known_hosts" in args and "StrictHostKeyChecking=yes" in args
    # no value is secret-shaped (a key *file* is named, never a key); the masker takes any
    # `...Key...=value` for a secret, so the one such ssh option is set aside first
    values = [v.replace("StrictHostKeyChecking=yes", "") for h in hv.values() for v in h.values()
              if isinstance(v, str)]
    assert [v for v in values if mask(v) != v] == []


def test_without_a_jump_the_export_still_pins_host_keys():
    r = reach.Reach(known_hosts=Path("/k"), by_addr={"198.18.0.11": ("lane", 2200)})
    hv = reach.host_vars("198.18.0.11", None, r)
    assert hv == {"ansible_host": "198.18.0.11", "ansible_user": "lane", "ansible_port": 2200,
                  "ansible_ssh_common_args": "-o UserKnownHostsFile=/k -o StrictHostKeyChecking=yes"}
    assert "ProxyCommand" not in json.dumps(hv)


def test_jump_comes_from_the_rig_file_then_the_setting_then_the_lanes_file(tmp_path):
    rig = tmp_path / "rig.json"
    lanes = tmp_path / "lanes.json"
    lanes.write_text(json.dumps({"lanes": [], "jump": "lanesjump@10.0.0.1"}))
    env = {"NEV_RIG_FILE": str(rig), "NEV_LANES_FILE": str(lanes)}
    assert reach.jump_spec(env) == "lanesjump@10.0.0.1"
    assert reach.jump_spec({**env, "NEV_LANE_JUMP": "envjump@10.0.0.2:2222"}) == "envjump@10.0.0.2:2222"
    rig.write_text(json.dumps({"roles": {}, "jump": "root@10.0.0.3"}))
    assert reach.jump_spec({**env, "NEV_LANE_JUMP": "envjump@10.0.0.2"}) == "root@10.0.0.3"
    assert reach.jump_spec({"NEV_RIG_FILE": str(tmp_path / "none"), "NEV_LANES_FILE": str(tmp_path / "none")}) is None


def test_common_args_reach_a_host_through_a_real_jump_with_pinned_keys(tmp_path):
    """Two real sshd: the export's ProxyCommand pins the jump's key too; ProxyJump would not."""
    from tests.helpers import local_sshd

    jump = local_sshd.start(tmp_path / "jump")
    target = local_sshd.start(tmp_path / "target")
    try:
        kh = tmp_path / "known_hosts"
        kh.write_text(jump.known_hosts.read_text() + target.known_hosts.read_text())
        # one client key for both, as on the box
        (tmp_path / "target" / "authorized_keys").write_text(jump.client_key.with_suffix(".pub").read_text())
        r = reach.Reach(jump=Target(host="127.0.0.1", user=jump.user, port=jump.port), known_hosts=kh,
                        key_file=jump.client_key)
        doc = {"ssh": {"user": target.user, "port": target.port}}
        hv = reach.host_vars("127.0.0.1", HostDoc.from_json(doc, Fields("t"), ""), r)

        def ssh(common: list[str]) -> subprocess.CompletedProcess:
            # the way Ansible's ssh connection builds its command line
            return subprocess.run(["ssh", *common, "-o", "BatchMode=yes",
                                   "-o", f"IdentityFile={hv['ansible_ssh_private_key_file']}",
                                   "-o", f"User={hv['ansible_user']}", "-o", f"Port={hv['ansible_port']}",
                                   hv["ansible_host"], "echo through-the-jump"],
                                  capture_output=True, text=True, timeout=30)

        ok = ssh(shlex.split(hv["ansible_ssh_common_args"]))
        assert ok.returncode == 0 and ok.stdout.strip() == "through-the-jump", ok.stderr
        proxyjump = ["-o", f"ProxyJump={jump.user}@127.0.0.1:{jump.port}", "-o", f"UserKnownHostsFile={kh}",
                     "-o", "StrictHostKeyChecking=yes"]
        bad = ssh(proxyjump)
        assert bad.returncode != 0 and "Host key verification failed" in bad.stderr
    finally:
        jump.stop()
        target.stop()
