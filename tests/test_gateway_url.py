"""The gateway URL of a process: the dev box's NEV_MODEL_URL, or on a lane the lane's own
`~/.lane-model-env`, never a development box's value that travelled along."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import batch_cmd, onlane
from bench.gateway import url_from_settings
from jobs import preflight
from jobs.manifest import parse
from jobs.runner import with_lane_gateway
from lanes.base.errors import ConfigError
from tests.helpers.job_helpers import (
    Listener,
    free_port,
    lane_env,
    make_checkout,
    nev,
    tool_dir,
    write_manifest,
)

LANE_URL = "http://10.20.0.5:4000"    # A: where the lane reaches the gateway
DEV_URL = "http://127.0.0.1:14000"    # B: the dev box's own forward


def lane_home(tmp: Path, url: str | None = LANE_URL) -> Path:
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    if url is not None:
        (home / ".lane-model-env").write_text(f"NEV_LANE_MODEL_URL={url}\n")
    return home


def test_on_a_lane_the_file_is_read_and_the_dev_box_url_never(tmp_path):
    env = {"NEV_ON_LANE": "1", "HOME": str(lane_home(tmp_path)), "NEV_MODEL_URL": DEV_URL}
    assert url_from_settings(env) == LANE_URL
    env["NEV_LANE_MODEL_URL"] = "http://travelled-from-the-dev-box:4000"
    assert url_from_settings(env) == LANE_URL      # the lane's own file first


def test_on_a_lane_without_the_file_the_environment_then_a_one_line_error_naming_the_file(tmp_path):
    home = lane_home(tmp_path, None)
    env = {"NEV_ON_LANE": "1", "HOME": str(home), "NEV_MODEL_URL": DEV_URL}
    with pytest.raises(ConfigError) as e:
        url_from_settings(env)
    msg = str(e.value)
    assert "\n" not in msg and f"{home}/.lane-model-env does not exist" in msg and DEV_URL not in msg
    (home / ".lane-model-env").write_text("# nothing here\n")
    with pytest.raises(ConfigError, match="has no NEV_LANE_MODEL_URL line"):
        url_from_settings(env)
    assert url_from_settings({**env, "NEV_LANE_MODEL_URL": LANE_URL + "/"}) == LANE_URL


def test_off_a_lane_the_dev_boxs_url_and_never_the_lanes_file(tmp_path):
    env = {"HOME": str(lane_home(tmp_path)), "NEV_MODEL_URL": DEV_URL, "NEV_LANE_MODEL_URL": LANE_URL}
    assert url_from_settings(env) == DEV_URL
    with pytest.raises(ConfigError, match="set NEV_MODEL_URL"):
        url_from_settings({"HOME": env["HOME"], "NEV_LANE_MODEL_URL": LANE_URL})


def test_a_batch_on_a_lane_calls_the_gateway_of_the_lanes_file(tmp_path, monkeypatch):
    key = tmp_path / "key"
    key.write_text("sk-batch-key-0123\n")
    key.chmod(0o600)
    for k in [k for k in os.environ if k.startswith(("NEV_", "GENERA_"))]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(lane_home(tmp_path)))
    monkeypatch.setenv("NEV_ON_LANE", "1")
    monkeypatch.setenv("NEV_MODEL_URL", DEV_URL)
    monkeypatch.setenv("NEV_MODEL_KEY_FILE", str(key))
    used = []
    monkeypatch.setattr(batch_cmd, "config_from_settings", lambda *a: SimpleNamespace(shares=[], escalation=None, stale_sweeps={}, accept_stale=False))
    monkeypatch.setattr(batch_cmd, "run", lambda cfg, gw, echo: (used.append(gw.endpoint.url),
                                                              SimpleNamespace(message="ok", exit_code=0))[1])
    assert batch_cmd.command("f", tmp_path, None, None, None, None, None, None, [], echo=lambda s: None) == 0
    assert used == [LANE_URL]


def test_a_batch_sent_to_a_lane_leaves_the_dev_boxs_addresses_behind():
    env = {"NEV_MODEL_URL": DEV_URL, "NEV_FORGE_URL": "http://127.0.0.1:3300/o/e.git", "NEV_LANE_MODEL_URL": LANE_URL,
           "GENERA_MODEL_URL": DEV_URL, "NEV_MODELS": "a:1:1"}
    assert onlane.forwarded_env(env) == {"NEV_LANE_MODEL_URL": LANE_URL, "NEV_MODELS": "a:1:1"}


def test_a_job_stage_on_a_lane_gets_the_lanes_gateway_as_its_model_url(tmp_path):
    home = lane_home(tmp_path)
    env = {"NEV_ON_LANE": "1", "HOME": str(home), "NEV_MODEL_URL": DEV_URL, "OTHER": "x"}
    assert with_lane_gateway(env) == {**env, "NEV_MODEL_URL": LANE_URL}
    (home / ".lane-model-env").unlink()
    assert "NEV_MODEL_URL" not in with_lane_gateway(env)           # none rather than the dev box's
    assert with_lane_gateway({"NEV_MODEL_URL": DEV_URL}) == {"NEV_MODEL_URL": DEV_URL}


def test_the_requirements_check_probes_the_gateway_of_the_lanes_file(tmp_path):
    listener = Listener()
    try:
        m = parse({"name": "demo", "base": "a" * 40, "spec": "specs/x.md",
                   "stages": [{"name": "g", "kind": "batch", "command": "true", "models": ["m1"]}]},
                  str(tmp_path / "job.yaml"))
        home = lane_home(tmp_path, f"http://127.0.0.1:{listener.port}")
        env = {"NEV_ON_LANE": "1", "HOME": str(home), "NEV_MODEL_URL": f"http://127.0.0.1:{free_port()}",
               "PATH": os.environ["PATH"]}
        facts = preflight.gather(m, tmp_path, 0.0, env)
        assert facts.gateway == (f"http://127.0.0.1:{listener.port}", None)
        (home / ".lane-model-env").unlink()
        unmet = preflight.evaluate(preflight.gather(m, tmp_path, 0.0, env))
        [gw] = [u for u in unmet if u.kind == "gateway-unset"]
        assert ".lane-model-env does not exist" in gw.message
    finally:
        listener.close()


def test_nev_job_run_on_a_lane_hands_each_stage_the_lanes_gateway(tmp_path):
    work = tmp_path / "work"
    base = make_checkout(work)
    m = write_manifest(tmp_path / "job.yaml", base, [
        {"name": "url", "kind": "command", "command": "printf '%s' \"$NEV_MODEL_URL\" > url.txt"}])
    env = lane_env(tmp_path, free_port(), tool_dir(tmp_path / "bin"), NEV_MODEL_URL=DEV_URL)
    lane_home(tmp_path)  # HOME of lane_env is tmp/home
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(tmp_path / "st")], env)
    assert r.returncode == 0, r.stderr
    assert (work / "url.txt").read_text() == LANE_URL
