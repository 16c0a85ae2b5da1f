"""The planner (pure): the in-flight and batch size per alias, and the constraint that binds, in
set-ups made to bind differently."""

from __future__ import annotations

import json

import pytest

from bench import folknet as fk
from bench.budget import Budget
from bench.plan import (
    AliasPlan,
    Ask,
    Bound,
    Cost,
    Declared,
    Lane,
    Measured,
    cooldowns,
    cost_of,
    declared_of,
    lane_of,
    plan,
    read_throughput,
)
from lanes.base.errors import ConfigError

A = "qwen3.8-27b-fast"


def sweep(knee: int | None, latency: float = 2.0, tok_s: float = 400.0, req_s: float = 2.0) -> dict:
    levels = [{"inflight": lv, "latency_p50_s": latency, "output_tok_s": tok_s, "req_s": req_s} for lv in (1, 2, 4, 8)]
    return {"alias": A, "levels": levels, "knee": knee, "peak_output_tok_s": tok_s, "peak_at": 8}


def one(ask: Ask, declared: Declared, measured: Measured | None = None, **kw) -> AliasPlan:
    return plan([ask], {ask.alias: declared}, {ask.alias: measured or Measured()}, **kw)[0]


def test_the_gateway_limit_binds_when_it_is_below_the_knee_and_the_ask():
    p = one(Ask(A, 16, 8), Declared(4), Measured.from_sweep(sweep(knee=8)))
    assert (p.bound, p.inflight, p.n) == (Bound.GATEWAY, 4, 16)
    assert "in-flight limit is 4" in p.why and p.limits["knee"] == 8


def test_a_declared_requests_per_minute_binds_through_the_measured_latency():
    # 60 requests/min at 2 s a call: 2 in flight keep it busy
    p = one(Ask(A, 16, 8), Declared(8, rpm=60), Measured.from_sweep(sweep(knee=None, latency=2.0)))
    assert (p.bound, p.inflight) == (Bound.GATEWAY, 2) and "60 requests/min" in p.why


def test_a_declared_tokens_per_minute_binds_through_tokens_per_call():
    # 400 tok/s at 2 req/s: 200 tokens a call; 6000 tokens/min = 100 tok/s = 0.5 calls/s x 2 s = 1 in flight
    p = one(Ask(A, 16, 8), Declared(8, tpm=6000), Measured.from_sweep(sweep(knee=None)))
    assert (p.bound, p.inflight) == (Bound.GATEWAY, 1) and "6000 tokens/min" in p.why


def test_the_pool_knee_binds_when_throughput_stops_growing_below_the_gateway_limit():
    p = one(Ask(A, 16, 8), Declared(8), Measured.from_sweep(sweep(knee=2)))
    assert (p.bound, p.inflight, p.n) == (Bound.KNEE, 2, 16) and "stops growing at 2" in p.why


def test_the_budget_binds_when_what_is_left_pays_for_fewer_candidates_than_asked():
    # one candidate per call: 1000 tokens each (prompt 600 + answer 400)
    p = one(Ask(A, 16, 8, supports_n=False), Declared(8), Measured.from_sweep(sweep(knee=None)),
            budget_left=Budget(tokens=5000), costs={A: Cost(600, 400)})
    assert (p.bound, p.n, p.inflight_by) == (Bound.BUDGET, 5, Bound.GATEWAY)
    assert p.inflight == 5 and "5000 tokens left pay for 5 of 16" in p.why


def test_the_budget_counts_the_prompt_once_per_call_when_calls_carry_several_candidates():
    # n per call: 8 in flight, 16 candidates = 8 calls of 2: 8 x 600 + 16 x 400 = 11200
    c = Cost(600, 400)
    assert c.of(16, 8, True) == 11200 and c.of(16, 8, False) == 16000
    assert one(Ask(A, 16, 8), Declared(8), budget_left=Budget(tokens=11200), costs={A: c}).n == 16
    assert one(Ask(A, 16, 8), Declared(8), budget_left=Budget(tokens=11199), costs={A: c}).n == 15


