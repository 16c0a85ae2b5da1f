"""Readiness probes through the real LiteLLM proxy in front of stand-in pools on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from bench import folknet
from rig.inventory import probe
from rig.inventory.probe import Gateway, Policy
from tests.inventory_standin import LiteLLMProxy, StandinPool

ROOT = Path(__file__).resolve().parent.parent
ALIASES = ("fast", "slow", "hangs", "checked")


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    work = tmp_path_factory.mktemp("gw")
    pools = {a: StandinPool() for a in ALIASES}
    key = "sk-probe-" + os.urandom(16).hex()
    gw = LiteLLMProxy(work, {a: p.url for a, p in pools.items()}, key)
    key_file = work / "batch.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    decl = work / "folknet.json"
    decl.write_text(json.dumps({"schema": 1, "providers": ["self-hosted"], "aliases": {
        "fast": {"pool": "gpu0", "max_inflight": 8, "provider": "self-hosted", "keys": ["batch"]},
        "slow": {"pool": "gpu1", "max_inflight": 2, "provider": "self-hosted", "keys": ["batch"]},
        "hangs": {"pool": "gpu1", "max_inflight": 2, "provider": "self-hosted", "keys": ["batch"]},
        "checked": {"pool": "gpu0", "max_inflight": 2, "provider": "self-hosted", "keys": ["batch"],
                    "health": f"{pools['checked'].url}/health"},
        "old": {"pool": "gpu0", "max_inflight": 8, "provider": "self-hosted", "retired": "2026-09-22",
                "keys": []}}}))
    try:
        yield {"pools": pools, "gw": gw, "key": key, "key_file": key_file, "declared": folknet.load(decl),
               "declared_path": decl}
    finally:
        for p in pools.values():
            p.close()  # releases hanging requests first, so the proxy stops at once
        gw.close()


@pytest.fixture(autouse=True)
def all_ok(rig):
    for a, p in rig["pools"].items():
        p.set_mode(a, "ok")
        p.health_code = 200


def gateway(rig) -> Gateway:
    return Gateway(rig["gw"].url, rig["key"])


def one_alias(rig, name: str) -> folknet.Folknet:
    d = rig["declared"]
    return folknet.Folknet(path=d.path, aliases={name: d.aliases[name]}, providers=d.providers)


def test_pool_answering_503_fails_after_n_rounds_and_recovers_after_m(rig, tmp_path):
    snap_path = tmp_path / "inventory.json"
    decl = one_alias(rig, "slow")
    policy = Policy(fails=2, oks=3)

    def status() -> str:
        return probe.run_round(snap_path, decl, gateway(rig), 10, policy)["aliases"]["slow"]["status"]

    assert status() == "ready"
    rig["pools"]["slow"].set_mode("slow", "503")
    assert [status(), status()] == ["ready", "failing"]
    snap = json.loads(snap_path.read_text())
    failing_since = snap["aliases"]["slow"]["since"]
    assert snap["aliases"]["slow"]["last_error"].split(":")[0] in ("HTTP 503", "HTTP 500")
    rig["pools"]["slow"].set_mode("slow", "ok")
    assert [status(), status(), status()] == ["failing", "failing", "ready"]
    snap = json.loads(snap_path.read_text())
    assert snap["aliases"]["slow"]["since"] >= failing_since
    assert snap["aliases"]["slow"]["last_answer"] == snap["probed_at"]


def test_hanging_pool_fails_at_the_timeout_without_delaying_the_others(rig, tmp_path):
    rig["pools"]["hangs"].set_mode("hangs", "hang")
    rig["pools"]["slow"].set_mode("slow", "ok", delay=1.0)
    aliases = [rig["declared"].aliases[a] for a in ("fast", "slow", "hangs")]
    t0 = time.monotonic()
    outs = probe.probe_round(gateway(rig), aliases, timeout=3.0)
    took = time.monotonic() - t0
    assert not outs["hangs"].ok and outs["hangs"].error == "no answer within 3 s"
    assert outs["fast"].ok and outs["slow"].ok
    assert outs["fast"].latency_s is not None and outs["fast"].latency_s < 1.0
    # serial probes would take >= 3 + 1 s; concurrent ones take the timeout alone
    assert took < 3.9, took


def test_models_endpoint_answering_is_never_taken_as_ready(rig, tmp_path):
    rig["pools"]["fast"].set_mode("fast", "503")
    models = requests.get(f"{rig['gw'].url}/v1/models", headers={"Authorization": f"Bearer {rig['key']}"},
                          timeout=10)
    assert models.status_code == 200 and "fast" in models.text
    snap = probe.run_round(tmp_path / "inv.json", one_alias(rig, "fast"), gateway(rig), 10, Policy())
    assert snap["aliases"]["fast"]["status"] == "failing"


def test_declared_backend_health_must_answer_too(rig, tmp_path):
    rig["pools"]["checked"].health_code = 500
    out = probe.probe_one(gateway(rig), rig["declared"].aliases["checked"], 10)
    assert not out.ok and out.error == f"backend health {rig['pools']['checked'].url}/health: HTTP 500"
    rig["pools"]["checked"].health_code = 200
    assert probe.probe_one(gateway(rig), rig["declared"].aliases["checked"], 10).ok


def test_probe_and_status_commands_end_to_end(rig, tmp_path):
    rig["pools"]["hangs"].set_mode("hangs", "503")
    snap_path = tmp_path / "inventory.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), NEV_INVENTORY=str(snap_path), NEV_MODEL_URL=rig["gw"].url,
               NEV_MODEL_KEY_FILE=str(rig["key_file"]), NEV_FOLKNET_FILE=str(rig["declared_path"]),
               NEV_PROBE_TIMEOUT="5")
    env.pop("NEV_MODEL_API_KEY", None)
    r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "probe", "--every", "0.1", "--rounds", "2"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "probe round 2" in r.stderr
    snap = json.loads(snap_path.read_text())
    assert {a: s["status"] for a, s in snap["aliases"].items()} == {
        "fast": "ready", "slow": "ready", "hangs": "failing", "checked": "ready", "old": "retired"}
    r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "status"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = {ln.split()[0]: ln for ln in r.stdout.splitlines()[1:] if ln and not ln.startswith(("snapshot", "hosts"))}
    assert rows["old"].split()[1:4] == ["retired", "since", "2026-09-22"]
    assert rows["hangs"].split()[1] == "failing" and "HTTP 5" in rows["hangs"]
    assert "s ago" in rows["fast"]
    assert "snapshot age: probed" in r.stdout
    r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "status", "--json"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    data = json.loads(r.stdout)
    assert data["snapshot_age_s"] is not None and data["snapshot_age_s"] < 60
    everything = snap_path.read_text() + r.stdout + r.stderr
    assert rig["key"] not in everything


def test_probe_without_a_gateway_key_is_one_clear_line(rig, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), NEV_INVENTORY=str(tmp_path / "i.json"),
               NEV_MODEL_URL=rig["gw"].url, NEV_FOLKNET_FILE=str(rig["declared_path"]))
    for k in ("NEV_MODEL_API_KEY", "NEV_MODEL_KEY_FILE", "GENERA_MODEL_API_KEY", "GENERA_MODEL_KEY_FILE"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "probe"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip() == "nev: no gateway key: set NEV_MODEL_KEY_FILE to a mode-600 file holding it"
    assert not (tmp_path / "i.json").exists()
