"""The command tree keeps its rules (issue 36): each command's --help lists exactly the exit codes
`lanes/base/exitcodes.COMMANDS` gives it, the codes commands really return are listed there, a
usage error is one line, and the options are the same everywhere (--json where data is printed,
--dry-run the one dry-run spelling, --lane with one wording, --repo defaults stated, -v after the
group too, --force/--grace only where they apply). Allowlists say why a rule does not apply."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lanes.base.exitcodes import COMMANDS, SHARED, codes_of
from lanes.base.laneopt import Default, help_text
from rig.cli import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tree() -> list[tuple[str, click.Command]]:
    """Every command and group under `nev`, by its path after `nev` (`` is nev itself)."""
    out = []

    def walk(cmd: click.Command, path: str) -> None:
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), f"{path} {name}".strip())

    walk(cli, "")
    return out


TREE = tree()
LEAVES = {p: c for p, c in TREE if not isinstance(c, click.Group)}


def options(cmd: click.Command) -> dict[str, click.Option]:
    return {o: p for p in cmd.params if isinstance(p, click.Option) for o in p.opts}


def listed_codes(help_text_: str) -> list[int]:
    """The codes the `Exit codes:` paragraph at the end of a --help names."""
    flat = " ".join(help_text_.split())
    m = re.search(r"Exit codes: (.*?) See docs/exit-codes\.md\.", flat)
    assert m, "no `Exit codes: ... See docs/exit-codes.md.` at the end of the help"
    return [int(n) for n in re.findall(r"(?:^|; )(\d+) ", m.group(1))]


# -- exit codes ----------------------------------------------------------------------

def test_every_command_is_in_the_exit_code_table_and_the_table_names_no_other():
    assert set(LEAVES) == set(COMMANDS)


# `nev job step` (hidden, run by the job workflow on a lane) is read by its own argparse
# (jobs/lane_main.py), help included: its codes are the table's all the same.
OWN_PARSER = {"job step"}


@pytest.mark.parametrize("path", [p for p, _ in TREE if p not in OWN_PARSER],
                         ids=lambda p: p or "nev")
def test_each_help_lists_exactly_the_codes_of_the_table(path):
    r = CliRunner().invoke(cli, [*path.split(), "--help"])
    assert r.exit_code == 0, r.output
    assert listed_codes(r.output) == codes_of(path).codes()


def _nev(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
                          cwd=ROOT, timeout=60)


def assert_listed(path: str, code: int) -> None:
    """A code a command returned is one its table entry (and so its --help) lists, or the status
    it passes on."""
    c = COMMANDS[path]
    assert code in c.codes() or c.passes, \
        f"`nev {path}` exited {code}, not listed in exitcodes.COMMANDS"


@pytest.fixture
def two_lanes(tmp_path):
    f = tmp_path / "lane.local.json"
    f.write_text('{"lanes": [{"ssh": "u@127.0.0.1"}, {"ssh": "u@127.0.0.2"}]}')
    return {"NEV_LANES_FILE": str(f), "NEV_LANE_SSH": ""}


@pytest.fixture
def a_rig(tmp_path):
    """A rig file with one role and one serving role (fn), nothing reachable; HOME here."""
    f = tmp_path / "rig.local.json"
    replica = {"host": "admin@arm1:2222", "sudo": True, "start": "/u start", "stop": "/u stop",
               "status": "/u status"}
    f.write_text(json.dumps({"roles": {"proxy": {"hosts": ["root@proxy"]}}, "serving": {"fn": {
        "proxy": "proxy", "backend": "be_fn", "aliases": ["a"], "replicas": {"r0": replica}}}}))
    return {"NEV_RIG_FILE": str(f), "HOME": str(tmp_path), "NEV_STATE_DIR": str(tmp_path / "st")}


@pytest.fixture
def no_lanes(tmp_path):
    return {"NEV_LANES_FILE": str(tmp_path / "none.json"), "NEV_LANE_SSH": "", "NEV_ON_LANE": ""}


# Known refusals (the cases of tests/test_lane_cli_inputs.py, test_lane_gate.py, test_cli.py,
# test_rig_log.py and issue 36), each with the code it gives.
REFUSALS = [
    ("lane run", ["lane", "run", "--lane", "5", ".", "true"], "two_lanes", 2),
    ("lane sweep", ["lane", "sweep", "--lane", "5", "--dry-run"], "two_lanes", 2),
    ("lane provision", ["lane", "provision", "--lane", "5"], "two_lanes", 2),
    ("lane install", ["lane", "install", "--lane", "5"], "two_lanes", 2),
    ("dagu status", ["dagu", "status", "--lane", "5"], "two_lanes", 2),
    ("lane run", ["lane", "run", ".", "true"], "no_lanes", 3),
    ("lane on", ["lane", "on", "--lane-only", ".", "true"], "no_lanes", 3),
    ("lane run", ["lane", "run", "--bogus", ".", "true"], "no_lanes", 2),
    ("lane list", ["lane", "list", "--bogus"], "no_lanes", 2),
    ("land", ["land", "a", "b"], "no_lanes", 1),             # 2 is land's rebase conflict
    ("land", ["land", "--bogus"], "no_lanes", 1),
    ("rig log", ["rig", "log", "--worked"], "no_lanes", 2),
    ("lane sweep", ["lane", "sweep", "--archives", "--json"], "no_lanes", 2),
    ("rig snapshot", ["rig", "snapshot", "lbl", "nope"], "a_rig", 2),        # an unknown role
    ("rig provision-sudo", ["rig", "provision-sudo", "nope", "--dry-run"], "a_rig", 2),
    ("dagu autostart", ["dagu", "autostart"], "no_lanes", 2),     # on|off or --install|--uninstall
    ("dagu autostart", ["dagu", "autostart", "on", "--uninstall"], "no_lanes", 2),
]


@pytest.mark.parametrize("path,argv,env,code", REFUSALS, ids=[" ".join(r[1]) for r in REFUSALS])
def test_known_refusals_exit_with_a_listed_code_on_one_line(path, argv, env, code, request):
    r = _nev(*argv, env=request.getfixturevalue(env))
    assert r.returncode == code, r.stderr
    assert_listed(path, r.returncode)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nev: "), r.stderr


def test_a_usage_error_names_the_help_to_read():
    r = _nev("lane", "frobnicate")
    assert r.returncode == 2
    assert r.stderr == "nev: No such command 'frobnicate'; see `nev lane --help`\n"


def test_a_planted_unlisted_code_fails_the_check():
    with pytest.raises(AssertionError, match="not listed"):
        assert_listed("rig snapshots", 4)      # 4 (lane disk short) is none of rig snapshots
    assert_listed("lane run", 4)
    assert_listed("lane run", 42)               # the remote command's own status passes through


def test_land_defines_2_itself_and_its_usage_errors_exit_1():
    land = COMMANDS["land"]
    assert [n for n, _, _ in land.own] == [2] and land.usage == 1
    assert all(c.usage == 2 for p, c in COMMANDS.items() if p != "land")


def test_the_page_says_which_codes_are_shared_and_which_a_command_defines():
    with open(os.path.join(ROOT, "docs", "exit-codes.md"), encoding="utf-8") as f:
        page = f.read()
    assert ", ".join(str(int(e)) for e in SHARED) in page
    assert "| `nev land` | 3 | 2: a rebase conflict" in page


# -- options -------------------------------------------------------------------------

# Commands that print no data (only lines saying what was done), or whose output is another
# program's: no --json. Each with why.
NO_DATA = {
    "batch run": "says each round on stderr; the batch's record is `nev ledger --json`",
    "box demo": "runs the walkthrough, step lines only", "box down": "changes only",
    "box env": "prints shell `export` lines for eval", "box shape": "changes only",
    "box up": "changes only", "completion": "prints a shell script for eval",
    "config init": "changes only (the file written)", "rig trust": "changes only (the line pinned)",
    "dagu autostart": "changes only", "dagu clean-jobs": "changes only",
    "dagu prune-mirror": "changes only", "dagu queue": "changes only",
    "dagu start": "changes only", "dagu stop": "changes only", "dagu stop-run": "changes only",
    "dagu tunnel": "holds a tunnel open", "dagu up": "changes only",
    "floors check": "one line per broken floor; the scores are `nev scores --json`",
    "floors raise": "writes and commits floor files",
    "job check preflight": "an exit code and the unmet requirements' lines",
    "job revoke": "changes only", "job run": "runs the job; its record is `nev job status --json`",
    "job step": "hidden: a job workflow's step, its record is the state file",
    "job submit": "changes only", "land": "changes only (the landing's lines)",
    "lane create": "changes only", "lane destroy": "changes only", "lane install": "changes only",
    "lane on": "the command's own output", "lane run": "the command's own output",
    "lane provision": "changes only", "lane writer fetch": "changes only",
    "lane writer start": "changes only", "lane writer stop": "changes only",
    "provenance regen": "submits jobs, one line each",
    "rig advertise": "serves mDNS until stopped",
    "rig dashboard": "serves a web page until stopped",
    "rig drain": "changes only", "rig restart": "changes only", "rig start": "changes only",
    "rig stop": "changes only", "rig provision-sudo": "changes only", "rig restore": "changes only",
    "rig snapshot": "changes only", "rig forward down": "changes only",
    "rig forward supervise": "hidden: a forward's supervisor in the foreground",
    "oracle serve-store": "hidden: a gate's store builder, run by the lane agent; it answers on a socket",
    "rig services apply": "changes only", "rig services once": "one inventory round, its lines",
    "rig services remove": "changes only", "rig services run": "runs the services until stopped",
    "sandbox check": "an exit code and what is missing", "sandbox exec": "the command's own output",
}


def test_every_command_that_prints_data_has_json_and_says_what_it_prints():
    missing = [p for p, c in LEAVES.items() if "--json" not in options(c) and p not in NO_DATA]
    assert not missing, f"no --json (add it, or to NO_DATA with a reason): {missing}"
    stale = [p for p in NO_DATA if p in LEAVES and "--json" in options(LEAVES[p])]
    assert not stale and set(NO_DATA) <= set(LEAVES), (stale, set(NO_DATA) - set(LEAVES))
    undocumented = [p for p, c in LEAVES.items()
                    if "--json" in options(c) and not options(c)["--json"].help]
    assert not undocumented


# An option that makes a command change nothing is spelled --dry-run; the old spellings stay hidden.
# `nev land --check` is not one: it runs the gate and every condition (a real run on a lane).
DRY_RUN_WORDS = re.compile(r"change nothing|changes? no|run nothing|print the (command lines|steps)",
                           re.I)
NOT_DRY_RUN = {("land", "--check"): "runs the gate on a lane and every condition; "
                                    "stops before the merge"}


def test_one_dry_run_spelling():
    wrong = []
    for path, cmd in LEAVES.items():
        for name, opt in options(cmd).items():
            if opt.hidden or name == "--dry-run" or (path, name) in NOT_DRY_RUN:
                continue
            if name in ("--print", "--check") or DRY_RUN_WORDS.search(opt.help or ""):
                wrong.append((path, name))
    assert not wrong, f"a dry run is spelled --dry-run: {wrong}"


# Every command that changes something has a dry run (issue 36); tests/test_dry_runs.py checks
# that the four added last change nothing and reach no host.
HAS_DRY_RUN = {"lane provision", "dagu up", "rig snapshot", "job submit", "lane create",
               "lane destroy", "lane sweep", "rig restore", "rig provision-sudo"}


def test_the_commands_that_change_a_lane_a_host_or_the_forge_have_a_dry_run():
    missing = [p for p in sorted(HAS_DRY_RUN) if "--dry-run" not in options(LEAVES[p])]
    assert not missing, f"no --dry-run: {missing}"
    for p in ("lane provision", "dagu up", "rig snapshot", "job submit"):
        assert "change nothing" in (options(LEAVES[p])["--dry-run"].help or ""), p


def test_the_old_dry_run_spelling_is_hidden_but_taken():
    for path in ("lane create", "lane destroy"):
        opts = options(LEAVES[path])
        assert "--dry-run" in opts and opts["--print"].hidden


def test_lane_has_one_wording_and_a_default_from_the_one_rule():
    allowed = {help_text(d) for d in Default}
    seen = {}
    for path, cmd in LEAVES.items():
        opt = options(cmd).get("--lane")
        if opt is not None:
            seen[path] = opt.help
    assert len(seen) > 20
    assert all(h in allowed for h in seen.values()), \
        {p: h for p, h in seen.items() if h not in allowed}


def test_repo_states_its_default():
    for path, cmd in LEAVES.items():
        opt = options(cmd).get("--repo")
        if opt is None or path == "ledger":     # ledger: another change rewrites its options
            continue
        assert opt.show_default or "default" in (opt.help or ""), path


def test_force_and_grace_only_where_a_replica_is_stopped_or_drained():
    force = {p for p, c in LEAVES.items() if "--force" in options(c)}
    grace = {p for p, c in LEAVES.items() if "--grace" in options(c)}
    assert force == {"rig drain", "rig stop", "rig restart"}
    assert grace == {"rig drain", "rig restart"}


# `nev lane run|on` are parsed by the gate's own parser (lanes/gateargs.py): what follows
# WORKTREE is COMMAND's, so -v goes before `run` (`nev lane -v run ...`). `nev job step`'s
# arguments are its own argparse's (jobs/lane_main.py).
NO_TRAILING_V = {"lane run", "lane on", "job step"}


def test_v_is_taken_after_the_group_too():
    for path, cmd in TREE:
        if path in NO_TRAILING_V:
            continue
        assert "-v" in options(cmd), path
    r = CliRunner().invoke(cli, ["lane", "-v", "list", "--help"])
    assert r.exit_code == 0


def test_v_after_the_group_turns_on_debug_logging(no_lanes, monkeypatch):
    import logging

    for k, v in no_lanes.items():
        monkeypatch.setenv(k, v)
    Path(no_lanes["NEV_LANES_FILE"]).write_text('{"lanes": []}')
    root = logging.getLogger()
    before = root.level
    try:
        root.setLevel(logging.WARNING)
        r = CliRunner().invoke(cli, ["lane", "list", "-v", "--json"])
        # no lane is listed: the empty list (the runner drops the command's returned 3)
        assert r.exception is None and r.output.strip() == "[]", r.output
        assert root.level == logging.DEBUG
    finally:
        root.setLevel(before)
