"""A job's result commit message (jobs/result.py): its trailers read back as written, the first
stage's start (where the job's queue wait ends) among them."""

from __future__ import annotations

from jobs import result


def test_the_first_stage_trailer_reads_back_and_is_absent_when_no_stage_ran():
    text = result.message("clamp-px", "passed", 0, "run-1", ["ok"], "clamp-px",
                          "2026-12-05T13:40:02.118Z")
    assert "Nev-Job-First-Stage: 2026-12-05T13:40:02.118Z" in text.splitlines()
    r = result.parse_message(text, "c0ffee")
    assert r is not None and r.first_stage == "2026-12-05T13:40:02.118Z"
    assert (r.job, r.outcome, r.exit, r.run_id, r.spec) == ("clamp-px", "passed", 0, "run-1", "clamp-px")
    none = result.parse_message(result.message("clamp-px", "not-run", 3, "run-2"), "c0ffee")
    assert none is not None and none.first_stage is None and none.exit == 3
