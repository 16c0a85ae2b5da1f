"""Hostile and careless input to nev's state and declaration files (issue 31): each is refused
with one line naming the file (and the field), never a traceback, and the file is left as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.state import JobState

ROOT = Path(__file__).resolve().parent.parent


def nev(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, cwd=cwd or ROOT, timeout=120)


def one_line(r: subprocess.CompletedProcess, *names: str) -> None:
    assert r.returncode in (1, 2), (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nev: "), r.stderr
    for n in names:
        assert n in lines[0], (n, lines[0])


# --- job events (item 10): an event nev never records is refused, naming it ------------------------

def _job_state(tmp_path: Path) -> Path:
    js = JobState.open(tmp_path / "st")
    js.record("run-started", job="j", run_id="r1", stages=["a"], inputs={})
    js.record("stage-started", stage="a", inputs={"head": "x"})
    js.close()
    return tmp_path / "st"


def test_a_hand_edited_unknown_event_is_refused_naming_it_and_the_close_one(tmp_path):
    st = _job_state(tmp_path)
    ev = st / "events.jsonl"
    lines = ev.read_text().splitlines()
    last = json.loads(lines[-1])
    last["event"] = "stage-passEd"
    ev.write_text("\n".join([*lines[:-1], json.dumps(last, sort_keys=True)]) + "\n")
    before = ev.read_bytes()
    r = nev("job", "status", "--state", str(st))
    one_line(r, str(ev), "line 2", "stage-passEd", "stage-passed")
    assert ev.read_bytes() == before


@pytest.mark.parametrize("field,value", [("stage", 5), ("inputs", None), ("inputs", [1]), ("stages", "a")])
def test_an_event_field_of_the_wrong_type_is_refused_naming_it(tmp_path, field, value):
    st = _job_state(tmp_path)
    ev = st / "events.jsonl"
    lines = ev.read_text().splitlines()
    first = json.loads(lines[0])
    first[field] = value
    if field == "stage":
        first = {**json.loads(lines[1]), "stage": value}
        lines = [lines[0], json.dumps(first, sort_keys=True)]
    else:
        lines = [json.dumps(first, sort_keys=True)]
    ev.write_text("\n".join(lines) + "\n")
    r = nev("job", "status", "--state", str(st))
    if value is None:   # null is a field left out
        assert "Traceback" not in r.stderr
    else:
        one_line(r, str(ev), field)
