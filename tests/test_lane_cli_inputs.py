"""Careless input to the lane commands (issue 31, item 10): usage errors exit 2 in click's words,
the lanes file refuses a port out of range and a relative root, a NaN setting is refused rather
than turning the disk guard off, paramiko's own log lines stay out of `nev lane list`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lanes import lanesfile
from lanes.base import settings
from lanes.base.errors import ConfigError, UsageError
from lanes.base.exitcodes import Exit
from tests.helpers.local_lane import ROOT, LocalLane, make_repo


def _one_line(r) -> None:
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("verb", ["run", "on"])
def test_an_unknown_option_is_a_usage_error_in_clicks_words(tmp_path, verb):
    lane = LocalLane(tmp_path)
    wt = make_repo(tmp_path / "wt")
    r = lane.nev(["lane", verb, "--bogus", str(wt), "true"])
    assert r.returncode == Exit.USAGE, r.stderr
    assert "No such option" in r.stderr and "--bogus" in r.stderr
    _one_line(r)


@pytest.mark.parametrize("spelled", [["--lane", "99"], ["--lane=99"], ["--lane", "-1"]])
def test_a_lane_index_no_lane_has_is_a_usage_error(tmp_path, spelled):
    lane = LocalLane(tmp_path)
    wt = make_repo(tmp_path / "wt")
    r = lane.nev(["lane", "run", *spelled, str(wt), "sh", "-c", "echo ran"])
    assert r.returncode == Exit.USAGE, r.stderr
    assert "only 1 lane(s) configured" in r.stderr and "ran" not in r.stdout
    _one_line(r)
    with pytest.raises(UsageError):
        lanesfile.pick(lanesfile.LanesFile(None, [lanesfile.Lane(0, "lane@h")]), 99)


def test_options_after_the_worktree_are_the_commands(tmp_path):
    lane = LocalLane(tmp_path)
    wt = make_repo(tmp_path / "wt")
    r = lane.nev(["lane", "run", str(wt), "sh", "-c", "echo $0 $1", "--bogus", "-x"])
    assert r.returncode == 0 and r.stdout == "--bogus -x\n", r.stderr


@pytest.mark.parametrize("lane,why", [
    ({"ssh": "lane@10.0.0.1:99999"}, "bad port"),
    ({"ssh": "lane@10.0.0.1:0"}, "bad port"),
    ({"ssh": "lane@[::1]:x"}, "bad port"),
    ({"ssh": "lane@10.0.0.1", "root": "srv/lane"}, "lanes[0].root is 'srv/lane', not an absolute path"),
    ({"ssh": "lane@10.0.0.1", "root": "../lane"}, "not an absolute path"),
    ({"ssh": "lane@10.0.0.1", "shared": "share"}, "lanes[0].shared is 'share', not an absolute path"),
])
def test_the_lanes_file_refuses_a_port_out_of_range_and_a_relative_root(tmp_path, lane, why):
    path = tmp_path / "careless-lanes.json"
    path.write_text(json.dumps({"lanes": [lane]}))
    with pytest.raises(ConfigError) as e:
        lanesfile.load(path)
    assert why in str(e.value) and str(path) in str(e.value)
    r = LocalLane(tmp_path).nev(["lane", "list"], NEV_LANES_FILE=str(path))
    assert r.returncode == Exit.FAILED and why in r.stderr
    _one_line(r)


@pytest.mark.parametrize("raw", ["nan", "NaN", "-nan"])
def test_a_nan_disk_guard_is_refused_not_turned_off(tmp_path, raw):
    with pytest.raises(ConfigError, match="NEV_LANE_MIN_FREE_GB"):
        settings.get_float(settings.LANE_MIN_FREE_GB, {"NEV_LANE_MIN_FREE_GB": raw})
    lane = LocalLane(tmp_path)
    wt = make_repo(tmp_path / "wt")
    r = lane.nev(["lane", "run", str(wt), "sh", "-c", "echo ran"], NEV_LANE_MIN_FREE_GB=raw)
    assert r.returncode == Exit.FAILED and "NEV_LANE_MIN_FREE_GB" in r.stderr and "ran" not in r.stdout
    _one_line(r)
    assert settings.get_float(settings.LANE_MIN_FREE_GB, {"NEV_LANE_MIN_FREE_GB": "0"}) == 0.0


PARAMIKO_LINE = """
import logging, sys
logging.basicConfig(level=logging.DEBUG if sys.argv[1] == "-v" else logging.WARNING,
                    format="%(name)s: %(message)s", stream=sys.stderr)
from lanes.base import ssh
c = ssh.Connection(ssh.Target.parse("lane@127.0.0.1:1"), known_hosts=__import__("pathlib").Path("/nonexistent"))
try:
    c.connect()                       # fails at once (no known_hosts): quiets paramiko on the way
except ssh.SshError:
    pass
logging.getLogger("paramiko.transport").error("Secsh channel 0 open FAILED: Connection refused")
"""


@pytest.mark.parametrize("flag,shown", [("", False), ("-v", True)])
def test_paramikos_own_log_lines_show_only_with_verbose(flag, shown):
    r = subprocess.run([sys.executable, "-c", PARAMIKO_LINE, flag or "-"], capture_output=True, text=True,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert ("Secsh channel 0 open FAILED" in r.stderr) is shown, r.stderr


@pytest.mark.parametrize("folder", ["a:b;c$(id)", "new\nline", ".hidden", "spaced name ü"])
def test_an_odd_worktree_folder_name_gives_a_plain_copy_name_on_the_lane(tmp_path, folder):
    from lanes.agent import layout

    lane = LocalLane(tmp_path)
    wt = make_repo(tmp_path / "repos" / folder)
    r = lane.nev(["lane", "run", str(wt), "sh", "-c", "pwd"])
    assert r.returncode == 0, r.stderr
    from lanes import payload

    name = payload.Worktree.open(wt).name
    assert name.startswith(layout.plain_name(folder) + "-") and layout.copy_key(name)
    assert r.stdout.strip() == str(lane.root / name) and name != folder
    for entry in sorted(p.name for p in lane.root.iterdir()):
        assert set(entry) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-"), entry
    assert layout.plain_name("engine") == "engine"                     # a plain name is its own
    assert layout.plain_name("a:b") != layout.plain_name("a;b")        # two odd names never meet
