"""`lanes.quick`: the gate's SSH client started from an earlier gate's record, before nev loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lanes import quick

SECRET = "forgetok-quick-" + "5d1e9a77c3"


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "lanes.json"))
    monkeypatch.delenv("NEV_ON_LANE", raising=False)
    monkeypatch.delenv("GENERA_ON_LANE", raising=False)
    (tmp_path / "lanes.json").write_text('{"lanes": []}')
    (tmp_path / "agent.py").write_text("x = 1\n")
    yield tmp_path
    quick.stop_all()


@pytest.mark.parametrize("args,lane", [
    (["wt", "true"], ""), (["--lane", "2", "wt", "true"], "2"), (["--lane=1", "--pull", "o", "wt", "x"], "1"),
    (["--pull=o", "--lane-only", "wt", "x"], ""), (["wt", "sh", "-c", "--lane 3"], ""),
])
def test_the_lane_is_read_from_the_plain_options(args, lane):
    assert quick.lane_option(args) == lane


@pytest.mark.parametrize("args", [["--frob", "wt", "x"], ["--lane"], ["-h"], ["--", "wt", "x"]])
def test_options_it_cannot_read_mean_no_record(args):
    assert quick.lane_option(args) is None


def test_a_record_holds_while_its_files_and_settings_are_as_they_were(cache, monkeypatch):
    files = [str(cache / "lanes.json"), str(cache / "agent.py")]
    quick.record("", ["ssh", "lane", "--", "agent", "h1"], files)
    assert quick.lookup("") == ["ssh", "lane", "--", "agent", "h1"]
    assert quick.lookup("1") is None                                # another lane: no record
    (cache / "agent.py").write_text("x = 22\n")                     # the agent changed: its hash would
    assert quick.lookup("") is None
    quick.record("", ["ssh", "lane", "--", "agent", "h2"], files)
    assert quick.lookup("") == ["ssh", "lane", "--", "agent", "h2"]
    monkeypatch.setenv("NEV_LANE_JUMP", "jump@elsewhere")             # a setting changed
    assert quick.lookup("") is None
    monkeypatch.delenv("NEV_LANE_JUMP")
    os.unlink(cache / "lanes.json")                                  # a file it came from is gone
    assert quick.lookup("") is None


def test_the_record_keeps_no_setting_and_no_secret(cache, monkeypatch):
    monkeypatch.setenv("NEV_FORGE_TOKEN", SECRET)
    monkeypatch.setenv("NEV_LANE_JUMP", "jumpuser@jumphost-7f3a")
    quick.record("", ["ssh", "lane", "--", "agent"], [str(cache / "lanes.json")])
    text = (cache / "cache" / "nev" / quick.CACHE_NAME).read_text()
    assert SECRET not in text and "jumphost-7f3a" not in text
    monkeypatch.setenv("NEV_FORGE_TOKEN", SECRET + "x")               # a secret never shapes the argv
    assert quick.lookup("") == ["ssh", "lane", "--", "agent"]


@pytest.mark.parametrize("content", ["{torn", "[1, 2]", json.dumps({"k": {"argv": "ssh", "files": []}})])
def test_a_torn_or_foreign_cache_is_no_record_and_is_written_anew(cache, content):
    path = cache / "cache" / "nev" / quick.CACHE_NAME
    path.parent.mkdir(parents=True)
    path.write_text(content)
    assert quick.lookup("") is None
    quick.record("", ["ssh", "x"], [])
    assert quick.lookup("") == ["ssh", "x"]


def test_records_are_bounded(cache, monkeypatch):
    for i in range(quick.KEEP + 5):
        monkeypatch.setenv("NEV_LANE_JUMP", f"j{i}")
        quick.record("", ["ssh", str(i)], [])
    data = json.loads((cache / "cache" / "nev" / quick.CACHE_NAME).read_text())
    assert len(data) == quick.KEEP
    assert quick.lookup("") == ["ssh", str(quick.KEEP + 4)]            # the newest kept


def test_the_recorded_client_starts_and_only_the_same_argv_takes_it(cache):
    argv = [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read())"]
    quick.record("", argv, [str(cache / "lanes.json")])
    quick.start(["wt", "true"])
    assert list(quick.STARTED) == [tuple(argv)]
    p = quick.take(argv)
    assert isinstance(p, subprocess.Popen) and quick.STARTED == {}
    out, _ = p.communicate(b"through the client\n", timeout=10)
    assert out == b"through the client\n"

    quick.start(["wt", "true"])
    stale = next(iter(quick.STARTED.values()))
    assert quick.take(argv[:2] + ["pass"]) is None                     # another argv: none taken,
    assert isinstance(stale, subprocess.Popen) and stale.returncode is not None   # the started one ended
    assert quick.STARTED == {}


def test_nothing_starts_on_a_lane_or_without_a_record(cache, monkeypatch):
    argv = [sys.executable, "-c", "pass"]
    quick.start(["wt", "true"])
    assert quick.STARTED == {}
    quick.record("", argv, [])
    monkeypatch.setenv("NEV_ON_LANE", "1")
    quick.start(["wt", "true"])
    assert quick.STARTED == {}
    monkeypatch.delenv("NEV_ON_LANE")
    quick.start(["--frob", "wt", "true"])
    assert quick.STARTED == {}


def test_a_removed_working_folder_is_no_crash(cache, tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    quick.record("", ["ssh", "x"], [])
    assert quick.lookup("") == ["ssh", "x"]
