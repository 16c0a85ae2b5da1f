"""The gateway's per-alias limits on the rig-in-a-box: declared in folknet.json, put in the real
LiteLLM gateway's config by `nev rig drift --fix`, enforced for every caller. Two batches on lane 0
and lane 1 (each the lane's own nev drawing through its gateway client) against one alias whose
declared in-flight limit is 4, while HAProxy would let 8 through: the stand-in pool, where the
calls are counted, never sees more than 4 at once, and neither batch starves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.perf import lanedraw
from rig.box.poolctl import pool_control

ROOT = Path(__file__).resolve().parent.parent
FAST = "qwen3.8-27b-fast"     # gpu0: HAProxy's maxconn 8, the box declares 8
LIMIT = 4
SECONDS = 15.0


@pytest.fixture(scope="module")
def lanes(box):
    conns = lanedraw.prepare(box, [0, 1], box.keys["batch"])
    yield conns
    for c in conns:
        c.close()


@pytest.fixture
def declared(box_env, tmp_path):
    """`nev rig drift [--fix]` against the box's declaration changed by `change`; the gateway's
    files put back afterwards through the fix's own snapshot (the undo it names)."""
    box = box_env
    rig = json.loads(Path(box.rig_file).read_text())
    rig["host_store"] = str(tmp_path / "hoststore")
    rf = tmp_path / "rig.local.json"
    rf.write_text(json.dumps(rig))
    f = tmp_path / "folknet.json"
    env = {**os.environ, **box.env, "NEV_FOLKNET_FILE": str(f), "NEV_RIG_FILE": str(rf),
           "NEV_GATEWAY_ADMIN_KEY_FILE": str(box.master_key_file), "NEV_RIG_NOTES": str(tmp_path / "notes"),
           "PYTHONPATH": str(ROOT)}
    gdir = Path(rig["roles"]["gateway"]["files"][0]).parent
    files = {p: p.read_bytes() for p in (gdir / "config.yaml", gdir / "keys.json")}

    def drift(change, *args: str) -> subprocess.CompletedProcess:
        data = json.loads(Path(box.folknet_file).read_text())
        change(data["aliases"][FAST])
        f.write_text(json.dumps(data))
        return subprocess.run([sys.executable, "-m", "rig.cli", "rig", "drift", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)

    yield drift
    if any(p.read_bytes() != d for p, d in files.items()):
        labels = sorted((tmp_path / "notes" / "snapshots" / "labels").glob("before-drift-fix-*.json"))
        r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "restore", labels[0].stem, "gateway"], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert all(p.read_bytes() == d for p, d in files.items())


def hold_to_4(a: dict) -> None:
    a["max_inflight"] = LIMIT


def draw_both(box, lanes, seconds: float) -> tuple[list[lanedraw.Drawn], dict]:
    pool = box.aliases[FAST]
    pool_control(box, pool, reset=True)
    pool_control(box, pool, delay=0.5, max_inflight=16)        # the pool itself holds nothing back
    try:
        got = lanedraw.draw(box, lanes, FAST, LIMIT, seconds)
        return got, pool_control(box, pool)
    finally:
        pool_control(box, pool, reset=True)


def test_two_batches_on_two_lanes_share_the_gateways_in_flight_limit_and_the_pool_never_sees_more(
        box, lanes, declared):
    # without the gateway's limit, two batches of 4 reach the pool 8 at once (HAProxy lets 8 through)
    _, pool = draw_both(box, lanes, 6.0)
    assert pool["max_inflight_seen"] > LIMIT, pool

    r = declared(hold_to_4)
    assert r.returncode == 1
    assert f"{FAST}: declared max_inflight {LIMIT}, the gateway's max_parallel_requests 8" in r.stdout.splitlines()

    r = declared(hold_to_4, "--fix")
    out = r.stdout.splitlines()
    assert f"drift --fix: limits: {FAST}: max_parallel_requests 8 -> {LIMIT}" in out, r.stdout + r.stderr
    assert any("(validated, moved, reloaded, healthy)" in ln for ln in out), r.stdout
    # what is left is HAProxy's maxconn, which the fix does not touch: the gateway now agrees
    assert out[-1] == f"{FAST}: declared max_inflight {LIMIT}, HAProxy's maxconn 8 (be_gpu0/gpu0 8)"
    assert not [ln for ln in out if "the gateway's" in ln and not ln.startswith("drift --fix:")]

    drawn, pool = draw_both(box, lanes, SECONDS)
    counts = [d.within(SECONDS) for d in drawn]
    print(f"split of {sum(counts)} completions in {SECONDS:.0f} s: lane0 {counts[0]}, lane1 {counts[1]}; "
          f"slot waits {[d.gateway_waits for d in drawn]}, rate limited {[d.rate_limited for d in drawn]}; pool at most {pool['max_inflight_seen']} at once")
    assert pool["max_inflight_seen"] == LIMIT, pool            # never more, and the limit was used
    assert all(d.failed == 0 for d in drawn), [d.raw for d in drawn]
    assert all(n >= sum(counts) / 3 for n in counts), counts    # neither starves
    assert pool["served"] >= sum(counts)


