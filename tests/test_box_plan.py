"""The box's pure decisions: names, addresses, configs, conflicts, shaping."""

from __future__ import annotations

from pathlib import Path

import pytest

from lanes.base.errors import ConfigError, UsageError
from rig.box import plan, state
from rig.box.shape import shape_cmds
from rig.box.state import BoxInfo


def test_names_fit_linux_interface_names_for_the_longest_box_name():
    lay = plan.Layout("abcdef", "198.18.7", plan.MAX_LANES)
    for h in lay.hosts():
        assert len(h.veth) <= 15 and len(h.netns) <= 15
        assert h.addr.startswith("198.18.7.")
    assert len({h.addr for h in lay.hosts()}) == len(lay.hosts())
    assert lay.bridge == "abcdefbr" and lay.addr(plan.BRIDGE_OCTET) == "198.18.7.1"


@pytest.mark.parametrize("bad", ["", "toolong1", "Box", "1box", "a-b"])
def test_bad_box_names_are_refused(bad):
    with pytest.raises(ConfigError, match="NEV_BOX_NAME"):
        plan.check_name(bad)


@pytest.mark.parametrize("raw,want", [("198.18.9", "198.18.9"), ("198.19.200.0/24", "198.19.200"),
                                      ("198.18.07.0", "198.18.7")])
def test_box_nets_are_normalised(raw, want):
    assert plan.check_net(raw) == want


@pytest.mark.parametrize("bad", ["10.0.0", "198.20.1", "198.18.300", "198.18", "x"])
def test_nets_outside_the_benchmark_range_are_refused(bad):
    with pytest.raises(ConfigError, match="198.18.0.0/15"):
        plan.check_net(bad)


def test_lane_count_is_bounded():
    with pytest.raises(ConfigError, match="--lanes 0"):
        plan.check_lanes(0)
    assert plan.check_lanes(3) == 3


def test_sshd_config_is_key_only_and_bound_to_its_address():
    cfg = plan.sshd_config("198.18.9.11", "/k", "/p")
    assert "ListenAddress 198.18.9.11:22" in cfg
    assert "PasswordAuthentication no" in cfg and "AllowUsers lane" in cfg and "UsePAM no" in cfg


def test_every_sshd_nev_writes_is_key_only_with_its_own_users_and_options():
    from lanes import create_lxc

    lay = plan.Layout("t", "198.18.9", 1)
    configs = {"lane": plan.sshd_config("198.18.9.11", "/k", "/p", toolchain=True),
               "jump": plan.jump_sshd_config(lay, "/k", "/p", "/a"),
               "service": plan.root_sshd_config("198.18.9.30", "/k", "/p", "/a"),
               "guest": create_lxc.guest_sshd_config("10.0.0.5", toolchain=False)}
    for name, cfg in configs.items():
        lines = cfg.splitlines()
        for policy in ("PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                       "UsePAM no", "X11Forwarding no"):
            assert lines.count(policy) == 1, (name, policy)
        assert sum(ln.startswith("AllowUsers ") for ln in lines) == 1, name
    assert "AllowUsers nevjump" in configs["jump"] and "ForceCommand /usr/sbin/nologin" in configs["jump"]
    assert "PermitRootLogin prohibit-password" in configs["service"] and "AllowUsers root" in configs["service"]
    assert "AllowUsers lane root" in configs["guest"] and "SetEnv" not in configs["guest"]
    assert "SetEnv PATH=/srv/toolchain/cargo-bin:" in configs["lane"] and "PermitRootLogin no" in configs["lane"]


def test_ssha_hash_is_salted_and_hides_the_token():
    a = plan.ssha("tok", b"12345678")
    b = plan.ssha("tok", b"87654321")
    assert a.startswith("{SSHA}") and a != b and "tok" not in a


def entry(tmp: Path, name: str, net: str, users=("lane",)) -> dict:
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "box.json").write_text("{}")
    return {"name": name, "net": net, "dir": str(d), "users": list(users)}


