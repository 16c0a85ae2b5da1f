"""mDNS discovery and the HTTP inventory on the rig-in-a-box: every box host advertises.

Each host runs the real `nev rig advertise` in its own network namespace; the collector
(`nev rig collect`) runs on the rig network (the bridge's own namespace, browsing on the bridge
address only): the development box has no way onto the rig network, and mDNS does not cross the
jump host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from rig.box.advertisers import Advertisers
from rig.box.netns import inside

ROOT = Path(__file__).resolve().parent.parent
DECLARED = {"schema": 1, "providers": ["self-hosted"], "aliases": {
    "fast": {"pool": "gpu0", "max_inflight": 8, "provider": "self-hosted", "keys": ["batch"]},
    "slow": {"pool": "gpu1", "max_inflight": 2, "provider": "self-hosted", "keys": ["batch"]}}}


@pytest.fixture()
def adv(box, tmp_path):
    a = Advertisers(box, tmp_path)
    try:
        yield a
    finally:
        a.close()


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    decl = tmp_path / "folknet.json"
    decl.write_text(json.dumps(DECLARED))
    return {"NEV_INVENTORY": str(tmp_path / "inventory.json"), "NEV_FOLKNET_FILE": str(decl),
            "NEV_RIG_FILE": str(tmp_path / "rig.local.json"), "PYTHONPATH": str(ROOT)}


def nev(args: list[str], env: dict[str, str], timeout: float = 60,
        netns: str | None = None) -> subprocess.CompletedProcess:
    where = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.run([*where, sys.executable, "-m", "rig.cli", *args], cwd=ROOT, env=dict(os.environ, **env),
                          capture_output=True, text=True, timeout=timeout)


def inventory_of(box):
    def inv(host: str) -> dict:
        role = box.hosts[host]["role"]
        return {"role": role, "hardware_class": "stand-in", "pools": [host] if role == "pool" else [],
                "models": [], "gpus": []}
    return inv


def mine(snap: dict, tag: str) -> dict:
    return {k.removesuffix(f"-{tag}"): v for k, v in snap["hosts"].items() if k.endswith(f"-{tag}")}


def test_collect_finds_every_box_host_with_its_inventory_and_exports_ansible(box, adv, env):
    # whatever the box already advertises by itself counts too
    before = nev(["rig", "collect", "--interface", box.bridge_addr, "--timeout", "2", "--json"], env, netns=box.rig_netns)
    assert before.returncode == 0, before.stderr
    already = len(json.loads(before.stdout))
    procs = adv.start_all("a", inventory_of(box))
    t0 = time.monotonic()
    r = nev(["rig", "collect", "--interface", box.bridge_addr, "--timeout", "8",
             "--expect", str(already + len(box.hosts)), "--ansible"], env, netns=box.rig_netns)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    snap = json.loads(Path(env["NEV_INVENTORY"]).read_text())
    hosts = mine(snap, "a")
    assert sorted(hosts) == sorted(box.hosts)
    assert {h["status"] for h in hosts.values()} == {"up"}
    for name, h in hosts.items():
        assert h["addresses"] == [box.hosts[name]["addr"]]
        assert h["role"] == box.hosts[name]["role"]
    assert hosts["gpu0"]["inventory"]["pools"] == ["gpu0"]
    assert "gpu0-a" in snap["aliases"]["fast"]["pool_hosts"]           # (the box's own gpu0 may be there)
    assert set(snap["aliases"]["fast"]["pool_hosts"]) <= {"gpu0-a", "gpu0"}
    assert snap["collected_at"] and snap["written_at"]
    assert took < 8, f"--expect should stop the browse once every host is found, took {took:.1f} s"
    ans = json.loads(r.stdout)
    ours = [h for h in ans["lane"]["hosts"] if h.endswith("-a")]          # the box's own advertise too
    assert sorted(ours) == [f"{h}-a" for h in sorted(box.hosts) if h.startswith("lane")]
    assert ans["_meta"]["hostvars"]["gpu1-a"]["ansible_host"] == box.hosts["gpu1"]["addr"]
    assert ans["_meta"]["hostvars"]["gpu1-a"]["nev_pools"] == ["gpu1"]
    for p in procs.values():
        assert adv.stop(p) == 0


def test_clean_stop_disappears_and_sigkill_is_reported_down(box, adv, env, tmp_path):
    procs = adv.start_all("b", inventory_of(box))
    log = tmp_path / "collect.log"
    collector = adv.popen(None, [sys.executable, "-m", "rig.cli", "rig", "collect", "--interface",
                                 box.bridge_addr, "--timeout", "0.5", "--every", "1"], log, env)
    snap_path = Path(env["NEV_INVENTORY"])

    def wait_for(pred, what: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                hosts = mine(json.loads(snap_path.read_text()), "b")
            except (FileNotFoundError, json.JSONDecodeError):
                hosts = None
            if hosts is not None and pred(hosts):
                return hosts
            time.sleep(0.2)
        raise AssertionError(f"{what}: {snap_path.read_text() if snap_path.exists() else 'no snapshot'}\n"
                             f"{log.read_text()}")

    wait_for(lambda h: len(h) == len(box.hosts) and all(x["status"] == "up" for x in h.values()), "all up")
    assert adv.stop(procs["gpu1"], signal.SIGTERM) == 0
    adv.stop(procs["gpu0"], signal.SIGKILL)
    hosts = wait_for(lambda h: "gpu1" not in h and h.get("gpu0", {}).get("status") == "down",
                     "clean stop gone, SIGKILL down")
    assert "unreachable" in hosts["gpu0"]["error"]
    assert {n for n, h in hosts.items() if h["status"] == "up"} == set(box.hosts) - {"gpu0", "gpu1"}
    assert adv.stop(collector) == 143
    for p in procs.values():
        adv.stop(p)


def box_secrets(box) -> dict[str, str]:
    """Every real key and token of the box, by the file that holds it."""
    files = [box.forge_token_file, getattr(box, "master_key_file", None),
             *(getattr(box, "keys", {}) or {}).values()]
    out = {}
    for f in files:
        if f and Path(f).exists():
            out[str(f)] = Path(f).read_text().strip()
    assert out, "the box has no key files"
    return out


def test_http_inventory_never_serves_a_key_or_token(box, adv, env):
    secrets = box_secrets(box)
    token = secrets[str(box.forge_token_file)]
    key = next((v for k, v in secrets.items() if k != str(box.forge_token_file)), "sk-" + os.urandom(12).hex())
    inv = {"role": "gateway", "hardware_class": "stand-in", "api_key": key,
           "software": {"litellm": "1.108", "master_key": key},
           "serving": [{"unit": "litellm", "env": f"LITELLM_MASTER_KEY={key}",
                        "url": f"http://nev:{token}@{box.forge_addr}/git/"}],
           "notes": f"Authorization: Bearer {key}; forge token {token}"}
    p = adv.start("gateway", "s2", inv, port=8791, env={"NEV_MODEL_API_KEY": key, "NEV_FORGE_TOKEN": token})
    adv.wait_for_line(adv.log("gateway", "s2"), "advertising")
    with inside(box.rig_netns):        # an inventory is read on the rig network
        body = requests.get(f"http://{adv.addr('gateway')}:8791/inventory", timeout=5).text
    doc = json.loads(body)
    assert "api_key" not in doc and "master_key" not in doc["software"]
    assert doc["role"] == "gateway" and doc["software"]["litellm"] == "1.108"
    log = adv.log("gateway", "s2").read_text()
    assert "field software.master_key dropped" in log and "field api_key ignored" in log
    # every inventory served on the box, including any the box runs itself, scanned for every key
    r = nev(["rig", "collect", "--interface", box.bridge_addr, "--timeout", "3", "--json"], env, netns=box.rig_netns)
    assert r.returncode == 0, r.stderr
    served = [body, log, r.stdout, Path(env["NEV_INVENTORY"]).read_text()]
    with inside(box.rig_netns):
        for h in json.loads(r.stdout).values():
            if h["url"] and h["status"] == "up":
                served.append(requests.get(h["url"], timeout=5).text)
    assert len(served) >= 5
    for where, secret in secrets.items():
        for text in served:
            assert secret not in text, f"the secret in {where} was served"
    # read-only: no method but GET answers
    with inside(box.rig_netns):
        assert requests.post(f"http://{adv.addr('gateway')}:8791/inventory", timeout=5).status_code == 405
        assert requests.head(f"http://{adv.addr('gateway')}:8791/inventory", timeout=5).status_code == 200
    assert adv.stop(p) == 0


def test_advertise_refuses_all_interfaces_and_no_interface(env):
    r = nev(["rig", "advertise", "--interface", "0.0.0.0"], env)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "every interface" in r.stderr
    r = nev(["rig", "advertise"], dict(env, NEV_MDNS_INTERFACE=""))
    assert r.returncode == 2 and "--interface" in r.stderr


def test_static_seeds_reach_hosts_mdns_cannot(box, adv, env):
    p = adv.start("lane1", "seed", {"role": "lane"}, port=8792)
    adv.wait_for_line(adv.log("lane1", "seed"), "advertising")
    dead = f"http://{adv.addr('proxy')}:8799/inventory"
    Path(env["NEV_RIG_FILE"]).write_text(json.dumps({"roles": {}, "seeds": [
        f"http://{adv.addr('lane1')}:8792/inventory", dead]}))
    r = nev(["rig", "collect", "--json"], dict(env, NEV_MDNS_INTERFACE=""), netns=box.rig_netns)
    assert r.returncode == 0, r.stderr
    assert "mDNS browse skipped" in r.stderr
    got = json.loads(r.stdout)
    assert got["lane1-seed"]["status"] == "up" and got["lane1-seed"]["sources"] == ["seed"]
    assert got[f"{adv.addr('proxy')}:8799"]["status"] == "down"
    assert "unreachable" in got[f"{adv.addr('proxy')}:8799"]["error"]
    # without a declared file, collect still records the hosts (and says so)
    r = nev(["rig", "collect", "--json"], dict(env, NEV_MDNS_INTERFACE="", NEV_FOLKNET_FILE="/nonexistent.json"),
            netns=box.rig_netns)
    assert r.returncode == 0 and "collecting hosts only" in r.stderr
    assert json.loads(r.stdout)["lane1-seed"]["status"] == "up"
    assert adv.stop(p) == 0


def test_second_host_with_the_same_name_is_refused_clearly(box, adv):
    first = adv.start("lane0", "dup", {"role": "lane"}, port=8793)
    adv.wait_for_line(adv.log("lane0", "dup"), "advertising")
    second = adv.popen("lane1", [sys.executable, "-m", "rig.cli", "rig", "advertise", "--interface",
                                 adv.addr("lane1"), "--port", "8793", "--name", "lane0-dup"],
                       adv.tmp / "dup2.log")
    assert second.wait(30) == 1
    out = (adv.tmp / "dup2.log").read_text().strip().splitlines()
    assert out[-1] == "nev: another host already advertises 'lane0-dup' on this network; give this one its own --name"
    assert "Traceback" not in "\n".join(out)
    # the refused one served nothing after exiting, and the first one still answers
    with inside(box.rig_netns):
        assert requests.get(f"http://{adv.addr('lane0')}:8793/inventory", timeout=5).status_code == 200
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://{adv.addr('lane1')}:8793/inventory", timeout=5)
    assert adv.stop(first) == 0
