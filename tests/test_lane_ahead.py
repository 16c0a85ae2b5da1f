"""`lanes.ahead`: the plain `nev lane run|on` parsed without click, and when its channel starts early."""

import subprocess
import sys

import pytest

from lanes import ahead
from lanes.ahead import GateArgs


@pytest.mark.parametrize("sub,args,want", [
    ("run", ["wt", "true"], GateArgs(None, False, (), "wt", ("true",))),
    ("run", ["--lane", "2", "wt", "make", "-j", "2"], GateArgs(2, False, (), "wt", ("make", "-j", "2"))),
    ("on", ["--lane=1", "--pull", "out", "--lane-only", "wt", "true"], GateArgs(1, True, ("out",), "wt", ("true",))),
    ("run", ["--pull=out", "--pull", "b", "wt", "sh", "-c", "x --lane 3"],
     GateArgs(None, False, ("out", "b"), "wt", ("sh", "-c", "x --lane 3"))),
])
def test_the_plain_gate_is_parsed_as_the_command_line_would(sub, args, want):
    assert ahead.parse(sub, args) == want


@pytest.mark.parametrize("sub,args", [
    ("run", ["wt"]),                        # no command: the command line says so
    ("run", ["--help"]), ("run", ["-h", "wt", "true"]), ("run", ["--", "wt", "true"]),
    ("run", ["--lane", "x", "wt", "true"]), ("run", ["--lane", "-1", "wt", "true"]),
    ("run", ["--lane-only", "wt", "true"]),  # an option of `on` only
    ("run", ["--frob", "wt", "true"]), ("run", ["--pull"]), ("run", []),
])
def test_anything_else_is_left_to_the_command_line(sub, args):
    assert ahead.parse(sub, args) is None


def test_a_worktree_that_is_a_file_is_left_to_the_command_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert ahead.parse("run", [str(f), "true"]) is None
    assert ahead.parse("run", [str(tmp_path), "true"]) is not None


def test_nothing_starts_on_a_lane_or_without_lanes(monkeypatch, tmp_path):
    from lanes.base import openssh as ssh

    g = GateArgs(None, False, (), "wt", ("true",))
    monkeypatch.setenv("NEV_ON_LANE", "1")
    assert ahead.start(g) is False
    monkeypatch.delenv("NEV_ON_LANE")
    monkeypatch.delenv("NEV_LANE_SSH", raising=False)
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "none.json"))
    assert ahead.start(g) is False
    (tmp_path / "bad.json").write_text("{not json")
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "bad.json"))
    assert ahead.start(g) is False and ssh._AHEAD == {}


def test_the_plain_gate_answers_like_the_command_line_and_loads_no_click(tmp_path):
    """The same error line and exit code either way; the plain one without click or paramiko."""
    code = ("import sys\nfrom rig.cli import main\nrc = main(sys.argv[1:])\n"
            "print(rc, sorted(m for m in ('click', 'paramiko') if m in sys.modules))\n")
    env = {"PATH": "/usr/bin:/bin", "NEV_LANES_FILE": str(tmp_path / "none.json"), "HOME": str(tmp_path)}
    missing = str(tmp_path / "nowhere")
    plain = subprocess.run([sys.executable, "-c", code, "lane", "run", missing, "true"], capture_output=True,
                           text=True, env=env)
    via_click = subprocess.run([sys.executable, "-m", "rig.cli", "lane", "run", "--", missing, "true"],
                               capture_output=True, text=True, env=env)
    assert plain.stdout.split("\n")[0] == "1 []", plain.stderr
    assert via_click.returncode == 1
    assert plain.stderr == via_click.stderr and "does not exist" in plain.stderr
