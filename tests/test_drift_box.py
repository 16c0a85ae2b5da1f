"""`nev rig drift` on the rig-in-a-box: the real LiteLLM gateway's model list (read with its admin
key through the development box's forward), the real HAProxy's server lines (runtime API over SSH
through the jump host) and the gateway's keys file (over SSH), against a declaration that differs
from the box in exactly one way per test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLASH = "qwen3.8-flash-next"
FAST = "qwen3.8-27b-fast"


@pytest.fixture
def drift(box_env, tmp_path):
    box = box_env
    declared = json.loads(Path(box.folknet_file).read_text())

    def run(change=None, *args: str) -> subprocess.CompletedProcess:
        data = json.loads(json.dumps(declared))
        if change:
            change(data["aliases"])
        f = tmp_path / "folknet.json"
        f.write_text(json.dumps(data))
        env = {**os.environ, **box.env, "NEV_FOLKNET_FILE": str(f), "NEV_GATEWAY_ADMIN_KEY_FILE": str(box.master_key_file),
               "NEV_RIG_NOTES": str(tmp_path / "notes"), "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, "-m", "rig.cli", "rig", "drift", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)

    return run


def test_drift_finds_nothing_when_the_box_is_as_declared(drift):
    r = drift()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no drift" in r.stdout


def test_drift_finds_a_retired_alias_still_served(drift):
    r = drift(lambda a: a[FLASH].update(retired="2026-01-01"))
    assert r.returncode == 1, r.stderr
    assert f"{FLASH}: retired on 2026-01-01 but still served by the gateway" in r.stdout.splitlines()


def test_drift_finds_a_declared_alias_missing_from_the_gateway(drift):
    r = drift(lambda a: a.update({"glm-5.4-flash": {"pool": "gpu0", "max_inflight": 8, "provider": "self-hosted",
                                                    "keys": []}}))
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == ["glm-5.4-flash: declared but not served by the gateway"]


def test_drift_finds_an_in_flight_limit_that_differs_from_haproxys_maxconn(drift):
    r = drift(lambda a: a[FLASH].update(max_inflight=6))
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == [
        f"{FLASH}: declared max_inflight 6, HAProxy's maxconn 8 (be_gpu2/r0 4 + be_gpu2/r1 4)"]


def test_drift_finds_a_key_allowed_an_alias_it_should_not_have(drift):
    r = drift(lambda a: a[FAST].update(keys=["batch"]), "--json")
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout) == [{"kind": "key-too-much", "alias": FAST, "key": "writer",
                                     "message": f"key writer may use {FAST}, which folknet.json does not grant it"}]
