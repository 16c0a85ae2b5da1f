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
