"""The box gateway's database-free key check (the module `nev box` writes beside LiteLLM's
config), run with LiteLLM's own types: keys by digest, the file read again when it changes, a
job's key refused once expired, and a key allowed no alias refused (LiteLLM reads [] as all)."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import time

import pytest

from rig.box import gateway

pytestmark = pytest.mark.parts     # imports the real LiteLLM proxy's types (~20 s): not the fast loop


def _digest(k: str) -> str:
    return hashlib.sha256(k.encode()).hexdigest()


@pytest.fixture
def auth(tmp_path, monkeypatch):
    pytest.importorskip("litellm")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("LITELLM_MASTER_KEY", "sk-master")
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"batch": {"name": "batch", "models": ["a"], "sha256": _digest("sk-batch")}}))
    monkeypatch.setenv("NEV_BOX_GATEWAY_KEYS", str(keys))
    src = tmp_path / "nev_box_auth.py"
    src.write_text(gateway.AUTH_SOURCE)
    spec = importlib.util.spec_from_file_location("nev_box_auth_test", src)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, keys


def check(mod, key: str):
    from fastapi import HTTPException

    try:
        return asyncio.run(mod.user_api_key_auth(None, f"Bearer {key}"))
    except HTTPException as e:
        return e.status_code


def test_keys_are_checked_by_digest_and_the_file_is_read_again_when_it_changes(auth):
    mod, keys = auth
    assert check(mod, "sk-batch").models == ["a"]
    assert check(mod, "sk-job") == 401
    data = json.loads(keys.read_text())
    data["job:x"] = {"name": "job:x", "job": "x", "models": ["b"], "sha256": _digest("sk-job"),
                     "expires": time.time() + 600}
    data["job:y"] = {"name": "job:y", "job": "y", "models": ["b"], "sha256": _digest("sk-old"),
                     "expires": time.time() - 1}
    data["job:z"] = {"name": "job:z", "job": "z", "models": [], "sha256": _digest("sk-none"),
                     "expires": time.time() + 600}
    tmp = keys.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, keys)                                   # as jobs/jobkeys.py writes it
    assert check(mod, "sk-job").models == ["b"]
    assert check(mod, "sk-old") == 401                      # expired
    assert check(mod, "sk-none") == 403                     # allowed no alias: not every alias
    del data["job:x"]
    tmp.write_text(json.dumps(data))
    os.replace(tmp, keys)
    assert check(mod, "sk-job") == 401                      # revoked
    assert check(mod, "sk-master").user_role.value == "proxy_admin"
