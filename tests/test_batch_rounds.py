"""A batch round's record (record-rN.json): typed, written and read back whole, a bad field named."""

from __future__ import annotations

import json

import pytest

from bench import ledger, rounds
from bench.rounds import ModelRound, RoundRecord, ShareStatus
from lanes.base.errors import ConfigError


def _round() -> RoundRecord:
    share = ModelRound(tier="sampling", n=8, inflight=4, note=None, candidates=8, answers=8, compiled=6, passed=1,
                       best=120, tokens_in=900, tokens_out=400, cached_tokens=0, draw_s=1.25, calls=2, retries=0,
                       rate_limited=0, pacer_wait_s=0, status=ShareStatus.OK, error=None,
                       inflight_meter={"limit": 4, "max_seen": 4}, pass_at={"pass@1": 0.125, "pass@5": 0.625})
    return RoundRecord(batch="bw-1", function="block_width", round=1, escalated=False, start="2026-11-30T10:00:00Z",
                       end="2026-11-30T10:00:09Z", lane_cpu_s=3.5, candidates=8, unique=5, new_unique=5,
                       duplicates=3, compiled=6, best=120, cases_run=120, passed=True, prompt_prefix_chars=900,
                       prompt_chars=1200, failing_cases_shown=0, versions_shown=0, phases={"draw": {"s": 1.3}},
                       models={"qwen3.8-27b-fast": share}, pass_at={"pass@1": 0.125},
                       calls=[{"alias": "qwen3.8-27b-fast", "n": 4, "status": "ok"}])


def test_a_round_is_written_as_json_and_read_back_the_same(tmp_path):
    rec = _round()
    p = rounds.write(tmp_path, rec)
    assert p == tmp_path / "record-r1.json"
    raw = json.loads(p.read_text())
    assert raw["pass@1"] == 0.125 and raw["models"]["qwen3.8-27b-fast"]["pass@5"] == 0.625
    assert raw["models"]["qwen3.8-27b-fast"]["status"] == "ok" and list(raw)[-1] == "calls"
    assert rounds.read(p) == rec and rec.pass_at_1 == 0.125
    assert ledger.line_for(raw).model_lines()["qwen3.8-27b-fast"].tokens_in == 900


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["models"]["qwen3.8-27b-fast"].update(calls="two"), "models.qwen3.8-27b-fast.calls"),
    (lambda d: d["models"]["qwen3.8-27b-fast"].update(status="maybe"), "models.qwen3.8-27b-fast.status"),
    (lambda d: d.update(passed="yes"), "passed"),
    (lambda d: d.update({"pass@1": "high"}), "pass@1"),
    (lambda d: d["calls"].append(3), "calls[1]"),
    (lambda d: d.pop("round"), "round"),
])
def test_a_bad_field_of_a_round_is_named_with_its_file(tmp_path, edit, field):
    p = rounds.write(tmp_path, _round())
    data = json.loads(p.read_text())
    edit(data)
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as e:
        rounds.read(p)
    assert str(p) in str(e.value) and f"field {field} " in str(e.value)