def test_a_declared_requests_per_minute_limit_is_enforced_by_the_gateway(box, declared):
    """rpm 3: LiteLLM 1.108.7 counts calls per calendar minute (in memory, fresh after the fix's
    restart) and its routing lets rpm - 1 of them through (a call is refused once count + 1 >= rpm),
    so 2 calls pass, and whatever minute boundary falls among them, a 429 comes by the 5th."""
    from bench import gateway_http
    from bench.gateway_http import Endpoint

    r = declared(lambda a: a.update(rpm=3), "--fix")
    assert f"drift --fix: limits: {FAST}: rpm none -> 3" in r.stdout.splitlines(), r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "no drift: the gateway, HAProxy and the declaration agree"
    ep = Endpoint(box.gateway_local_url, Path(box.keys["batch"]).read_text().strip())
    body = {"model": FAST, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    codes = []
    for _ in range(7):
        res = gateway_http.post_json(ep, body, 60)
        codes.append(res.status)
        if res.status == 429:
            assert b"rpm" in res.body, res.body[:300]
            break
    assert codes[-1] == 429 and set(codes[:-1]) == {200} and 2 <= len(codes) - 1 <= 4, codes


def test_a_declared_tokens_per_minute_limit_is_enforced_by_the_gateway(box, declared):
    """tpm: LiteLLM 1.108.7 adds each answered call's total tokens (the pool's `usage`) to the
    alias's count for the calendar minute (in memory, fresh after the fix's restart), and its
    routing refuses a call once the count + the call's own input tokens would pass `tpm`, so the
    last call let through may take the minute past `tpm` by up to one call's tokens. Measured with
    28 tokens a call and tpm 98 (three and a half calls): four pass, the fifth is refused at a count
    of 112. The refusal names the limit and a count of whole calls' tokens within one call of it."""
    import re

    from bench import gateway_http
    from bench.gateway_http import Endpoint

    ep = Endpoint(box.gateway_local_url, Path(box.keys["batch"]).read_text().strip())
    body = {"model": FAST, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    probe = gateway_http.post_json(ep, body, 60)            # no tpm yet: what one such call costs
    assert probe.status == 200, probe.body[:300]
    per = json.loads(probe.body)["usage"]["total_tokens"]
    tpm = 3 * per + per // 2
    r = declared(lambda a: a.update(tpm=tpm), "--fix")
    assert f"drift --fix: limits: {FAST}: tpm none -> {tpm}" in r.stdout.splitlines(), r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "no drift: the gateway, HAProxy and the declaration agree"
    codes = []
    for _ in range(12):
        res = gateway_http.post_json(ep, body, 60)
        codes.append(res.status)
        if res.status == 429:
            break
    print(f"tpm {tpm} ({per} tokens a call): {codes}; {res.body[:400]!r}")
    assert codes[-1] == 429 and set(codes[:-1]) == {200}, codes
    m = re.search(rb"'current_tpm': (\d+), 'tpm_limit': (\d+)", res.body)
    assert m, res.body[:400]
    current, limit = int(m.group(1)), int(m.group(2))
    assert limit == tpm and current % per == 0 and tpm - per < current <= tpm + per, (current, limit)
    # whatever minute boundary falls among them, the refusal comes by the 9th call (4 + 4 + 1)
    assert 3 <= len(codes) - 1 <= 8, codes
