"""The budget meter (pure): estimates, reservations, the stop before a call would pass the budget,
GPU-seconds from the measured throughput, a job's spend from its ledger lines."""

from __future__ import annotations

import threading

import pytest

from bench import ledger
from bench.budget import Budget, BudgetStop, Limit, Meter
from bench.ledger import parse_line, spent_in
from lanes.base.errors import UsageError
from lanes.base.jsonfile import Fields


def test_an_unmeasured_alias_is_estimated_from_the_prompt_and_the_declared_answer_size():
    m = Meter(Budget(tokens=10_000), answer_tokens=500)
    assert m.estimate("a", 2, prompt_chars=300, max_tokens=None) == (100 + 2 * 500, 0.0)
    assert m.estimate("a", 2, prompt_chars=300, max_tokens=50)[0] == 100 + 100


def test_after_an_answer_the_estimate_is_the_largest_seen_with_a_margin_and_scales_with_the_prompt():
    m = Meter(Budget(tokens=10_000))
    r = m.admit("a", 2, 300)
    m.settle(r, 2, prompt_tokens=80, completion_tokens=200)      # 100 a choice, 0.27 tokens a character
    assert m.spent_tokens == 280
    assert m.estimate("a", 4, 300, None) == (80 + 4 * 125, 0.0)
    # a later round's prompt carries the failing cases: twice the characters, twice the tokens
    assert m.estimate("a", 1, 600, None)[0] == 160 + 125


def test_a_call_that_would_pass_the_budget_is_not_admitted_and_the_bound_is_kept():
    m = Meter(Budget(tokens=1000))
    r = m.admit("a", 1, 300)
    m.settle(r, 1, 100, 400)                                      # 500 spent; next ~ 100 + 500
    with pytest.raises(BudgetStop) as e:
        m.admit("a", 1, 300)
    assert e.value.limit is Limit.TOKENS and "would pass the budget of 1000" in str(e.value)
    assert m.bound is Limit.TOKENS and m.spent_tokens == 500
    with pytest.raises(BudgetStop):          # once bound, nothing more is admitted
        m.admit("b", 1, 3)
    assert m.to_json()["bound"] == "tokens" and m.to_json()["spent_tokens"] == 500


def test_calls_in_flight_hold_their_reservation_so_concurrent_calls_cannot_overshoot_together():
    m = Meter(Budget(tokens=2000))
    r = m.admit("a", 1, 300)
    m.settle(r, 1, 100, 300)                 # estimate now 100 + 375 = 475, 400 spent
    held = [m.admit("a", 1, 300) for _ in range(3)]   # 400 + 3 * 475 = 1825
    with pytest.raises(BudgetStop):
        m.admit("a", 1, 300)                 # 1825 + 475 > 2000
    assert len(held) == 3


def test_an_aliases_first_call_goes_alone_until_it_answered():
    m = Meter(Budget(tokens=100_000))
    first = m.admit("a", 1, 30)
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(m.admit("a", 1, 30).tokens))
    t.start()
    t.join(0.3)
    assert t.is_alive() and not got          # waits for the first answer
    m.settle(first, 1, 10, 20)
    t.join(5)
    assert got == [10 + 25]


def test_a_failed_call_frees_its_reservation_and_spends_nothing():
    m = Meter(Budget(tokens=700))
    r = m.admit("a", 1, 30)                  # 10 + 600 reserved
    m.settle(r, 1, None, None)
    assert m.spent_tokens == 0
    m.admit("a", 1, 30)                      # admitted again: the reservation was freed


def test_gpu_seconds_come_from_the_pools_measured_output_rate():
    m = Meter(Budget(gpu_s=10.0), rates={"a": 100.0})
    r = m.admit("a", 1, 30, max_tokens=200)
    assert r.gpu_s == 2.0
    assert m.settle(r, 1, 10, 300) == 3.0 and m.spent_gpu_s == 3.0
    with pytest.raises(BudgetStop) as e:
        m.admit("a", 1, 30, max_tokens=800)  # 3 + 8 > 10
    assert e.value.limit is Limit.GPU_S


def test_a_gpu_second_budget_needs_every_alias_measured():
    m = Meter(Budget(gpu_s=5.0), rates={"a": 100.0})
    m.check_rates(["a"])
    with pytest.raises(UsageError, match="nev rig throughput b"):
        m.check_rates(["a", "b"])
    Meter(Budget(tokens=5)).check_rates(["b"])     # a token budget needs no sweep


def test_without_a_budget_nothing_waits_or_stops():
    m = Meter(Budget())
    rs = [m.admit("a", 8, 10**6) for _ in range(50)]
    assert len(rs) == 50 and m.bound is None


@pytest.mark.parametrize("tokens, gpu, what", [("x", None, "tokens 'x'"), ("-3", None, "negative"),
                                               (None, "nan", "GPU-seconds"), (None, "soon", "GPU-seconds")])
def test_a_bad_budget_is_one_usage_error_naming_it(tokens, gpu, what):
    with pytest.raises(UsageError, match=what):
        Budget.parse(tokens, gpu, "--budget")


def test_a_jobs_spend_is_summed_from_its_ledger_lines_and_shown_with_its_budget():
    lines = [{"models": {"a": {"tokens_in": 100, "tokens_out": 50, "gpu_s": 1.5}}},
             {"models": {"a": {"tokens_in": 10, "tokens_out": 5}, "b": {"tokens_in": 1, "tokens_out": 1}},
              "budget": {"tokens": 200, "gpu_s": None, "spent_tokens": 167, "bound": "tokens"}}]
    lines = [parse_line(Fields("t"), x) for x in lines]
    assert spent_in(lines) == (167, 1.5)
    s = ledger.spend(lines)
    assert s.to_json() == {"tokens": 167, "gpu_s": 1.5, "budget_tokens": 200, "budget_gpu_s": None, "bound": "tokens"}
    assert ledger.spend_line(s) == "spent: 167 tokens of 200, 1.5 GPU-s; the budget bound (tokens)"