def test_conflicts_on_name_in_another_folder_and_on_net(tmp_path):
    entries = {"a": entry(tmp_path, "a", "198.18.1")}
    assert state.conflicts("a", "198.18.1", tmp_path / "a", entries) is None
    assert "already used by the box in" in state.conflicts("a", "198.18.2", tmp_path / "elsewhere", entries)
    assert "NEV_BOX_NET" in state.conflicts("b", "198.18.1", tmp_path / "b", entries)
    assert state.conflicts("b", "198.18.2", tmp_path / "b", entries) is None


def test_stale_registry_entries_do_not_count(tmp_path):
    e = {"name": "a", "net": "198.18.1", "dir": str(tmp_path / "gone"), "users": ["lane"]}
    assert state.conflicts("b", "198.18.1", tmp_path / "b", {"a": e}) is None
    assert state.users_elsewhere("b", {"a": e}) == set()


def test_shared_user_is_kept_while_another_box_lists_it(tmp_path):
    entries = {"a": entry(tmp_path, "a", "198.18.1"), "b": entry(tmp_path, "b", "198.18.2")}
    assert state.users_elsewhere("a", entries) == {"lane"}
    assert state.users_elsewhere("a", {"a": entries["a"]}) == set()


def info_for(tmp: Path) -> BoxInfo:
    hosts = {"lane0": {"addr": "198.18.9.11", "netns": "t-lane0", "role": "lane"},
             "forge": {"addr": "198.18.9.5", "netns": "t-forge", "role": "forge"}}
    return BoxInfo(name="t", dir=tmp, net="198.18.9", bridge="tbr", bridge_addr="198.18.9.1", lanes=[],
                   known_hosts=tmp, ssh_key=tmp, ssh_config=tmp, lanes_file=tmp, forge_url="", forge_addr="",
                   forge_user="nev", forge_token_file=tmp, forge_askpass=tmp, forge_access_log=tmp,
                   forge_repos=tmp, nas=tmp, hosts=hosts, rig_netns="t-rig")


def test_shape_puts_down_on_the_bridge_side_and_up_inside_the_lane(tmp_path):
    cmds = shape_cmds(info_for(tmp_path), "lane0", False, 156, 3640)
    assert cmds[0][:9] == ["ip", "netns", "exec", "t-rig", "tc", "qdisc", "replace", "dev", "t-lane0"]
    assert "3640kbit" in cmds[0]
    assert cmds[1][:4] == ["ip", "netns", "exec", "t-lane0"] and "eth0" in cmds[1] and "156kbit" in cmds[1]
    off = shape_cmds(info_for(tmp_path), "lane0", True, None, None)
    assert all("del" in c for c in off)


def test_shape_outside_is_the_development_boxs_uplink_to_the_jump_host(tmp_path):
    up, down = shape_cmds(info_for(tmp_path), "outside", False, 156, 3640)
    assert up[:5] == ["tc", "qdisc", "replace", "dev", "t-out"] and "156kbit" in up     # the dev box's end
    assert down[:4] == ["ip", "netns", "exec", "t-jump"] and "eth1" in down and "3640kbit" in down


def test_the_layout_keeps_the_outside_link_and_forwards_apart_from_the_rig(tmp_path):
    from rig.box import plan

    lay = plan.Layout("t", "198.18.9", 2)
    dev_addr, jump_outside_addr = lay.addr(plan.DEV_OCTET), lay.addr(plan.JUMP_OUT_OCTET)
    rig_addrs = {h.addr for h in lay.hosts()} | {lay.jump().addr, lay.addr(plan.BRIDGE_OCTET)}
    assert dev_addr not in rig_addrs and jump_outside_addr not in rig_addrs
    assert lay.jump_spec == "nevjump@198.18.9.253"
    ports = {plan.Layout("t", n, 1).forward_port(w) for n in ("198.18.9", "198.18.10", "198.19.9")
             for w in ("forge", "gateway")}
    assert len(ports) == 6 and all(1024 < p < 65536 for p in ports)
    cfg = plan.jump_sshd_config(lay, "/k", "/p", "/a")
    assert "AllowTcpForwarding local" in cfg and "ForceCommand /usr/sbin/nologin" in cfg
    permit = next(ln for ln in cfg.splitlines() if ln.startswith("PermitOpen ")).split()[1:]
    assert f"{lay.forge().addr}:*" in permit and all(f"{h.addr}:*" in permit for h in lay.hosts())
    assert not {f"{a}:*" for a in (dev_addr, jump_outside_addr, lay.jump().addr, "127.0.0.1")} & set(permit)


