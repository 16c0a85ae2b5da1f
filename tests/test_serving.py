"""The serving commands' pure parts: the declared roles, `show stat` parsing, the last-ready-replica
refusal and the steps each verb takes."""

from __future__ import annotations

import json

import pytest

from lanes.base.errors import ConfigError, UsageError
from rig import rigfile
from rig.serving import actions, declared
from rig.serving.haproxy import Server, parse_stat


def unit(host: str, name: str, **more: object) -> dict:
    return {"host": host, "start": f"/usr/bin/systemctl start {name}", "stop": f"/usr/bin/systemctl stop {name}",
            "status": f"/usr/bin/systemctl is-active --quiet {name}", **more}


RIG = {"roles": {"proxy": {"hosts": ["root@proxy"], "admin": "socat stdio /run/haproxy/admin.sock"}},
       "serving": {
           "flashnext": {"proxy": "proxy", "backend": "be_fn", "aliases": ["qwen3.8-flash-next"],
                         "replicas": {"r0": unit("admin@arm1", "fn", server="n1", sudo=True),
                                      "r1": unit("admin@arm2", "fn", server="n2", sudo=True)}},
           "dsv": {"proxy": "proxy", "backend": "be_dsv", "aliases": ["deepseek-v4.1-flash"], "start_timeout": 600,
                   "replicas": {"pair": unit("admin@arm3", "dsv-pair", server="dsv", halves=["head", "worker"])}}}}


def load(tmp_path, data: dict) -> rigfile.RigFile:
    p = tmp_path / "rig.local.json"
    p.write_text(json.dumps(data))
    return rigfile.load(p)


def test_the_rig_file_declares_serving_roles_with_their_replicas_and_a_pair(tmp_path):
    rig = load(tmp_path, RIG)
    fn = rig.serving["flashnext"]
    assert fn.backend == "be_fn" and list(fn.replicas) == ["r0", "r1"] and fn.replicas["r1"].server == "n2"
    assert fn.replicas["r0"].command("stop") == "sudo -n /usr/bin/systemctl stop fn"
    assert rig.serving["dsv"].replicas["pair"].halves == ("head", "worker")
    assert rig.serving["dsv"].start_timeout == 600 and rig.roles["proxy"].admin.startswith("socat")


def test_a_bad_serving_field_is_named(tmp_path):
    bad = json.loads(json.dumps(RIG))
    bad["serving"]["dsv"]["proxy"] = "nope"
    with pytest.raises(ConfigError, match=r"serving\.dsv\.proxy"):
        load(tmp_path, bad)
    bad = json.loads(json.dumps(RIG))
    bad["serving"]["flashnext"]["replicas"]["r0"]["stat"] = "x"
    with pytest.raises(ConfigError, match=r"serving\.flashnext\.replicas\.r0\.stat"):
        load(tmp_path, bad)


def test_a_pair_half_is_refused_and_a_role_means_all_its_replicas(tmp_path):
    rig = load(tmp_path, RIG)
    with pytest.raises(UsageError, match="one half of the pair dsv/pair .* nev rig start dsv/pair"):
        declared.resolve(rig.serving, "dsv/worker", "start")
    role, reps = declared.resolve(rig.serving, "flashnext", "drain")
    assert [r.ref for r in reps] == ["flashnext/r0", "flashnext/r1"]
    with pytest.raises(UsageError, match="no replica 'r9'"):
        declared.resolve(rig.serving, "flashnext/r9", "stop")


STAT = """# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,weight
fe_fn,FRONTEND,,,3,5,512,40,OPEN,
be_fn,n1,0,0,2,4,8,20,UP,1
be_fn,n2,1,1,4,8,8,20,DRAIN,0
be_fn,BACKEND,0,0,6,8,,40,UP,1
be_dsv,dsv,0,0,0,2,2,3,MAINT,1
"""


def test_show_stat_gives_each_server_its_state_and_calls_in_flight():
    rows = {s.name: s for s in parse_stat(STAT)}
    assert set(rows) == {"n1", "n2", "dsv"}
    assert rows["n1"].ready and rows["n1"].in_flight == 2 and rows["n1"].slim == 8
    assert rows["n2"].state == "drained" and rows["n2"].in_flight == 5
    assert rows["dsv"].state == "stopped" and not rows["dsv"].ready


