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


# --- tracks.json (item 10): unknown keys are refused naming the key and the close one ----------------

@pytest.mark.parametrize("data,key,near", [
    ({"verify": "true", "landCheck": ["false"]}, "landCheck", "landChecks"),
    ({"verify": "true", "specWatch": {"landscript": "x"}}, "specWatch.landscript", "landScript"),
    ({"verify": "true", "specWatch": {"lanes": {"tol": "x"}}}, "specWatch.lanes.tol", "tool"),
    ({"verify": "true", "install": {"command": "x", "target": "t", "targt": "u"}}, "install.targt", "target"),
])
def test_an_unknown_key_in_tracks_json_is_refused_naming_it_and_the_close_one(tmp_path, data, key, near):
    from jobs import tracks
    from lanes.base.errors import ConfigError

    p = tmp_path / "tracks.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as e:
        tracks.load(p)
    assert str(p) in str(e.value) and f"field {key} " in str(e.value) and near in str(e.value)


def test_nev_settings_names_an_unknown_tracks_key(tmp_path):
    (tmp_path / "tracks.json").write_text(json.dumps({"verify": "true", "landCheck": ["false"]}))
    r = nev("settings", "--json", cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    row = [f for f in json.loads(r.stdout)["files"] if f["what"] == "tracks"][0]
    assert "landCheck" in row["error"] and "landChecks" in row["error"]


def test_main_tracks_json_that_is_not_utf8_is_one_line(tmp_path):
    from jobs.land_after import tracks_at
    from lanes.base.errors import ConfigError
    from lanes.base.gitrun import Repo

    repo = Repo(tmp_path)
    repo.git("init", "-q", "-b", "main")
    (tmp_path / "tracks.json").write_bytes(b'{"verify": "\xff"}')
    repo.git("add", "tracks.json")
    repo.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t")
    with pytest.raises(ConfigError, match=r"^main:tracks.json: the tracks file is not UTF-8"):
        tracks_at(repo, "main")


@pytest.mark.parametrize("loader,data,key,near", [
    ("folknet", {"providers": ["x"], "aliases": {"a": {"pool": "p", "max_inflight": 1, "provider": "x",
                                                         "max_inflght": 9}}}, "aliases.a.max_inflght", "max_inflight"),
    ("folknet", {"providers": ["x"], "aliases": {}, "provders": []}, "provders", "providers"),
    ("rigfile", {"roles": {}, "jmup": "j@h"}, "jmup", "jump"),
    ("rigfile", {"roles": {"r": {"hosts": ["root@h"], "reloads": "x"}}}, "roles.r.reloads", "reload"),
])
def test_an_unknown_key_in_a_declaration_is_refused_naming_it(tmp_path, loader, data, key, near):
    from bench import folknet
    from lanes.base.errors import ConfigError
    from rig import rigfile

    p = tmp_path / "f.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as e:
        {"folknet": folknet.load, "rigfile": rigfile.load}[loader](p)
    assert str(p) in str(e.value) and f"field {key} " in str(e.value) and near in str(e.value)
