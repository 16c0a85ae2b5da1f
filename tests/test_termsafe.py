"""Terminal escapes never reach a terminal (lanes/base/termsafe.py): every control character in
what nev prints but did not write itself is written visibly, once, where it enters the printer.
Each command below prints data from a file, the share or another person with a planted clipboard
write (OSC 52), a window title (OSC 0), a colour (CSI), a DCS string and backspaces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lanes.base import termsafe

ROOT = Path(__file__).resolve().parents[1]
PLANT = "\x1b]52;c;ZXZpbA==\x07\x1b]0;pwned\x07\x1b[31mred\x1bP1$q\x1b\\\x08\x08\x9b2J"
UNSAFE = ("\x1b", "\x07", "\x08", "\x9b")


@pytest.mark.parametrize(
    "text, shown",
    [
        ("plain\ttext\n", "plain\ttext\n"),
        ("\x1b]52;c;ZXZpbA==\x07", "\\x1b]52;c;ZXZpbA==\\x07"),
        ("\x1b]0;title\x1b\\", "\\x1b]0;title\\x1b\\"),
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
        ("a\x08\x08b\rc\x7f", "a\\x08\\x08b\\x0dc\\x7f"),
        ("\x9b31m\x9d0;t\x9c", "\\x9b31m\\x9d0;t\\x9c"),
        ("name \udcff\udcfe", "name \\xff\\xfe"),
        ("\ud800", "\\ud800"),
        ("é ✓ 😀", "é ✓ 😀"),
    ],
)
def test_safe_writes_every_control_character_visibly(text, shown):
    assert termsafe.safe(text) == shown
    assert not any(c in termsafe.safe(text) for c in UNSAFE)


def test_safe_line_keeps_a_value_on_one_line():
    assert termsafe.safe_line("a\nb\tc\x1b") == "a\\nb\\tc\\x1b"


def _nev(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rig.cli", *args], capture_output=True, env=env, timeout=120
    )


def _assert_safe(r: subprocess.CompletedProcess, must_show: str) -> None:
    out = r.stdout.decode("utf-8", "replace") + r.stderr.decode("utf-8", "replace")
    assert must_show in out, out[-2000:]
    for c in UNSAFE:
        assert c not in out, (repr(c), out[-2000:])
    assert "\\x1b]52;c;ZXZp" in out, out[-2000:]  # shown, visibly


def test_commands_print_planted_escapes_visibly(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "NEV_STATE_DIR": str(tmp_path / "state"),
        "NEV_RIG_NOTES": str(tmp_path / "notes"),
        "NEV_LANE_SHARED": str(tmp_path / "share"),
        "NEV_ON_LANE": "1",
        "NEV_LANES_FILE": str(tmp_path / "none.json"),
    }
    # the change log, written by hand by someone (or another tool) with raw escapes in it
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "changelog.md").write_text(
        f"## 2026-12-05T10:00:00Z log worked\n- who: x@y\n- what: fixed {PLANT}\n"
    )
    _assert_safe(_nev(["rig", "log", "--show"], env), "fixed")
    # ... and a person's own entry through nev: the file keeps no escape either
    r = _nev(["rig", "log", "--worked", f"again {PLANT}"], env)
    assert r.returncode == 0, r.stderr
    kept = (tmp_path / "notes" / "changelog.md").read_text()
    assert "again \\x1b]52" in kept and kept.count("\x1b") == PLANT.count(
        "\x1b"
    )  # the first entry's only
    # a ledger line on the share, its worktree and fields planted
    from tests.test_ledger import GOOD

    (tmp_path / "share" / "ledger").mkdir(parents=True)
    line = {**GOOD, "batch": f"b{PLANT}", "function": f"f{PLANT}"}
    (tmp_path / "share" / "ledger" / "wt.jsonl").write_text(
        json.dumps(line, ensure_ascii=False) + "\n"
    )
    _assert_safe(_nev(["ledger", "--worktree", "wt"], env), "b\\x1b]52")
    # a ledger whose name (its worktree, a file on the share) is planted
    (tmp_path / "share" / "ledger" / f"w{PLANT}.jsonl").write_text(json.dumps(GOOD) + "\n")
    _assert_safe(_nev(["ledger", "--list"], env), "w\\x1b]52")
    # a job's record with a planted reason, as `nev job status` prints it
    from jobs import records
    from lanes.base import jsonfile

    recs = records.Records(
        jobs={
            "j1": records.JobRecord(
                job="j1", sends=1, why=f"refused {PLANT}", status=records.JobStatus.NOT_LANDED
            )
        }
    )
    p = records.path({"NEV_STATE_DIR": env["NEV_STATE_DIR"]})
    p.parent.mkdir(parents=True, exist_ok=True)
    jsonfile.write_atomic(p, recs.to_json())
    _assert_safe(_nev(["job", "status"], env), "j1")
    # --json: the encoder escapes them (\u001b), never raw
    r = _nev(["job", "status", "--json"], env)
    assert "\x1b" not in r.stdout.decode() and "\\u001b]52" in r.stdout.decode()


def test_an_argument_that_is_not_utf8_is_one_line_not_a_traceback(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "NEV_STATE_DIR": str(tmp_path / "state"),
        "NEV_RIG_NOTES": str(tmp_path / "notes"),
    }
    for args in (
        [b"rig", b"log", b"--worked", b"x\xff"],
        [b"rig", b"log", b"--worked", b"--role", b"\xfe", b"m"],
    ):
        r = subprocess.run(
            [sys.executable.encode(), b"-m", b"rig.cli", *args],
            capture_output=True,
            env=env,
            timeout=60,
        )
        assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    text = (tmp_path / "notes" / "changelog.md").read_text()
    assert "- what: x\\xff" in text and "- role: \\xfe" in text
    r = _nev(["rig", "log", "--show"], env)
    assert b"x\\xff" in r.stdout and b"Traceback" not in r.stderr


def test_lane_sweep_prints_a_planted_folder_name_of_a_lane_visibly(box, box_env, tmp_path):
    """A folder on the lane whose name carries the planted escapes (anyone with a gate can make
    one): `nev lane sweep --dry-run` names it, visibly, never raw."""
    from lanes.base.ssh import Connection
    from lanes.lanesfile import Lane

    lane = Lane(0, box.lanes[0].ssh, root="/srv/lane", shared="/srv/lane-shared", jump=box.jump)
    conn = Connection(lane.target, box.known_hosts, box.ssh_key, jump=lane.jump_target).connect()
    name = "stray" + PLANT.replace("\\\\", "")
    try:
        assert conn.run(["mkdir", "-p", f"/srv/lane/{name}"]).exit_status == 0
        argv = [sys.executable, "-m", "rig.cli", "lane", "sweep", "--lane", "0", "--dry-run"]
        r = subprocess.run(argv, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                           timeout=300)
        _assert_safe(r, "kept stray\\x1b]52")
    finally:
        conn.run(["rm", "-rf", f"/srv/lane/{name}"])
        conn.close()
