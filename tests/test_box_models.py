"""The box's model path: the real LiteLLM proxy -> Debian's HAProxy -> the stand-in pools."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from rig.box.haproxy import clear_counters, server_row
from rig.box.netns import inside
from rig.box.poolctl import pool_control

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, body: dict, key: str | None = None, timeout: float = 60) -> tuple[int, dict, dict]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with OPENER.open(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, (json.loads(raw) if raw.startswith(b"{") else {"raw": raw.decode()}), dict(e.headers)


def get(url: str, key: str | None = None) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with OPENER.open(req, timeout=30) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, {}, dict(e.headers)


def key(box, name: str) -> str:
    return box.keys[name].read_text().strip()


def chat(box, alias: str, keyname: str = "batch", **extra) -> tuple[int, dict, dict]:
    body = {"model": alias, "messages": [{"role": "user", "content": "Write clamp_px in Rust."}], **extra}
    return post(f"{box.gateway_local_url}/v1/chat/completions", body, key(box, keyname))


@pytest.fixture(autouse=True)
def fresh_pools(box):
    for p in box.pools:
        pool_control(box, p, reset=True)
    yield
    for p in box.pools:
        pool_control(box, p, reset=True)


SAMPLING = "qwen3.8-27b-fast"      # gpu0, keys batch + writer
CAPACITY = "deepseek-v4.1-flash"   # gpu1 (maxconn 2), key batch only


def test_completion_through_the_proxy_returns_the_requested_n_choices(box):
    code, body, _ = chat(box, SAMPLING, n=5, seed=7)
    assert code == 200, body
    assert len(body["choices"]) == 5
    assert all("fn clamp_px" in c["message"]["content"] for c in body["choices"])
    assert pool_control(box, "gpu0")["served"] == 1


def test_an_alias_outside_the_keys_list_gets_403(box):
    code, body, _ = chat(box, CAPACITY, keyname="writer")
    assert code == 403 and body["error"]["type"] == "key_model_access_denied"
    code, _, _ = chat(box, SAMPLING, keyname="writer")
    assert code == 200
    assert pool_control(box, "gpu1")["requests"] == 0


def test_an_unknown_key_gets_401_and_the_master_key_works(box):
    code, _, _ = post(f"{box.gateway_local_url}/v1/chat/completions", {"model": SAMPLING, "messages": []}, "sk-nope")
    assert code == 401
    assert box.master_key_file is not None
    code, body, _ = chat(box, CAPACITY, keyname="batch")
    assert code == 200
    code, body, _ = get(f"{box.gateway_local_url}/v1/models", box.master_key_file.read_text().strip())
    assert code == 200 and {m["id"] for m in body["data"]} == set(box.aliases)


def test_answers_are_deterministic_by_seed_and_request(box):
    a = chat(box, SAMPLING, n=4, seed=11)[1]["choices"]
    b = chat(box, SAMPLING, n=4, seed=11)[1]["choices"]
    assert [c["message"]["content"] for c in a] == [c["message"]["content"] for c in b]
    others = {tuple(c["message"]["content"] for c in chat(box, SAMPLING, n=4, seed=s)[1]["choices"])
              for s in range(12, 18)}
    assert len(others) > 1


def test_requests_past_maxconn_wait_in_haproxys_queue_and_are_served_in_turn(box):
    pool = box.pools["gpu1"]
    assert pool.max_inflight == 2
    # The pool itself would take 8 at once: only HAProxy's maxconn holds them back. Straight to
    # HAProxy from the rig network: the gateway in front would answer 429 past the alias's limit
    # itself (tests/test_gateway_limits_box.py), so HAProxy's queue is what is left behind it.
    pool_control(box, "gpu1", delay=0.5, max_inflight=8)
    clear_counters(box.proxy_stats_socket)
    assert int(server_row(box.proxy_stats_socket, "be_gpu1", "BACKEND")["qmax"]) == 0
    results: list[int] = []
    lock = threading.Lock()
    url = f"http://{box.proxy_addr}:{pool.proxy_port}/v1/chat/completions"
    body = {"model": CAPACITY, "messages": [{"role": "user", "content": "Write clamp_px in Rust."}]}

    def one() -> None:
        code, _, _ = post(url, body)
        with lock:
            results.append(code)

    t0 = time.monotonic()
    with inside(box.rig_netns):
        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    elapsed = time.monotonic() - t0
    assert results == [200] * 6
    st = pool_control(box, "gpu1")
    assert st["served"] == 6 and st["max_inflight_seen"] == 2
    assert elapsed >= 3 * 0.5 - 0.05        # three rounds of two
    srv = server_row(box.proxy_stats_socket, "be_gpu1", "gpu1")
    backend = server_row(box.proxy_stats_socket, "be_gpu1", "BACKEND")
    assert int(srv["smax"]) == 2                     # never more than maxconn at the pool
    assert int(backend["qmax"]) + int(srv["qmax"]) >= 2   # the rest waited in HAProxy's queue


def test_pool_answers_429_then_recovers_when_told(box):
    pool_control(box, "gpu0", fail="429", fail_times=1)
    code, body, _ = chat(box, SAMPLING)
    assert code == 429, body
    assert chat(box, SAMPLING)[0] == 200
    assert pool_control(box, "gpu0")["failed"] == {"429": 1}


def test_pool_answers_503_on_demand(box):
    pool_control(box, "gpu1", fail="503")
    code, _, _ = chat(box, CAPACITY)
    assert code == 503
    with inside(box.rig_netns):      # a pool is reached directly only from inside the rig network
        code, _, _ = get(f"http://{box.pools['gpu1'].addr}:{box.pools['gpu1'].port}/health")
    assert code == 503


def test_a_hanging_pool_holds_the_request_until_released(box):
    p = box.pools["gpu0"]
    pool_control(box, "gpu0", fail="hang")
    url = f"http://{p.addr}:{p.port}/v1/chat/completions"
    body = {"model": SAMPLING, "messages": [{"role": "user", "content": "clamp_px"}]}
    with inside(box.rig_netns), pytest.raises((TimeoutError, urllib.error.URLError)):
        post(url, body, timeout=1.0)
    pool_control(box, "gpu0", fail=None)
    with inside(box.rig_netns):
        assert post(url, body, timeout=10)[0] == 200


def test_tokens_per_second_slows_answers(box):
    pool_control(box, "gpu0", tokens_per_s=100)
    t0 = time.monotonic()
    code, body, _ = chat(box, SAMPLING, n=3)
    assert code == 200
    assert time.monotonic() - t0 >= body["usage"]["completion_tokens"] / 100 - 0.05


def test_the_bank_is_data_a_new_file_changes_the_answers(box, tmp_path):
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps({"functions": {"only_fn": {"sampling": [
        {"kind": "broken", "code": "fn only_fn( {"}]}}}))
    pool_control(box, "gpu0", bank=str(bank))
    code, body, _ = chat(box, SAMPLING, n=2)
    assert code == 200 and all("fn only_fn( {" in c["message"]["content"] for c in body["choices"])


def test_the_pool_is_named_a_stand_in_and_lists_its_model(box):
    p = box.pools["gpu1"]
    with inside(box.rig_netns):
        code, body, headers = get(f"http://{p.addr}:{p.port}/v1/models")
    assert code == 200 and [m["id"] for m in body["data"]] == [CAPACITY]
    assert "stand-in" in headers["X-Stand-In"]
    assert "stand-in" in pool_control(box, "gpu1")["stand_in"]


def test_control_refuses_an_unknown_fault(box):
    with pytest.raises(urllib.error.HTTPError) as e:
        pool_control(box, "gpu0", fail="explode")
    assert e.value.code == 400


def test_box_env_points_nev_at_the_gateway_and_the_declared_aliases(box_env):
    import os

    from bench import folknet

    assert os.environ["NEV_MODEL_URL"] == box_env.gateway_local_url     # the dev box's forward
    assert os.environ["NEV_LANE_MODEL_URL"] == box_env.gateway_url      # the lanes' rig address
    kf = os.environ["NEV_MODEL_KEY_FILE"]
    assert oct(os.stat(kf).st_mode & 0o777) == "0o600"
    assert all(key(box_env, k) not in v for k in box_env.keys for v in box_env.env.values())
    fk = folknet.load(folknet.default_path())
    assert {a: x.pool for a, x in fk.aliases.items()} == box_env.aliases
    assert fk.aliases[CAPACITY].keys == ["batch"]


def test_rig_file_roles_reach_the_service_hosts_as_root_over_pinned_ssh(box):
    import subprocess

    from rig import rigfile

    assert box.rig_file is not None
    rf = rigfile.load(box.rig_file)
    proxy = rf.roles["proxy"]

    def ssh_root(host: str, cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", str(box.ssh_config), host.split("@")[1], cmd],
                              capture_output=True, text=True, timeout=60)

    r = ssh_root(proxy.hosts[0], "id -un; " + proxy.validate.format(path=proxy.files[0]))
    assert r.returncode == 0 and r.stdout.split()[0] == "root", r.stderr
    pid_before = pool_control(box, "gpu0")  # the pools are untouched by a proxy reload
    r = ssh_root(proxy.hosts[0], proxy.reload)
    assert r.returncode == 0, r.stderr
    time.sleep(0.5)
    assert chat(box, SAMPLING)[0] == 200
    assert pool_control(box, "gpu0")["served"] == pid_before["served"] + 1
    gw = rf.roles["gateway"]
    r = ssh_root(gw.hosts[0], gw.health)
    assert r.returncode == 0 and "alive" in r.stdout.lower(), r.stdout + r.stderr