def srv(backend: str, name: str, status: str) -> Server:
    return Server(backend, name, status, 0, 0, 8, 1)


def test_the_last_ready_replica_of_an_alias_is_found(tmp_path):
    rig = load(tmp_path, RIG)
    fn = rig.serving["flashnext"]
    both = [srv("be_fn", "n1", "UP"), srv("be_fn", "n2", "no check")]
    assert actions.orphaned(rig.serving, both, [fn.replicas["r0"]], [fn]) == []
    one = [srv("be_fn", "n1", "UP"), srv("be_fn", "n2", "DRAIN")]
    assert actions.orphaned(rig.serving, one, [fn.replicas["r0"]], [fn]) == ["qwen3.8-flash-next"]
    assert actions.orphaned(rig.serving, both, list(fn.replicas.values()), [fn]) == ["qwen3.8-flash-next"]


def test_each_verb_takes_the_backend_out_before_the_unit_stops(tmp_path):
    rig = load(tmp_path, RIG)
    fn = rig.serving["flashnext"]
    steps = actions.plan("drain", fn, [fn.replicas["r0"]], 60)
    assert [s.split(" ")[0] for s in steps] == ["check", "set", "wait", "stop", "set"]
    assert "to drain" in steps[1] and "grace 60 s" in steps[2] and "to maint" in steps[4]
    assert [s.split(" ")[0] for s in actions.plan("stop", fn, [fn.replicas["r0"]], 60)] == ["check", "set", "stop"]
    up = actions.plan("start", fn, [fn.replicas["r0"]], 60)
    assert [s.split(" ")[0] for s in up] == ["start", "wait", "set", "one"] and "to ready" in up[2]


def test_drift_compares_the_three_sides_one_difference_per_line(tmp_path):
    from bench import folknet
    from rig.serving.drift import Live, compare

    rig = load(tmp_path, RIG)
    f = tmp_path / "folknet.json"
    f.write_text(json.dumps({"providers": ["self-hosted"], "aliases": {
        "qwen3.8-flash-next": {"pool": "p", "max_inflight": 16, "provider": "self-hosted", "keys": ["batch"]},
        "deepseek-v4.1-flash": {"pool": "p", "max_inflight": 2, "provider": "self-hosted", "keys": ["batch"]},
        "glm-5.3-flash": {"pool": "p", "max_inflight": 8, "provider": "self-hosted", "retired": "2026-09-22"}}}))
    declared = folknet.load(f)
    servers = [srv("be_fn", "n1", "UP"), srv("be_fn", "n2", "UP"), Server("be_dsv", "dsv", "MAINT", 0, 0, 2, 1)]
    live = Live(served=["deepseek-v4.1-flash", "glm-5.3-flash", "qwen3.8-flash-next"], servers=servers,
                keys={"batch": ["qwen3.8-flash-next", "glm-5.3-flash"]})
    kinds = sorted((d.kind, d.alias) for d in compare(declared, rig.serving, live))
    assert kinds == [("key-missing", "deepseek-v4.1-flash"), ("key-too-much", "glm-5.3-flash"),
                     ("none-up", "deepseek-v4.1-flash"), ("retired-served", "glm-5.3-flash")]
    live = Live(served=["qwen3.8-flash-next"], servers=[srv("be_fn", "n1", "UP"), Server("be_fn", "n2", "UP", 0, 0, 4, 1)])
    assert [(d.kind, d.alias) for d in compare(declared, rig.serving, live)] == [
        ("missing", "deepseek-v4.1-flash"), ("limit", "qwen3.8-flash-next")]


def _entry(alias: str, base: str) -> dict:
    return {"model_name": alias, "litellm_params": {"model": f"openai/{alias}", "api_base": base, "max_retries": 0}}


