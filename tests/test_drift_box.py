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
import yaml

from bench import folknet
from rig import rigfile
from rig.serving import fix
from rig.snapshot.context import Context
from rig.snapshot.record import take
from rig.snapshot.restore import RestoreFailed

ROOT = Path(__file__).resolve().parent.parent
FLASH = "qwen3.8-flash-next"
FAST = "qwen3.8-27b-fast"


@pytest.fixture
def drift(box_env, tmp_path, monkeypatch):
    box = box_env
    declared = json.loads(Path(box.folknet_file).read_text())
    rig = json.loads(Path(box.rig_file).read_text())
    rig["host_store"] = str(tmp_path / "hoststore")             # the hosts' copies of the fix's snapshot
    rf = tmp_path / "rig.local.json"
    rf.write_text(json.dumps(rig))
    monkeypatch.setenv("NEV_RIG_FILE", str(rf))
    monkeypatch.setenv("NEV_RIG_NOTES", str(tmp_path / "notes"))

    def run(change=None, *args: str) -> subprocess.CompletedProcess:
        data = json.loads(json.dumps(declared))
        if change:
            change(data["aliases"])
        f = tmp_path / "folknet.json"
        f.write_text(json.dumps(data))
        env = {**os.environ, **box.env, "NEV_FOLKNET_FILE": str(f), "NEV_RIG_FILE": str(rf), "NEV_GATEWAY_ADMIN_KEY_FILE": str(box.master_key_file),
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
        f"{FLASH}: declared max_inflight 6, HAProxy's maxconn 8 (be_gpu2/r0 4 + be_gpu2/r1 4)",
        f"{FLASH}: declared max_inflight 6, the gateway's max_parallel_requests 8"]


def test_drift_finds_a_requests_per_minute_limit_the_gateway_does_not_enforce(drift):
    r = drift(lambda a: a[FAST].update(rpm=600, tpm=200000), "--json")
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout) == [{"kind": "gateway-limit", "alias": FAST, "key": None, "message":
                                     f"{FAST}: declared rpm 600, the gateway's rpm none; "
                                     "declared tpm 200000, the gateway's tpm none"}]


def test_drift_finds_a_key_allowed_an_alias_it_should_not_have(drift):
    r = drift(lambda a: a[FAST].update(keys=["batch"]), "--json")
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout) == [{"kind": "key-too-much", "alias": FAST, "key": "writer",
                                     "message": f"key writer may use {FAST}, which folknet.json does not grant it"}]


def retire_flash(a: dict) -> None:
    a[FLASH].update(retired="2026-01-01")


@pytest.fixture
def gateway_files(box_env, tmp_path):
    """The gateway's config and keys file as the box wrote them; put back (through the fix's own
    snapshot, the undo it names) after the test."""
    gdir = Path(json.loads(Path(box_env.rig_file).read_text())["roles"]["gateway"]["files"][0]).parent
    files = {p: p.read_bytes() for p in (gdir / "config.yaml", gdir / "keys.json")}
    yield files
    if any(p.read_bytes() != data for p, data in files.items()):
        labels = sorted((tmp_path / "notes" / "snapshots" / "labels").glob("before-drift-fix-*.json"))
        env = {**os.environ, **box_env.env, "NEV_RIG_FILE": str(tmp_path / "rig.local.json"),
               "NEV_RIG_NOTES": str(tmp_path / "notes"), "PYTHONPATH": str(ROOT)}
        r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "restore", labels[0].stem, "gateway"], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert all(p.read_bytes() == data for p, data in files.items())


def served(box) -> list[str]:
    from bench import gateway_http
    from bench.gateway_http import Endpoint

    r = gateway_http.get_api(Endpoint(box.gateway_local_url, Path(box.master_key_file).read_text().strip()),
                             "/v1/models", (5, 30))
    return sorted(m["id"] for m in r.json()["data"])


def test_drift_fix_stops_serving_a_retired_alias_and_drift_then_reports_none(drift, gateway_files, box_env, tmp_path):
    assert FLASH in served(box_env)
    r = drift(retire_flash, "--fix")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    assert f"drift --fix: model list: remove {FLASH}; add nothing" in out
    assert f"drift --fix: key batch: no more {FLASH}" in out
    assert any("(validated, moved, reloaded, healthy)" in ln for ln in out)
    assert out[-1] == "no drift: the gateway, HAProxy and the declaration agree"
    assert FLASH not in served(box_env) and FAST in served(box_env)
    again = drift(retire_flash)
    assert again.returncode == 0 and "no drift" in again.stdout, again.stdout
    cfg = yaml.safe_load(next(iter(gateway_files)).read_text())
    assert [m["model_name"] for m in cfg["model_list"]] == [FAST, "deepseek-v4.1-flash"]
    log = (tmp_path / "notes" / "changelog.md").read_text()
    assert "drift --fix gateway" in log and "- result: done" in log and "snapshot before-drift-fix-" in log


def test_drift_fix_with_a_config_the_gateway_cannot_start_on_puts_the_old_one_back(drift, gateway_files, box_env,
                                                                                    tmp_path):
    f = tmp_path / "declared.json"
    data = json.loads(Path(box_env.folknet_file).read_text())
    retire_flash(data["aliases"])
    f.write_text(json.dumps(data))

    def broken(config, declared, serving):            # valid YAML, but LiteLLM cannot import its key check
        gen = fix.regenerate(config, declared, serving)
        gen.config["general_settings"]["custom_auth"] = "nev_box_auth_gone.user_api_key_auth"
        return gen

    said: list[str] = []
    rig = rigfile.load(rigfile.default_path())
    with pytest.raises(RestoreFailed) as e:
        fix.fix(rig, folknet.load(f), tmp_path / "notes", said.append,
                lambda label: take(Context.load(), label, ("gateway",), said.append), render=broken)
    msg = e.value.message
    assert msg.startswith("drift --fix: role gateway failed at reload on root@"), msg
    assert msg.endswith("previous files put back, reloaded and healthy again"), msg
    assert all(p.read_bytes() == old for p, old in gateway_files.items())      # the old config and keys back
    assert FLASH in served(box_env)                                             # and the gateway serves them
    assert drift().returncode == 0
    log = (tmp_path / "notes" / "changelog.md").read_text()
    assert "- result: FAILED: drift --fix: role gateway failed at reload" in log
