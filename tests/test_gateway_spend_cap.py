"""Spend capped at the gateway (rig/box/gateway.py): a job's key carries `cap_tokens`; the real
LiteLLM proxy counts each call's tokens with a success callback (its own `usage`) into a spend
file, and the key check refuses the key once it reached its cap, with LiteLLM's own
`budget_exceeded` error, whoever calls (plain `requests` here, not nev); the spend outlives a
restart of the proxy. The pool behind it is the stand-in (no GPU here)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from rig.box import gateway
from tests.helpers.standin_pool import free_port, standin_pool

pytestmark = pytest.mark.parts  # the real LiteLLM proxy, started here (~10 s)

ALIAS = "stand-alias"
KEY = "sk-nev-job-" + "c4p" * 8
OTHER = "sk-nev-job-" + "fr33" * 6


def _start(d: Path, port: int) -> subprocess.Popen:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(d),
        "LITELLM_MASTER_KEY": "sk-master-test",
        "NEV_BOX_GATEWAY_KEYS": str(d / "keys.json"),
        "NEV_BOX_GATEWAY_SPEND": str(d / "spend.json"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "NO_DOCS": "True",
        "DISABLE_SCHEMA_UPDATE": "True",
        "no_proxy": "*",
        "NO_PROXY": "*",
    }
    proc = subprocess.Popen(
        [
            str(gateway.litellm_binary()),
            "--config",
            str(d / "config.yaml"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            "1",
        ],
        cwd=d,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(d / "litellm.log", "ab"),  # noqa: SIM115
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=2).ok:
                return proc
        except requests.RequestException:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError("LiteLLM did not start: " + (d / "litellm.log").read_text()[-2000:])


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _ask(port: int, key: str) -> requests.Response:
    return requests.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        timeout=60,
        headers={"Authorization": f"Bearer {key}"},
        json={
            "model": ALIAS,
            "messages": [{"role": "user", "content": "write block_width"}],
            "max_tokens": 64,
        },
    )


def test_a_key_over_its_cap_is_refused_at_the_gateway_whoever_calls_and_after_a_restart(tmp_path):
    d = tmp_path / "gw"
    d.mkdir()
    with standin_pool(alias=ALIAS) as pool:
        (d / f"{gateway.AUTH_MODULE}.py").write_text(gateway.AUTH_SOURCE)
        (d / f"{gateway.SPEND_MODULE}.py").write_text(gateway.SPEND_SOURCE)
        keys = {
            "job:capped": {
                "name": "job:capped",
                "job": "capped",
                "models": [ALIAS],
                "sha256": hashlib.sha256(KEY.encode()).hexdigest(),
                "expires": time.time() + 3600,
                "cap_tokens": 1,
            },
            "job:free": {
                "name": "job:free",
                "job": "free",
                "models": [ALIAS],
                "sha256": hashlib.sha256(OTHER.encode()).hexdigest(),
                "expires": time.time() + 3600,
            },
        }
        (d / "keys.json").write_text(json.dumps(keys))
        cfg = {
            "model_list": [
                {
                    "model_name": ALIAS,
                    "litellm_params": {
                        "model": f"openai/{ALIAS}",
                        "api_base": f"{pool}/v1",
                        "api_key": "none",
                        "max_retries": 0,
                    },
                }
            ],
            "litellm_settings": {
                "num_retries": 0,
                "enable_post_custom_auth_checks": True,
                "telemetry": False,
                "callbacks": [f"{gateway.SPEND_MODULE}.handler"],
            },
            "general_settings": {
                "master_key": "os.environ/LITELLM_MASTER_KEY",
                "custom_auth": f"{gateway.AUTH_MODULE}.user_api_key_auth",
                "custom_auth_run_common_checks": True,
            },
        }
        (d / "config.yaml").write_text(yaml.safe_dump(cfg))
        port = free_port()
        proc = _start(d, port)
        try:
            first = _ask(port, KEY)  # under the cap: served, and its tokens counted
            assert first.status_code == 200, first.text
            used = first.json()["usage"]["total_tokens"]
            deadline = time.monotonic() + 20  # the callback runs after the answer
            while time.monotonic() < deadline and not (d / "spend.json").exists():
                time.sleep(0.2)
            spend = json.loads((d / "spend.json").read_text())
            assert spend == {keys["job:capped"]["sha256"]: used}
            refused = _ask(port, KEY)
            assert refused.status_code == 400, refused.text
            err = refused.json()["error"]
            assert err["type"] == "budget_exceeded" and "job:capped" in err["message"]
            assert KEY not in refused.text
            assert _ask(port, OTHER).status_code == 200  # a key without a cap: served
        finally:
            _stop(proc)
        proc = _start(d, port)  # the spend is a file: a restart forgets nothing
        try:
            again = _ask(port, KEY)
            assert again.status_code == 400 and again.json()["error"]["type"] == "budget_exceeded"
        finally:
            _stop(proc)
    assert KEY not in (d / "litellm.log").read_text()
    assert not os.path.exists(d / "spend.json.tmp")
