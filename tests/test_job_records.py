"""The dev box's job records (`job-results.json`): typed, every field checked, a corrupt file refused
naming the file and the field, and never written over."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobs import records
from jobs.records import JobRecord, JobStatus, Records
from jobs.state import JobEvent, JobView, Status, replay, used_seconds
from lanes.base.errors import ConfigError
from lanes.base.jsonfile import Fields
from tests.helpers.job_helpers import ROOT, nev

GOOD = {"schema": 1, "last_poll": "2026-01-02T03:04:05+00:00", "jobs": {"demo": {
    "job": "demo", "spec": "clamp-px", "manifest": "m.yaml", "tip": "a" * 40, "run_id": "r1", "lane": 0,
    "lane_label": "lane 0", "status": "resent", "submitted_at": "2026-01-02T03:00:00+00:00",
    "params": {"JOB": "demo"}, "sends": 1, "resends": 1, "polled_at": "2026-01-02T03:04:05+00:00",
    "future_field": {"kept": True}}}}


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update({"PYTHONPATH": str(ROOT), "NEV_STATE_DIR": str(tmp_path / "state")})
    return env


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "state" / "job-results.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_records_read_typed_and_write_back_what_they_read(tmp_path):
    p = _write(tmp_path, json.dumps(GOOD))
    recs = records.load(p)
    rec = recs.jobs["demo"]
    assert rec.status is JobStatus.RESENT and not rec.status.final and rec.sends == 1 and rec.lane == 0
    assert rec.params == {"JOB": "demo"} and rec.extra == {"future_field": {"kept": True}}
    assert recs.to_json() == GOOD  # nothing lost, unknown fields included
    assert "result" not in recs.to_json()["jobs"]["demo"] and rec.result is None


@pytest.mark.parametrize("jobs, field", [
    ({"demo": {"job": "demo", "sends": "two"}}, "jobs.demo.sends"),
    ({"demo": {"job": "demo", "status": "landing"}}, "jobs.demo.status"),
    ({"demo": {"job": "other"}}, "jobs.demo.job"),
    ({"demo": {"job": "demo", "params": {"K": 1}}}, "jobs.demo.params.K"),
    ({"demo": []}, "jobs.demo"),
    ([], "jobs"),
])
def test_a_bad_field_is_refused_naming_the_file_and_the_field(tmp_path, jobs, field):
    p = _write(tmp_path, json.dumps({"schema": 1, "jobs": jobs}))
    with pytest.raises(ConfigError) as e:
        records.load(p)
    assert str(p) in str(e.value) and f"field {field} " in str(e.value)


def test_the_locked_records_of_a_corrupt_file_are_refused_and_the_file_left_as_it_was(tmp_path):
    p = _write(tmp_path, '{"schema": 1, "jobs": {"demo": {"job": "demo", "sends": "two"}}}')
    before = p.read_bytes()
    ran = []
    with pytest.raises(ConfigError, match="jobs.demo.sends"), records.locked(_env(tmp_path)) as recs:
        ran.append(recs)
    assert ran == [] and p.read_bytes() == before


def test_what_a_writer_puts_in_the_records_is_checked_before_it_reaches_the_file(tmp_path):
    p = _write(tmp_path, json.dumps(GOOD))
    with pytest.raises(ConfigError, match="jobs.demo.resends"), records.locked(_env(tmp_path)) as recs:
        recs.jobs["demo"].resends = "many"  # type: ignore[assignment]
    assert json.loads(p.read_text()) == GOOD


def test_a_record_the_poller_makes_for_a_result_of_another_box_has_the_defaults():
    recs = Records()
    rec = recs.job("stray")
    assert rec == JobRecord(job="stray") and rec.status is JobStatus.SUBMITTED and recs.jobs["stray"] is rec
    assert Records.from_json(Fields("x"), recs.to_json()) == recs


@pytest.mark.parametrize("text, field", [
    ('{"schema": 1, "jobs": {"demo": {"job": "demo", "sends": "two"}}}', "field jobs.demo.sends"),
    ('{"schema": 1, "jobs": {"demo": ', "not valid JSON at line 1"),
])
def test_job_status_refuses_a_corrupt_records_file_in_one_line_and_leaves_it(tmp_path, text, field):
    p = _write(tmp_path, text)
    before = p.read_bytes()
    r = nev(["job", "status"], env=_env(tmp_path))
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(p) in lines[0] and field in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert p.read_bytes() == before


def typed(events: list[dict]) -> list[JobEvent]:
    return [JobEvent.from_json(e, f"events.jsonl: line {i}") for i, e in enumerate(events, 1)]


def _events() -> list[dict]:
    t = "2026-01-02T03:00:00.000Z"
    return [{"seq": 1, "time": t, "event": "run-started", "job": "demo", "run_id": "r1", "stages": ["gen", "check"],
             "inputs": {"manifest": "m1"}},
            {"seq": 2, "time": t, "event": "preflight-passed", "reasons": []},
            {"seq": 3, "time": t, "event": "stage-started", "stage": "gen", "pgid": 42, "log": "gen.log",
             "inputs": {"head": "h1", "stage": "d1"}},
            {"seq": 4, "time": "2026-01-02T03:00:10.000Z", "event": "stage-passed", "stage": "gen", "commit": "c1",
             "outputs": ["out/a"]},
            {"seq": 5, "time": "2026-01-02T03:00:11.000Z", "event": "job-ended", "outcome": "stopped", "exit": 8}]


def test_the_job_state_view_is_typed_and_state_json_reads_back_the_same(tmp_path):
    view = replay(typed(_events()))
    assert view.status is Status.STOPPED and view.stages["gen"].status is Status.PASSED
    assert view.stages["gen"].outputs == ["out/a"] and view.stages["check"].status is Status.PENDING
    assert view.attempts[0].last_seen == "2026-01-02T03:00:11.000Z" and view.preflight and view.preflight.ok
    assert used_seconds(view) == 11.0
    data = {**view.to_json(), "used_s": 11.0}
    assert list(data)[:4] == ["schema", "job", "status", "manifest"] and data["stages"]["gen"]["pgid"] == 42
    assert JobView.from_json(Fields(tmp_path / "state.json"), json.loads(json.dumps(data))).stages == view.stages


def test_a_bad_field_of_state_json_is_named_with_its_file(tmp_path):
    data = replay(typed(_events())).to_json()
    data["stages"]["gen"]["status"] = "half-done"
    with pytest.raises(ConfigError) as e:
        JobView.from_json(Fields(tmp_path / "state.json"), data)
    assert f"{tmp_path / 'state.json'}: field stages.gen.status is 'half-done'" in str(e.value)