def test_drift_fix_regenerates_the_model_list_keeping_served_entries_and_copying_a_pools_entry(tmp_path):
    from bench import folknet
    from rig.serving.fix import regenerate

    rig = load(tmp_path, RIG)
    f = tmp_path / "folknet.json"
    f.write_text(json.dumps({"providers": ["self-hosted"], "aliases": {
        "qwen3.8-flash-next": {"pool": "flashnext", "max_inflight": 8, "provider": "self-hosted"},
        "qwen3.8-flash-next-2": {"pool": "flashnext", "max_inflight": 8, "provider": "self-hosted"},
        "kimi-3": {"pool": "elsewhere", "max_inflight": 8, "provider": "self-hosted"},
        "glm-5.3-flash": {"pool": "flashnext", "max_inflight": 8, "provider": "self-hosted", "retired": "2026-09-22"}}}))
    config = {"model_list": [_entry("qwen3.8-flash-next", "http://proxy:8101/v1"),
                             _entry("glm-5.3-flash", "http://proxy:8101/v1"), _entry("stray", "http://x/v1")],
              "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"}}
    gen = regenerate(config, folknet.load(f), rig.serving)
    assert gen.removed == ["glm-5.3-flash", "stray"] and gen.added == ["qwen3.8-flash-next-2"]
    assert gen.unfixable == ["kimi-3"]                      # nothing of its pool to copy
    limited = [_entry("qwen3.8-flash-next", "http://proxy:8101/v1"), _entry("qwen3.8-flash-next-2", "http://proxy:8101/v1")]
    for e in limited:
        e["litellm_params"]["max_parallel_requests"] = 8           # the declared limit, enforced by the gateway
    assert gen.config["model_list"] == limited
    assert gen.config["general_settings"] == config["general_settings"]
    assert [e["model_name"] for e in config["model_list"]] == ["qwen3.8-flash-next", "glm-5.3-flash", "stray"]
    again = regenerate(gen.config, folknet.load(f), rig.serving)
    assert not again.changed and again.unfixable == ["kimi-3"]


def test_drift_fix_sets_each_aliases_declared_limits_and_the_router_settings_that_enforce_them(tmp_path):
    from bench import folknet
    from rig.serving.fix import regenerate

    rig = load(tmp_path, RIG)
    f = tmp_path / "folknet.json"
    f.write_text(json.dumps({"providers": ["self-hosted"], "aliases": {
        "qwen3.8-flash-next": {"pool": "flashnext", "max_inflight": 4, "rpm": 600, "provider": "self-hosted"},
        "deepseek-v4.1-flash": {"pool": "dsv", "max_inflight": 2, "provider": "self-hosted"}}}))
    fast = _entry("qwen3.8-flash-next", "http://proxy:8101/v1")
    fast["litellm_params"].update(max_parallel_requests=8, tpm=1000)
    dsv = _entry("deepseek-v4.1-flash", "http://proxy:8102/v1")
    dsv["litellm_params"]["max_parallel_requests"] = 2
    config = {"model_list": [fast, dsv], "router_settings": {"num_retries": 0}}
    gen = regenerate(config, folknet.load(f), rig.serving)
    assert gen.changed and not gen.removed and not gen.added
    lp = gen.config["model_list"][0]["litellm_params"]
    assert (lp["max_parallel_requests"], lp["rpm"], "tpm" in lp) == (4, 600, False)
    assert gen.config["model_list"][1] == dsv                        # already as declared: untouched
    assert gen.limited == ["qwen3.8-flash-next: max_parallel_requests 8 -> 4, rpm none -> 600, tpm 1000 -> none",
                           "router_settings.routing_strategy: unset -> usage-based-routing-v2",
                           "router_settings.disable_cooldowns: unset -> True"]
    assert gen.config["router_settings"]["num_retries"] == 0
    assert not regenerate(gen.config, folknet.load(f), rig.serving).changed


def test_drift_names_a_gateway_limit_that_differs_from_the_declaration(tmp_path):
    from bench import folknet
    from rig.serving.drift import Live, compare, parse_limits

    rig = load(tmp_path, RIG)
    f = tmp_path / "folknet.json"
    f.write_text(json.dumps({"providers": ["self-hosted"], "aliases": {
        "qwen3.8-flash-next": {"pool": "p", "max_inflight": 8, "tpm": 90000, "provider": "self-hosted"},
        "deepseek-v4.1-flash": {"pool": "p", "max_inflight": 2, "provider": "self-hosted"}}}))
    info = {"data": [
        {"model_name": "qwen3.8-flash-next", "litellm_params": {"model": "openai/x", "max_parallel_requests": 4}},
        {"model_name": "qwen3.8-flash-next", "litellm_params": {"model": "openai/y", "max_parallel_requests": 4}},
        {"model_name": "deepseek-v4.1-flash", "litellm_params": {"model": "openai/z", "max_parallel_requests": 2,
                                                                  "rpm": 30}}]}
    limits = parse_limits(info)
    assert limits == {"qwen3.8-flash-next": {"max_parallel_requests": 8},
                      "deepseek-v4.1-flash": {"max_parallel_requests": 2, "rpm": 30}}
    live = Live(served=sorted(limits), servers=[], limits=limits)
    assert [(d.kind, d.message) for d in compare(folknet.load(f), rig.serving, live)] == [
        ("gateway-limit", "qwen3.8-flash-next: declared tpm 90000, the gateway's tpm none"),
        ("gateway-limit", "deepseek-v4.1-flash: declared rpm none, the gateway's rpm 30")]


