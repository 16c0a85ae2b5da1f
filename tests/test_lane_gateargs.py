"""`lanes.gateargs`: the one parser of `nev lane run|on`, for the fast path and the click command
alike, read as click would read the command it declares, and its usage errors in click's words."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest

from lanes import cli, gateargs
from lanes.gateargs import GateArgs, Usage
from tests.helpers.local_lane import ROOT


@pytest.mark.parametrize("sub,args,want", [
    ("run", ["wt", "true"], GateArgs("run", "wt", ("true",))),
    ("run", ["--lane", "2", "wt", "make", "-j", "2"],
     GateArgs("run", "wt", ("make", "-j", "2"), lane_index=2)),
    ("on", ["--lane=1", "--pull", "out", "--lane-only", "wt", "true"],
     GateArgs("on", "wt", ("true",), lane_index=1, lane_only=True, pull=("out",))),
    ("run", ["--pull=out", "--pull", "b", "wt", "sh", "-c", "x --lane 3"],
     GateArgs("run", "wt", ("sh", "-c", "x --lane 3"), pull=("out", "b"))),
    ("run", ["--lane", "-1", "--lane", "0", "--", "-wt", "--bogus"],
     GateArgs("run", "-wt", ("--bogus",), lane_index=0)),
    ("run", ["--sandbox", "--pull=", "-", "x"],
     GateArgs("run", "-", ("x",), pull=("",), sandbox=True)),
    ("run", ["wt", "--help"], GateArgs("run", "wt", ("--help",))),
])
def test_a_gate_is_read_as_click_reads_the_command(sub, args, want):
    assert gateargs.parse(sub, args) == want


@pytest.mark.parametrize("sub,args,kind,name", [
    ("run", ["--bogus", "wt", "true"], "no-such-option", "--bogus"),
    ("run", ["--bogus=1", "wt", "true"], "no-such-option", "--bogus"),
    ("run", ["--lane-only", "wt", "true"], "no-such-option", "--lane-only"),     # `on`'s alone
    ("run", ["-x", "wt", "true"], "no-such-option", "-x"),
    ("run", ["-hx", "wt", "true"], "no-such-option", "-x"),
    ("run", ["--help", "--bogus"], "no-such-option", "--bogus"),     # before help, as click
    ("run", ["--pull"], "option", "--pull"),
    ("on", ["--sandbox=yes", "wt", "true"], "option", "--sandbox"),
    ("run", ["--lane", "x", "wt", "true"], "value", "--lane"),
    ("run", ["--lane="], "value", "--lane"),
    ("run", [], "missing", "worktree"), ("run", ["--"], "missing", "worktree"),
    ("on", ["wt"], "missing", "command"),
])
def test_what_is_not_a_gate_is_a_usage_error(sub, args, kind, name):
    with pytest.raises(Usage) as e:
        gateargs.parse(sub, args)
    assert (e.value.kind, e.value.name) == (kind, name)


@pytest.mark.parametrize("args", [
    ["--help"], ["-h", "wt"], ["--lane", "x", "--help"], ["--pull", "o", "-h"]])
def test_help_among_the_options_is_help(args):
    with pytest.raises(gateargs.Help):
        gateargs.parse("run", args)


def test_a_worktree_that_is_a_file_or_unreadable_is_refused_one_that_is_missing_is_not(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(Usage, match="is a file"):
        gateargs.parse("run", [str(f), "true"])
    nowhere = str(tmp_path / "nowhere")
    assert gateargs.parse("run", [nowhere, "true"]).worktree == nowhere
    if os.geteuid() != 0:
        shut = tmp_path / "shut"
        shut.mkdir(mode=0o000)
        with pytest.raises(Usage, match="is not readable"):
            gateargs.parse("run", [str(shut), "true"])


def test_sandbox_runs_the_command_as_a_sandboxed_verify():
    g = gateargs.parse("run", ["--sandbox", "wt", "make", "-j2"])
    assert g.argv() == ["nev", "sandbox", "exec", "--", "make", "-j2"]
    assert gateargs.GateArgs("run", "wt", ("make", "-j2")).argv() == ["make", "-j2"]


def test_the_click_commands_declare_the_parsers_options():
    for sub, command in (("run", cli.run), ("on", cli.on)):
        declared = {o: not p.is_flag for p in command.params if isinstance(p, click.Option)
                    for o in p.opts}
        assert declared == gateargs.OPTIONS[sub], sub
        arguments = [p.name for p in command.params if isinstance(p, click.Argument)]
        assert arguments == ["worktree", "command"]
    from rig import commands

    assert tuple(commands.cli.context_settings["help_option_names"]) == gateargs.HELP


def _read(command: click.Command, args: list[str]) -> tuple[str, object]:
    """How `nev lane <command> ARGS` reads: ("params", its values) or ("usage", click's words) or
    ("help", exit code)."""
    from rig import commands

    parent = click.Context(commands.cli, info_name="nev", help_option_names=list(gateargs.HELP))
    try:
        ctx = command.make_context(command.name, list(args), parent=parent)
    except click.UsageError as e:
        return "usage", e.format_message()
    except click.exceptions.Exit as e:
        return "help", e.exit_code
    g = ctx.params.get("gate_args")
    if isinstance(g, GateArgs):
        return "params", {"lane_index": g.lane_index, "pull": g.pull, "sandbox": g.sandbox,
                          "worktree": g.worktree, "command": g.command,
                          **({"lane_only": g.lane_only} if g.sub == "on" else {})}
    return "params", {k: (tuple(v) if isinstance(v, list) else v) for k, v in ctx.params.items()}


@pytest.mark.parametrize("sub", ["run", "on"])
@pytest.mark.parametrize("args", [
    ["wt", "true"], ["--lane", "2", "wt", "make"],
    ["--lane=-1", "--pull", "o", "--pull=p", "wt", "x", "--y"],
    ["--sandbox", "--", "wt", "x"], ["--lane-only", "wt", "x"], ["--bogus", "wt", "true"],
    ["--lan", "1", "wt", "x"], ["-x", "wt", "true"], ["-hx"], ["--pull"],
    ["--sandbox=1", "wt", "x"],
    ["--lane", "x", "wt", "true"],
    ["--lane", " 7 ", "wt", "x"], [], ["wt"], ["FILE", "true"], ["--help"], ["--lane", "x", "-h"],
    ["--help", "--bogus"],
])
def test_the_command_reads_every_line_as_clicks_own_parser_of_it_does(sub, args, tmp_path, capsys,
                                                                      monkeypatch):
    """The click command (parsed by gateargs) and a twin of it that click itself parses agree:
    the same values, or the same usage error in the same words, or help."""
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "wt").mkdir()
    monkeypatch.chdir(tmp_path)
    command = cli.run if sub == "run" else cli.on
    twin = click.Command(sub, params=command.params,
                         context_settings={"allow_interspersed_args": False})
    ours, clicks = _read(command, args), _read(twin, args)
    assert ours == clicks
    if args == ["--bogus", "wt", "true"]:
        assert ours == ("usage", "No such option '--bogus'.")
    capsys.readouterr()


def nev(how: str, args: list[str], tmp_path) -> subprocess.CompletedProcess:
    """`nev ARGS` in a process of its own: `-m` (python -m rig.cli), `script` (the console script's
    `rig.cli:run`) or `tree` (the click command tree alone, the fast path not taken)."""
    code = {"-m": None,
            "script": "import sys\nfrom rig.cli import run\nsys.argv[0] = 'nev'\nrun()\n",
            "tree": "import sys\nfrom rig import commands\n"
                    "sys.exit(commands.main(sys.argv[1:]))\n"}[how]
    argv = [sys.executable, "-m", "rig.cli"] if code is None else [sys.executable, "-c", code]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
           "NEV_LANES_FILE": str(tmp_path / "none.json")}
    return subprocess.run([*argv, *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=60)


@pytest.mark.parametrize("sub", ["run", "on"])
def test_an_unknown_option_is_exit_2_in_clicks_words_whichever_way_nev_starts(sub, tmp_path):
    wt = tmp_path / "wt"
    wt.mkdir()
    results = [nev(how, ["lane", sub, "--bogus", str(wt), "true"], tmp_path)
               for how in ("-m", "script", "tree")]
    for r in results:
        assert r.returncode == 2, r.stderr
        assert "No such option" in r.stderr and "--bogus" in r.stderr
        assert "does not exist" not in r.stderr
        assert "Traceback" not in r.stderr
    assert results[0].stderr == results[1].stderr == results[2].stderr