def test_a_budget_that_pays_for_no_candidate_plans_none():
    p = one(Ask(A, 8, 4), Declared(8), budget_left=Budget(tokens=10), costs={"*": Cost(1800, 600)})
    assert (p.bound, p.n) == (Bound.BUDGET, 0)


def test_the_budget_is_shared_by_the_aliases_in_proportion_to_what_they_ask():
    ps = plan([Ask(A, 12, 4, False), Ask("b", 4, 2, False)], {A: Declared(8), "b": Declared(2)}, {},
              budget_left=Budget(tokens=8000), costs={"*": Cost(500, 500)})
    assert [(p.n, p.bound) for p in ps] == [(6, Bound.BUDGET), (2, Bound.BUDGET)]


def test_the_lane_cpu_binds_when_the_lane_verifies_slower_than_the_draw():
    # 2 CPUs at 4 CPU-s a candidate: 0.5 candidates/s; 2 s a call: 1 in flight keeps up
    p = one(Ask(A, 16, 8), Declared(8), Measured.from_sweep(sweep(knee=None)), lane=Lane(2, 4.0))
    assert (p.bound, p.inflight) == (Bound.LANE_CPU, 1) and "0.50 candidates/s" in p.why


def test_a_429_in_the_round_before_makes_cooldown_bind():
    p = one(Ask(A, 16, 8), Declared(4), cooldown_s={A: 1.5})
    assert (p.bound, p.inflight_by, p.inflight) == (Bound.COOLDOWN, Bound.GATEWAY, 4) and "1.5 s" in p.why


def test_the_ask_binds_when_it_is_below_every_limit_and_ties_go_to_the_gateway():
    assert one(Ask(A, 8, 2), Declared(8)).bound is Bound.ASKED
    assert one(Ask(A, 8, 8), Declared(8)).bound is Bound.GATEWAY


def test_rpm_and_tpm_are_read_from_the_declared_file(tmp_path):
    p = tmp_path / "folknet.json"
    aliases = {A: {"pool": "gpu0", "max_inflight": 4, "provider": "s", "keys": [], "rpm": 120, "tpm": 9000},
               "b": {"pool": "gpu1", "max_inflight": 2, "provider": "s", "keys": []}}
    p.write_text(json.dumps({"schema": 1, "providers": ["s"], "aliases": aliases}))
    d = declared_of(fk.load(p))
    assert d[A] == Declared(4, 120, 9000) and d["b"] == Declared(2, None, None)
    # a malformed limit is refused where the file is read (bench/folknet.py), one line naming it
    aliases["b"]["rpm"] = "lots"
    p.write_text(json.dumps({"schema": 1, "providers": ["s"], "aliases": aliases}))
    with pytest.raises(ConfigError, match=r"aliases\.b\.rpm must be a whole number"):
        fk.load(p)


def test_sweeps_records_and_cooldowns_are_read_from_what_the_rig_wrote(tmp_path):
    (tmp_path / f"{A}.json").write_text(json.dumps(sweep(knee=4)))
    (tmp_path / "junk.json").write_text("{")
    sweeps = read_throughput(tmp_path)
    assert list(sweeps) == [A]
    m = Measured.from_sweep(sweeps[A])
    assert (m.knee, m.latency_s, m.tokens_per_call, m.peak_output_tok_s) == (4, 2.0, 200.0, 400.0)
    recs = [{"new_unique": 4, "lane_cpu_s": 8.0, "phases": {"cpus": 2}, "prompt_chars": 1200,
             "calls": [{"alias": A, "status": "ok", "choices": 2, "prompt_tokens": 300, "completion_tokens": 500}],
             "models": {A: {"constraints": {"seconds": {"gateway_limit": 1.0, "cooldown": 2.5}}}}}]
    assert lane_of(recs) == Lane(2, 2.0)
    # a quarter token a character; the newest prompt's size, or this round's (twice as long)
    assert cost_of(recs, None, Cost(1800, 600)) == {"*": Cost(400, 600), A: Cost(300, 250)}
    assert cost_of(recs, 2400, Cost(1800, 600))[A] == Cost(600, 250)
    assert cost_of([], None, Cost(1800, 600)) == {"*": Cost(1800, 600)}
    assert cooldowns(recs[-1]) == {A: 2.5} and cooldowns(None) == {}