def test_shape_refuses_a_host_that_is_not_a_lane_and_missing_rates(tmp_path):
    with pytest.raises(UsageError, match="not a lane"):
        shape_cmds(info_for(tmp_path), "forge", False, 10, 10)
    with pytest.raises(UsageError, match="--up KBIT"):
        shape_cmds(info_for(tmp_path), "lane0", False, None, None)


def test_box_info_round_trips_through_json(tmp_path):
    i = info_for(tmp_path)
    again = BoxInfo.from_json(i.to_json())
    assert again == i


# ---- the stand-in pool's choices (pure) --------------------------------------------------------

from rig.box import pool as standin  # noqa: E402

BANK = {"clamp_px": {"sampling": [{"kind": "right", "code": "a"}, {"kind": "wrong", "code": "b"},
                                  {"kind": "broken", "code": "c"}]},
        "clamp": {"capacity": [{"kind": "right", "code": "d"}]}}


def body(text, **kw):
    return {"model": "m", "messages": [{"role": "user", "content": text}], **kw}


def test_pool_picks_the_longest_function_name_the_prompt_mentions():
    assert standin.pick_function(BANK, "write clamp_px please") == "clamp_px"
    assert standin.pick_function(BANK, "write clamp please") == "clamp"
    assert standin.pick_function(BANK, "nothing named") == "clamp"   # no _default: first by name


def test_pool_choices_depend_only_on_seed_and_request():
    a = standin.choose(BANK, body("clamp_px", n=6, seed=3), {"m": "sampling"})
    b = standin.choose(BANK, body("clamp_px", n=6, seed=3), {"m": "sampling"})
    assert a == b and len(a[2]) == 6
    seeds = {tuple(c["code"] for c in standin.choose(BANK, body("clamp_px", n=6, seed=s), {})[2])
             for s in range(10)}
    assert len(seeds) > 1


def test_pool_falls_back_to_a_tier_the_function_has():
    fn, tier, picks = standin.choose(BANK, body("clamp"), {"m": "sampling"})
    assert (fn, tier, picks[0]["code"]) == ("clamp", "capacity", "d")


def test_bad_banks_are_refused_with_the_field(tmp_path):
    p = tmp_path / "b.json"
    p.write_text('{"functions": {"f": {"t": [{"kind": "maybe", "code": "x"}]}}}')
    with pytest.raises(standin.BankError, match=r"functions.f.t\[0\]"):
        standin.load_bank(p)


def test_the_shipped_bank_has_right_wrong_and_broken_candidates():
    bank = standin.load_bank(Path(standin.__file__).with_name("bank.json"))
    kinds = {c["kind"] for tiers in bank.values() for cands in tiers.values() for c in cands}
    assert kinds == {"right", "wrong", "broken"}


def test_haproxy_config_has_one_backend_per_pool_with_maxconn():
    lay = plan.Layout("t", "198.18.9", 1)
    cfg = plan.haproxy_cfg(lay, "/p", "/s")
    for i, p in enumerate(plan.POOLS):
        assert f"backend be_{p.name}" in cfg
        for r in p.replica_names():
            assert f"server {p.server(r)} 198.18.9.{40 + i}:{p.port(r)} maxconn {p.maxconn}" in cfg
        assert p.maxconn * len(p.replica_names()) == p.max_inflight   # the alias's limit, shared
        assert f"bind 198.18.9.30:{8100 + i}" in cfg
    # a one-replica pool keeps its server line's name; the two-replica pool balances by least connections
    assert "server gpu0 198.18.9.40:8000 maxconn 8" in cfg
    assert "balance leastconn\n    server r0 198.18.9.42:8000 maxconn 4\n    server r1 198.18.9.42:8001 maxconn 4" in cfg


