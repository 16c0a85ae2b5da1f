"""Each typed record reads a file the previous version of nev wrote (kept under tests/data/records/,
written by that version's own code) and refuses a malformed one in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.state import Event, JobState, Status, valid_prefix
from lanes.base.errors import ConfigError

DATA = Path(__file__).parent / "data" / "records"


def test_job_events_written_by_the_previous_version_read_as_typed_records(tmp_path: Path):
    text = (DATA / "events-v0.1.jsonl").read_text()
    events, size = valid_prefix(text, "events.jsonl")
    assert size == len(text.encode()) and [e.seq for e in events] == list(range(1, 9))
    first, failed = events[0], events[6]
    assert first.event is Event.RUN_STARTED and first.stages == ("gen", "verify")
    assert first.inputs["manifest"] == "m1" and first.run_id == "r-0001"
    assert failed.event is Event.STAGE_FAILED and (failed.exit, failed.reason) == (1, "floors not met")
    assert events[3].pgid == 4242 and events[4].outputs == ("out/a",)
    # a new version appends to the old file: the chain goes on from the old lines
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "events.jsonl").write_text(text)
    js = JobState.open(folder)
    assert js.state.status is Status.FAILED and js.state.stages["verify"].status is Status.FAILED
    js.record(Event.RUN_STARTED, job="clamp-px", run_id="r-0002", stages=["gen"], inputs={})
    js.close()
    again, _ = valid_prefix((folder / "events.jsonl").read_text())
    assert len(again) == 9 and again[-1].run_id == "r-0002"


def test_a_malformed_job_event_is_refused_in_one_line():
    lines = (DATA / "events-v0.1.jsonl").read_text().splitlines(keepends=True)
    bad = lines[3].replace('"pgid": 4242', '"pgid": "4242"')
    with pytest.raises(ConfigError) as e:
        valid_prefix("".join(lines[:3]) + bad, "events.jsonl")
    msg = str(e.value)
    assert "\n" not in msg and "events.jsonl: line 4" in msg and "pgid" in msg


def test_an_outbox_written_by_the_previous_version_is_delivered_as_notices(tmp_path: Path):
    import json
    import shutil

    from lanes.base import chatformat, notify

    d = tmp_path / "notify"
    d.mkdir()
    shutil.copy(DATA / "notify-outbox-v0.1.json", d / "outbox.json")
    box = notify._outbox(d)
    assert [(m.kind, m.state, m.subject) for m in box] == [
        ("alias_down", "down", "qwen-fast"), ("landed", "event", "abspos-width")]
    assert box[1].announcement is not None and box[1].announcement["batches"] == 2
    old = json.loads((DATA / "notify-outbox-v0.1.json").read_text())["pending"]
    assert [m.to_json() for m in box] == old            # the nev format posts what it posted
    assert chatformat.discord_problems(chatformat.render("discord", box[1])) == []
    # an entry that does not read as a notice is dropped, the rest kept
    (d / "outbox.json").write_text(json.dumps({"pending": [{"kind": 3}, old[0]]}))
    assert [m.key for m in notify._outbox(d)] == [old[0]["key"]]


def test_job_records_written_by_the_previous_version_read_back_and_write_the_same(tmp_path: Path):
    import json

    from jobs.records import JobStatus, Records
    from lanes.base.jsonfile import Fields

    path = DATA / "job-results-v0.1.json"
    data = json.loads(path.read_text())
    recs = Records.from_json(Fields(path), data)
    a, b = recs.jobs["clamp-px"], recs.jobs["abspos-width"]
    assert a.status is JobStatus.SUBMITTED and a.params["SHARE"] == "/srv/lane-shared" and a.lane == 0
    assert (b.status, b.cutoffs, b.exit, b.outcome) == (JobStatus.LANDED, 1, 0, "passed")
    assert recs.to_json() == data                      # written back as the old version wrote it
    bad = json.loads(path.read_text())
    bad["jobs"]["clamp-px"]["sends"] = "one"
    with pytest.raises(ConfigError) as e:
        Records.from_json(Fields(path), bad)
    assert "\n" not in str(e.value) and "jobs.clamp-px" in str(e.value) and "sends" in str(e.value)