def test_drift_fix_gives_each_key_the_active_aliases_that_grant_it(tmp_path):
    from bench import folknet
    from rig.serving.fix import regenerate_keys

    f = tmp_path / "folknet.json"
    f.write_text(json.dumps({"providers": ["self-hosted"], "aliases": {
        "a": {"pool": "p", "max_inflight": 8, "provider": "self-hosted", "keys": ["batch", "writer"]},
        "b": {"pool": "p", "max_inflight": 8, "provider": "self-hosted", "keys": ["batch"]},
        "old": {"pool": "p", "max_inflight": 8, "provider": "self-hosted", "keys": ["batch"], "retired": "2026-01-01"}}}))
    keys = {"k1": {"name": "batch", "models": ["old", "a"], "sha256": "d1"},
            "k2": {"name": "writer", "models": ["a"], "sha256": "d2"}}
    new, changes = regenerate_keys(keys, folknet.load(f))
    assert new == {"k1": {"name": "batch", "models": ["a", "b"], "sha256": "d1"},
                   "k2": {"name": "writer", "models": ["a"], "sha256": "d2"}}
    assert changes == ["key batch: no more old; now b"]
    assert keys["k1"]["models"] == ["old", "a"]                   # the input is left as it was
    assert regenerate_keys(new, folknet.load(f))[1] == []
    job = {"j": {"name": "job:x", "job": "x", "models": ["old"], "sha256": "d3", "expires": 1}}
    assert regenerate_keys({**keys, **job}, folknet.load(f))[0]["j"] == job["j"]   # a job's own key: left alone


LOG = """## 2026-12-01T17:30:20Z drain flashnext/r0
- who: root@vm
- replicas: flashnext/r0 (be_fn)
- drain flashnext/r0: set be_fn/n1 to drain (runtime API)
- result: done

## 2026-12-01T17:31:00Z stop flashnext
- who: ops@laptop
- replicas: flashnext/r0, flashnext/r1 (be_fn)
- result: done
"""


def test_a_drained_or_stopped_replica_shows_as_such_and_its_alias_as_stopped_not_failing(tmp_path):
    from rig.serving.state import alias_status, last_actions, replicas

    rig = load(tmp_path, RIG)
    acts = last_actions(LOG)
    assert acts["flashnext/r0"].verb == "stop" and acts["flashnext/r1"].who == "ops@laptop"
    servers = [srv("be_fn", "n1", "DRAIN"), srv("be_fn", "n2", "MAINT"), srv("be_dsv", "dsv", "DOWN")]
    reps = replicas(rig.serving, servers, last_actions(LOG.split("\n\n")[0]))
    assert [(r.replica, r.state, r.by) for r in reps] == [
        ("flashnext/r0", "drained", "drain by root@vm at 2026-12-01T17:30:20Z"), ("flashnext/r1", "stopped", ""),
        ("dsv/pair", "down", "")]
    assert alias_status("qwen3.8-flash-next", "failing", reps) == "stopped"   # an operator's doing
    assert alias_status("deepseek-v4.1-flash", "failing", reps) == "failing"  # down on its own
    reps = replicas(rig.serving, [srv("be_fn", "n1", "MAINT")], last_actions(LOG.split("\n\n")[0]))
    assert reps[0].state == "drained"                                          # a drain ends in maintenance
    reps = replicas(rig.serving, [srv("be_fn", "n1", "UP"), srv("be_fn", "n2", "MAINT")], {})
    assert alias_status("qwen3.8-flash-next", "failing", reps) == "failing"   # one replica still ready