def test_litellm_config_has_an_alias_per_pool_no_retries_and_no_key_inside():
    cfg = plan.litellm_config(plan.Layout("t", "198.18.9", 1), "auth")
    assert [m["model_name"] for m in cfg["model_list"]] == [p.alias for p in plan.POOLS]
    assert cfg["litellm_settings"]["num_retries"] == 0
    assert all(m["litellm_params"]["max_retries"] == 0 for m in cfg["model_list"])
    assert cfg["general_settings"]["master_key"] == "os.environ/LITELLM_MASTER_KEY"
    assert plan.key_allowlists() == {"batch": [p.alias for p in plan.POOLS], "writer": [plan.POOLS[0].alias]}


def test_litellm_config_enforces_each_declared_alias_limit_from_the_box_folknet(tmp_path):
    """The gateway's entry of each alias carries its declared limits (as `nev rig drift --fix`
    writes them on the rig): max_parallel_requests always, rpm/tpm when declared; the router
    enforces rpm/tpm (usage-based-routing-v2) and never cools the one deployment down."""
    from bench import folknet

    layout = plan.Layout("t", "198.18.9", 1)
    path = tmp_path / "folknet.json"
    path.write_text(plan.dumps(plan.folknet(layout)))
    declared = folknet.load(path)
    cfg = plan.litellm_config(layout, "auth")
    for m in cfg["model_list"]:
        a = declared.aliases[m["model_name"]]
        lp = m["litellm_params"]
        assert lp["max_parallel_requests"] == a.max_inflight
        assert (lp.get("rpm"), lp.get("tpm")) == (a.rpm, a.tpm)
    rs = cfg["router_settings"]
    assert rs["routing_strategy"] == "usage-based-routing-v2" and rs["disable_cooldowns"] is True


# ---- waiting for a service to answer ----------------------------------------------------------

import socket  # noqa: E402
import threading  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402

from lanes.base.errors import NevError  # noqa: E402
from lanes.base.procs import ProcRec  # noqa: E402
from rig.box import waits  # noqa: E402


def test_wait_port_returns_once_the_port_listens_and_names_a_port_that_never_does():
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    waits.wait_port("127.0.0.1", port, 2)
    srv.close()
    with pytest.raises(NevError, match=rf"^127\.0\.0\.1 did not listen on 127\.0\.0\.1:{port} within 0 s"):
        waits.wait_port("127.0.0.1", port, 0.2)


def test_wait_http_takes_a_client_error_as_an_answer_but_not_a_server_error():
    codes = {"/missing": 404, "/broken": 503}

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(codes[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        waits.wait_http(f"{base}/missing", 2)
        with pytest.raises(NevError, match=r"/broken did not answer .*/broken within 0 s"):
            waits.wait_http(f"{base}/broken", 0.3)
    finally:
        srv.shutdown()
        srv.server_close()


def test_waits_stop_at_once_when_the_recorded_process_is_gone(tmp_path):
    gone = ProcRec(key="gpu9.pool", host="gpu9", pid=2 ** 22 + 1, start=1, argv=[])
    port = socket.create_server(("127.0.0.1", 0))
    closed = port.getsockname()[1]
    port.close()
    with pytest.raises(NevError, match=r"gpu9\.pool exited while starting; see .*gpu9-pool\.log"):
        waits.wait_port("127.0.0.1", closed, 30, gone, tmp_path / "gpu9-pool.log")


def test_a_teammates_keys_are_read_one_per_line_and_only_public_keys(tmp_path):
    from rig.box import state

    assert state.team_keys(tmp_path) == []
    f = state.team_keys_file(tmp_path)
    f.parent.mkdir(parents=True)
    f.write_text("ssh-ed25519 AAAAC3Nz b@dev\n# a comment\n\nnot a key\nssh-rsa AAAAB3 \n")
    assert state.team_keys(tmp_path) == ["ssh-ed25519 AAAAC3Nz b@dev", "ssh-rsa AAAAB3"]
