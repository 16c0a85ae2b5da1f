"""The operator's webhook on the rig-in-a-box (#33): a real HTTP receiver on the development box
gets one POST when the tick lands a job run on lane0's Dagu and one when a job fails for good
(a retired model: exit 10), and `nev rig metrics` counts both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rig import rigfile
from tests.helpers.webhook import TOKEN, Receiver
from tests.test_job_box import _stages, rig  # noqa: F401 - `rig` is the jobs' module fixture

pytestmark = pytest.mark.box


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def _with_webhook(rig, hook: Receiver) -> dict[str, str]:  # noqa: F811
    """The box's rig file with a `notify` added (its own paths made absolute), for the tick."""
    src = Path(rig.env["NEV_RIG_FILE"])
    loaded = rigfile.load(src)
    doc = json.loads(src.read_text())
    for key in ("known_hosts", "ssh_key"):
        if getattr(loaded, key) is not None:
            doc[key] = str(getattr(loaded, key))
    (rig.tmp / "webhook.url").write_text(hook.url + "\n")
    doc["notify"] = {"webhook_file": str(rig.tmp / "webhook.url"), "rig": "box"}
    dest = rig.tmp / "rig-notify.json"
    dest.write_text(json.dumps(doc))
    return {**rig.env, "NEV_RIG_FILE": str(dest)}


def test_a_landing_and_a_job_failed_for_good_each_post_once(rig, box, receiver):  # noqa: F811
    env = _with_webhook(rig, receiver)
    rig.env, plain = env, rig.env
    try:
        rig.job("hooked", _stages("hooked", "qwen3.8-27b-fast"))
        rig.poll_until("hooked", "landed")
        declared = json.loads(Path(box.folknet_file).read_text())
        declared["aliases"]["glm-5.3-flash"] = {"pool": "gpu0", "max_inflight": 8,
                                                "provider": "self-hosted", "tier": "sampling",
                                                "retired": "2026-09-22", "keys": ["batch"]}
        f = rig.tmp / "folknet-retired-hook.json"
        f.write_text(json.dumps(declared))
        rig.job("hookfail", _stages("hookfail", "glm-5.3-flash"),
                env={**env, "NEV_FOLKNET_FILE": str(f)})
        rig.poll_until("hookfail", "failed")
        rig.nev("job", "poll")
        metrics = rig.ok("rig", "metrics", "--skip", "lanes", "--skip", "dagu").stdout
    finally:
        rig.env = plain
    got = [k for k in receiver.kinds() if k[2] in ("hooked", "hookfail")]
    assert got == [("landed", "event", "hooked"), ("job_failed", "event", "hookfail")], got
    assert "exit 10" in [p for p in receiver.posts if p["subject"] == "hookfail"][0]["detail"]
    assert "nev_landings_total" in metrics and "nev_job_failures_total" in metrics
    logs = "".join(p.read_text(errors="replace") for p in (rig.tmp / "state").rglob("*")
                   if p.is_file())
    assert TOKEN not in logs


def test_an_alias_down_and_two_failed_ticks_each_post_once_then_recover(
        rig, box, receiver):  # noqa: F811
    from rig.box.poolctl import pool_control

    env = {**_with_webhook(rig, receiver), "NEV_NOTIFY_ALIAS_DOWN_S": "0"}
    alias = "deepseek-v4.1-flash"
    pool = next(p for p, info in box.pools.items() if info.alias == alias)
    pool_control(box, pool, fail="503")
    try:
        for _ in range(3):                       # failing after NEV_PROBE_FAILS=2 rounds, then held
            rig.ok("rig", "probe", env=env)
    finally:
        pool_control(box, pool, reset=True)
    assert [k for k in receiver.kinds() if k[0] == "alias_down"] == [("alias_down", "down", alias)]
    for _ in range(2):                           # ready after NEV_PROBE_OKS=2 rounds
        rig.ok("rig", "probe", env=env)
    assert [k for k in receiver.kinds() if k[0] == "alias_down"] == \
        [("alias_down", "down", alias), ("alias_down", "recovered", alias)]

    bad = {**env, "NEV_FORGE_URL": "http://127.0.0.1:9/nobody/none.git"}
    for _ in range(3):
        assert rig.nev("job", "poll", env=bad).returncode != 0
    ticks = [k for k in receiver.kinds() if k[0] == "tick_failed"]
    assert ticks == [("tick_failed", "down", "tick")]
    rig.nev("job", "poll", env=env)
    assert [k for k in receiver.kinds() if k[0] == "tick_failed"] == \
        [("tick_failed", "down", "tick"), ("tick_failed", "recovered", "tick")]
