"""The small traps of a first hour, each fixed at its root: `nev` and `nev GROUP` print their
help; an option right after WORKTREE is refused with the fix; YAML errors have a line and a
column; the setting that chose a lane is the one named; a snapshot with no roles is refused
before its label is used up; a port held by another program is not called an up forward; shell
completion for bash, zsh and fish."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lanes.base.exitcodes import Exit
from tests.helpers.local_lane import make_repo

ROOT = Path(__file__).resolve().parent.parent


def nev(args: list[str], tmp: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "XDG_"))}
    full.update({"PYTHONPATH": str(ROOT), "HOME": str(tmp / "home"),
                 "NEV_STATE_DIR": str(tmp / "state")}, **env)
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=tmp, env=full,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, first", [([], "Usage: nev [OPTIONS] COMMAND"),
                                         (["lane"], "Usage: nev lane [OPTIONS] COMMAND"),
                                         (["rig", "forward"], "Usage: nev rig forward")])
def test_nev_and_a_group_alone_print_their_help(tmp_path, args, first):
    r = nev(args, tmp_path)
    assert r.returncode == 0 and r.stdout.startswith(first) and not r.stderr, r.stderr
    assert len(r.stdout.splitlines()) > 8 and "\nCommands:\n" in r.stdout


@pytest.mark.parametrize("words", [["--lane", "0", "true"], ["--lane=0", "true"],
                                   ["--pull", "out", "true"], ["--sandbox", "true"]])
def test_an_option_of_nevs_after_the_worktree_is_refused_with_the_fix(tmp_path, words):
    wt = make_repo(tmp_path / "engine")
    r = nev(["lane", "run", str(wt), *words], tmp_path, NEV_LANES_FILE=str(tmp_path / "none.json"))
    name = words[0].partition("=")[0]
    assert r.returncode == Exit.USAGE, r.stderr
    assert f"{name} comes after WORKTREE" in r.stderr and "before WORKTREE" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_yaml_error_has_its_line_and_column(tmp_path):
    bad = tmp_path / "job.yaml"
    bad.write_text("name: j\nbase: abc\nstages: [\n  - x: 1\n")
    r = nev(["job", "check", "preflight", str(bad)], tmp_path)
    assert r.returncode == Exit.FAILED and "line 4, column 3" in r.stderr and str(bad) in r.stderr


def test_the_setting_that_chose_a_lane_is_named_not_a_lane_option(tmp_path):
    lanes = tmp_path / "lanes.json"
    lanes.write_text(json.dumps({"lanes": [{"ssh": "lane@10.0.0.11"}, {"ssh": "lane@10.0.0.12"}]}))
    r = nev(["dagu", "status"], tmp_path, NEV_LANES_FILE=str(lanes), NEV_DAGU_LANE="7")
    assert r.returncode == Exit.FAILED and "NEV_DAGU_LANE=7" in r.stderr, r.stderr
    assert "--lane 7" not in r.stderr and "0..1" in r.stderr
    r = nev(["dagu", "status", "--lane", "7"], tmp_path, NEV_LANES_FILE=str(lanes))
    assert r.returncode == Exit.USAGE and "--lane 7" in r.stderr


def test_a_snapshot_with_no_roles_is_refused_and_the_label_stays_free(tmp_path):
    rig = tmp_path / "rig.json"
    rig.write_text(json.dumps({"roles": {}}))
    env = {"NEV_RIG_FILE": str(rig), "NEV_RIG_NOTES": str(tmp_path / "notes")}
    for args in (["rig", "snapshot", "first"], ["rig", "snapshot", "--dry-run", "first"]):
        r = nev(args, tmp_path, **env)
        assert r.returncode == Exit.FAILED and "no roles in" in r.stderr, r.stderr
    r = nev(["rig", "snapshots", "--json"], tmp_path, **env)
    assert r.returncode == 0 and json.loads(r.stdout) == []


def test_a_port_another_program_holds_is_not_an_up_forward(tmp_path):
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(4)
    port = squatter.getsockname()[1]
    rig = tmp_path / "rig.json"
    rig.write_text(json.dumps({"jump": "me@jump-host", "forwards": {
        "forge": {"local_port": port, "target": "10.0.0.5:80", "check": "tcp"}}}))
    try:
        r = nev(["rig", "forward", "status", "--json"], tmp_path, NEV_RIG_FILE=str(rig))
    finally:
        squatter.close()
    data = json.loads(r.stdout)
    assert r.returncode == Exit.FAILED and data["all_up"] is False
    assert "another program listens" in data["forwards"][0]["answer"]


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o"), ("zsh", "compdef"),
                                           ("fish", "complete --no-files --command nev")])
def test_completion_scripts_for_each_shell(tmp_path, shell, marker):
    r = nev(["completion", shell], tmp_path)
    assert r.returncode == 0 and "_NEV_COMPLETE" in r.stdout and marker in r.stdout, r.stdout
    if shell == "bash":
        words = subprocess.run(["bash", "-c", r.stdout + "\nCOMP_WORDS=(nev la); COMP_CWORD=1; "
                                "_nev_completion nev; printf '%s\\n' \"${COMPREPLY[@]}\""],
                               capture_output=True, text=True, timeout=60,
                               env={**os.environ, "PYTHONPATH": str(ROOT),
                                    "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
        assert {"land", "lane"} <= set(words.stdout.split()), words.stdout + words.stderr


def test_a_long_box_step_says_its_phases_as_it_goes():
    """`nev box up`'s step lines: a long step says each of its own phases as it enters it, a
    script's phase (read by a watch) as it appears, and when nothing is new for HEARTBEAT_S, a
    line that names the phase it is still in; nothing once the step is done."""
    import time

    from rig.box.progress import Progress

    lines: list[str] = []
    at: list[tuple[str, str] | None] = [None]
    p = Progress(lines.append, time.monotonic(), every=0.8, poll=0.02)
    with p.step("box b: the lanes' image and files"):
        p.phase("lane0: its files and keys")
        with p.watching(lambda: at[0]):
            time.sleep(0.3)
            at[0] = ("the image: debootstrap bookworm", "Retrieving libc6")
            time.sleep(0.3)
            at[0] = ("the image: apt-get install", "3 of 40 set up")   # said: a new phase
            time.sleep(0.3)
            at[0] = ("the image: apt-get install", "9 of 40 set up")   # the heartbeat's
            time.sleep(1.0)
    after = len(lines)
    time.sleep(0.2)
    assert len(lines) == after                     # none once the step is done
    said = [ln.split(" (")[0] for ln in lines]
    assert said[:3] == ["box b: the lanes' image and files: lane0: its files and keys",
                        "box b: the lanes' image and files: the image: debootstrap bookworm, "
                        "Retrieving libc6",
                        "box b: the lanes' image and files: the image: apt-get install, "
                        "3 of 40 set up"], lines
    assert said[3] == ("box b: the lanes' image and files: the image: apt-get install, "
                       "9 of 40 set up: still going"), lines
    assert all(re.search(r" \(\d+ s\)$", ln) for ln in lines), lines


def test_the_image_build_says_where_it_is_in_its_log():
    """The lanes' image script marks each phase in its log, in order; `image_progress` reads the
    phase and its detail back (debootstrap's last step, packages set up of those apt counted)."""
    from lanes import create_lxc

    script = create_lxc.image_script(create_lxc.ImageRecipe(), "/var/cache/x")
    marks = [ln.split(None, 1)[1] for ln in script.splitlines() if ln.startswith("phase ")]
    assert [m.split()[0] for m in marks] == ["debootstrap", "apt-get", "apt-get", "the"], marks
    assert script.index("phase apt-get install") < script.index("apt-get install -y")
    log = (f"{create_lxc.IMAGE_PHASE}debootstrap bookworm\nI: Retrieving InRelease\n"
           "I: Extracting libc6...\n")
    assert create_lxc.image_progress("") is None
    assert create_lxc.image_progress(log) == ("debootstrap bookworm", "Extracting libc6...")
    log += (f"{create_lxc.IMAGE_PHASE}apt-get install, 21 packages and what they need\n"
            "0 upgraded, 412 newly installed, 0 to remove and 0 not upgraded.\n"
            "Unpacking git (1:2.39)\nSetting up git (1:2.39)\nSetting up make (4.3)\n")
    assert create_lxc.image_progress(log) == ("apt-get install, 21 packages and what they need",
                                          "2 of 412 set up")


def test_what_a_box_up_changes_is_said_as_it_happens():
    from rig.box.progress import Said

    said: list[str] = []
    changed = Said(said.append, "  box b: ", ["earlier"])
    changed.append("started lane0.sshd")
    changed += ["config of forge.nginx changed", "user b-lane"]
    assert said == ["  box b: started lane0.sshd", "  box b: config of forge.nginx changed",
                    "  box b: user b-lane"]
    assert changed == ["earlier", "started lane0.sshd", "config of forge.nginx changed",
                       "user b-lane"]
