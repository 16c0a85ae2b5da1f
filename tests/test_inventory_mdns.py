"""mDNS discovery and the HTTP inventory across real network namespaces on a bridge.

Each host runs the real `nev rig advertise` in its own namespace; the collector
(`nev rig collect`) runs in the root namespace, browsing on the bridge address only.
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

from tests.inventory_netns import Hosts

ROOT = Path(__file__).resolve().parent.parent
DECLARED = {"schema": 1, "providers": ["self-hosted"], "aliases": {
    "fast": {"pool": "gpu0", "max_inflight": 8, "provider": "self-hosted", "keys": ["batch"]},
    "slow": {"pool": "gpu1", "max_inflight": 2, "provider": "self-hosted", "keys": ["batch"]}}}


@pytest.fixture(scope="module")
def hosts():
    h = Hosts(3)
    try:
        yield h
    finally:
        h.close()


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    decl = tmp_path / "folknet.json"
    decl.write_text(json.dumps(DECLARED))
    return {"NEV_INVENTORY": str(tmp_path / "inventory.json"), "NEV_FOLKNET_FILE": str(decl),
            "NEV_RIG_FILE": str(tmp_path / "rig.local.json"), "PYTHONPATH": str(ROOT)}


def nev(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=ROOT, env=dict(os.environ, **env),
                          capture_output=True, text=True, timeout=timeout)


def start_all(hosts: Hosts, tmp: Path, tag: str, env: dict[str, str] | None = None) -> dict[str, subprocess.Popen]:
    procs = {}
    for i, n in enumerate(hosts.names):
        inv = {"role": "pool" if i < 2 else "gateway", "hardware_class": "stand-in",
               "pools": [f"gpu{i}"] if i < 2 else [], "models": [], "gpus": []}
        procs[n] = hosts.advertise(n, tmp, inv, name=f"{n}-{tag}", env=env)
    for n in hosts.names:
        hosts.wait_for_line(tmp / f"{n}.advertise.log", "advertising")
    return procs


def test_collect_finds_every_host_with_its_inventory_and_exports_ansible(hosts, tmp_path, env):
    procs = start_all(hosts, tmp_path, "a")
    t0 = time.monotonic()
    r = nev(["rig", "collect", "--interface", hosts.bridge_addr, "--timeout", "5", "--expect", "3",
             "--ansible"], env)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    snap = json.loads(Path(env["NEV_INVENTORY"]).read_text())
    mine = {k: v for k, v in snap["hosts"].items() if k.endswith("-a")}
    assert sorted(mine) == ["ninv0-a", "ninv1-a", "ninv2-a"]
    assert {h["status"] for h in mine.values()} == {"up"}
    assert mine["ninv0-a"]["inventory"]["pools"] == ["gpu0"]
    assert mine["ninv0-a"]["addresses"] == [hosts.addrs["ninv0"]]
    assert mine["ninv2-a"]["role"] == "gateway"
    assert snap["aliases"]["fast"]["pool_hosts"] == ["ninv0-a"]
    assert snap["collected_at"] and snap["written_at"]
    assert took < 5, f"--expect 3 should stop the browse early, took {took:.1f} s"
    ans = json.loads(r.stdout)
    assert sorted(ans["pool"]["hosts"]) == ["ninv0-a", "ninv1-a"]
    assert ans["_meta"]["hostvars"]["ninv1-a"]["ansible_host"] == hosts.addrs["ninv1"]
    assert ans["_meta"]["hostvars"]["ninv1-a"]["nev_pools"] == ["gpu1"]
    for p in procs.values():
        assert hosts.stop(p) == 0


def test_clean_stop_disappears_and_sigkill_is_reported_down(hosts, tmp_path, env):
    procs = start_all(hosts, tmp_path, "b")
    log = tmp_path / "collect.log"
    collector = hosts.popen(None, [sys.executable, "-m", "rig.cli", "rig", "collect", "--interface",
                                   hosts.bridge_addr, "--timeout", "0.5", "--every", "1"], log, env)
    snap_path = Path(env["NEV_INVENTORY"])

    def wait_for(pred, what: str, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                snap = json.loads(snap_path.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                snap = None
            if snap is not None and pred(snap["hosts"]):
                return snap
            time.sleep(0.2)
        raise AssertionError(f"{what}: {snap_path.read_text() if snap_path.exists() else 'no snapshot'}\n"
                             f"{log.read_text()}")

    wait_for(lambda h: all(h.get(f"{n}-b", {}).get("status") == "up" for n in hosts.names), "all up")
    assert hosts.stop(procs["ninv1"], signal.SIGTERM) == 0
    hosts.stop(procs["ninv0"], signal.SIGKILL)
    snap = wait_for(lambda h: "ninv1-b" not in h and h.get("ninv0-b", {}).get("status") == "down",
                    "clean stop gone, SIGKILL down")
    assert snap["hosts"]["ninv2-b"]["status"] == "up"
    assert "unreachable" in snap["hosts"]["ninv0-b"]["error"]
    assert "ninv0-b" in snap["hosts"], "mDNS still lists the killed host"
    assert hosts.stop(collector) == 143
    hosts.stop(procs["ninv2"])


def test_http_inventory_never_serves_a_key_or_token(hosts, tmp_path):
    secret = "sk-inventory-test-" + os.urandom(12).hex()
    token = os.urandom(20).hex()
    inv = {"role": "gateway", "hardware_class": "stand-in", "api_key": secret,
           "software": {"litellm": "1.108", "master_key": secret},
           "serving": [{"unit": "litellm", "env": f"LITELLM_MASTER_KEY={secret}",
                        "url": f"http://batch:{token}@198.18.200.20:4000"}],
           "notes": f"Authorization: Bearer {secret}"}
    p = hosts.advertise("ninv2", tmp_path, inv, port=8788, name="ninv2-s",
                        env={"NEV_MODEL_API_KEY": secret, "NEV_FORGE_TOKEN": token})
    hosts.wait_for_line(tmp_path / "ninv2.advertise.log", "advertising")
    body = requests.get(f"http://{hosts.addrs['ninv2']}:8788/inventory", timeout=5).text
    assert secret not in body and token not in body
    doc = json.loads(body)
    assert "api_key" not in doc and "master_key" not in doc["software"]
    assert doc["role"] == "gateway" and doc["software"]["litellm"] == "1.108"
    log = (tmp_path / "ninv2.advertise.log").read_text()
    assert "field software.master_key dropped" in log and "field api_key ignored" in log
    assert secret not in log and token not in log
    # read-only: no method but GET changes or answers anything
    assert requests.post(f"http://{hosts.addrs['ninv2']}:8788/inventory", timeout=5).status_code == 405
    assert hosts.stop(p) == 0


def test_advertise_refuses_all_interfaces_and_no_interface(env):
    r = nev(["rig", "advertise", "--interface", "0.0.0.0"], env)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "every interface" in r.stderr
    r = nev(["rig", "advertise"], dict(env, NEV_MDNS_INTERFACE=""))
    assert r.returncode == 2 and "--interface" in r.stderr


def test_static_seeds_reach_hosts_mdns_cannot(hosts, tmp_path, env):
    p = hosts.advertise("ninv1", tmp_path, {"role": "pool", "pools": ["gpu1"]}, port=8789, name="ninv1-seed")
    hosts.wait_for_line(tmp_path / "ninv1.advertise.log", "advertising")
    Path(env["NEV_RIG_FILE"]).write_text(json.dumps({"roles": {}, "seeds": [
        f"http://{hosts.addrs['ninv1']}:8789/inventory", f"http://{hosts.addrs['ninv2']}:8799/inventory"]}))
    r = nev(["rig", "collect", "--json"], dict(env, NEV_MDNS_INTERFACE=""))
    assert r.returncode == 0, r.stderr
    assert "mDNS browse skipped" in r.stderr
    got = json.loads(r.stdout)
    assert got["ninv1-seed"]["status"] == "up" and got["ninv1-seed"]["sources"] == ["seed"]
    dead = got[f"http://{hosts.addrs['ninv2']}:8799/inventory"]
    assert dead["status"] == "down" and "unreachable" in dead["error"]
    assert hosts.stop(p) == 0
