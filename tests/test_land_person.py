"""A person's landing, `nev land NAME SHA TIP --reviewed-by P` (`jobs/land.py`): a protected change
lands through the same gate, pins, compare-and-swap and tag as the tick, from a terminal only (a
real pseudo-terminal here); without one, under the tick (NEV_UNATTENDED) or in a job stage it is
refused, and without --reviewed-by the protected change is refused as before. Real git
repositories and the real CLI, as in tests/test_land_scenarios.py."""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.helpers.landkit")

from jobs import tick as tick_mod  # noqa: E402
from tests.helpers.job_helpers import Listener, lane_env, make_checkout, nev, write_manifest  # noqa: E402
from tests.helpers.landkit import Kit, Run, check_invariant, git  # noqa: E402

PROTECTED = {"bench/x.sh": "echo reviewed\n", "src/gen/f.floor.json": '{"cases_passed": 4}\n',
             "src/new.txt": "alpha work\n"}


def in_terminal(k: Kit, *args: str, timeout: float = 60, **env: str) -> Run:
    """`nev land ARGS` with stdin, stdout and stderr on a pseudo-terminal, as a person runs it."""
    master, slave = pty.openpty()
    p = subprocess.Popen(k.argv(*args), cwd=k.primary, stdin=slave, stdout=slave, stderr=slave,
                         env=k.env(**env), start_new_session=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if p.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:     # EIO: every process holding the terminal has ended
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
    text = out.decode(errors="replace").replace("\r\n", "\n")
    return Run(rc, text, "")


def _kit(tmp_path: Path) -> tuple[Kit, str, str]:
    k = Kit.create(tmp_path / "k")
    old = k.rev("main")
    k.track("alpha", PROTECTED)
    return k, old, k.rev("alpha")


def _args(k: Kit, *extra: str) -> tuple[str, ...]:
    return ("alpha", k.spec_sha("alpha"), k.rev("alpha"), *extra)


def test_a_person_lands_a_protected_change_from_a_terminal_and_the_tag_names_them(tmp_path: Path) -> None:
    k, old, tip = _kit(tmp_path)
    notes = tmp_path / "notes"
    sha = k.spec_sha("alpha")
    r = in_terminal(k, *_args(k, "--reviewed-by", "Ada Lovelace"), NEV_RIG_NOTES=str(notes))
    assert r.rc == 0, r.text
    assert "protected paths, landing on Ada Lovelace's review" in r.text
    # the same landing as the tick's: gated once, main moved to exactly the gated tip, tagged
    assert k.gates_started() == 1 and k.rev("main") in k.gated_passed()
    assert k.show("main", "bench/x.sh") == "echo reviewed\n"
    assert k.show("main", "src/gen/f.floor.json") == '{"cases_passed": 4}\n'
    tag = f"spec/alpha/{sha}"
    assert k.rev(f"refs/tags/{tag}") == k.rev("main")
    message = git(k.primary, "tag", "-l", "--format=%(contents)", tag)
    assert "reviewed by Ada Lovelace" in message and "Reviewed-by: Ada Lovelace" in message
    assert "reviewed by Ada Lovelace" in git(k.primary, "reflog", "-1", "--format=%gs", "main")
    log = (notes / "changelog.md").read_text()
    assert "land alpha\n" in log and "- reviewed by: Ada Lovelace" in log
    assert "bench/x.sh" in log and "f.floor.json" in log and "- result: landed" in log
    assert not (k.common() / "nev" / "land-pending" / "alpha.json").exists()
    check_invariant(k, old, "alpha", tip, landed=True)


def test_a_persons_landing_killed_after_main_moved_is_finished_in_their_name(tmp_path: Path) -> None:
    """The marker carries the reviewer: whoever finishes the owed after-steps (here a run with no
    terminal and no --reviewed-by, as the tick's would be) tags and logs it as the person's."""
    k, old, tip = _kit(tmp_path)
    notes = tmp_path / "notes"
    sha = k.spec_sha("alpha")
    r = in_terminal(k, *_args(k, "--reviewed-by", "Ada"), NEV_LAND_FAULT="after-ref-update",
                    NEV_RIG_NOTES=str(notes))
    assert r.rc == -9, r.text
    assert k.rev("main") in k.gated_passed() and k.rev(f"refs/tags/spec/alpha/{sha}") == ""
    rr = k.land("alpha", tip=tip, spec_sha=sha, NEV_RIG_NOTES=str(notes))
    assert rr.rc == 0 and "after-steps finished by this run" in rr.text, rr.text
    assert k.gates_started() == 1
    assert "reviewed by Ada" in git(k.primary, "tag", "-l", "--format=%(contents)", f"spec/alpha/{sha}")
    assert "- reviewed by: Ada" in (notes / "changelog.md").read_text()
    check_invariant(k, old, "alpha", tip, landed=True)


def test_without_reviewed_by_the_protected_change_is_still_refused(tmp_path: Path) -> None:
    k, old, tip = _kit(tmp_path)
    r = in_terminal(k, *_args(k))      # a person at a terminal, but no review named
    assert r.rc == 1
    assert "touches protected paths" in r.text and "bench/x.sh" in r.text
    assert k.gates_started() == 0
    check_invariant(k, old, "alpha", tip, landed=False)


def test_reviewed_by_without_a_terminal_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    k, old, tip = _kit(tmp_path)
    r = k.nev(*_args(k, "--reviewed-by", "Ada"), NEV_RIG_NOTES=str(tmp_path / "notes"))
    assert r.rc == 1
    lines = [ln for ln in r.err.splitlines() if ln.startswith("nev:")]
    assert len(lines) == 1 and "stdin and stdout are not a terminal" in lines[0], r.err
    assert k.gates_started() == 0 and not (tmp_path / "notes").exists()
    check_invariant(k, old, "alpha", tip, landed=False)


def test_reviewed_by_with_the_ticks_marker_is_refused_even_at_a_terminal(tmp_path: Path) -> None:
    k, old, tip = _kit(tmp_path)
    r = in_terminal(k, *_args(k, "--reviewed-by", "Ada"), NEV_UNATTENDED="1")
    assert r.rc == 1
    assert "NEV_UNATTENDED is set: the tick or a job stage runs this" in r.text, r.text
    assert k.gates_started() == 0
    check_invariant(k, old, "alpha", tip, landed=False)


def test_a_reviewers_name_must_be_one_printable_line(tmp_path: Path) -> None:
    k, old, tip = _kit(tmp_path)
    r = in_terminal(k, *_args(k, "--reviewed-by", "Ada\nLanded-by: nobody"))
    assert r.rc == 1 and "is not a person's name" in r.text
    assert k.gates_started() == 0
    check_invariant(k, old, "alpha", tip, landed=False)


def test_the_tick_runs_a_land_script_with_its_marker_so_a_persons_landing_is_refused(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    k, old, tip = _kit(tmp_path)
    argv = [sys.executable, "-m", "rig.cli", "land", *_args(k, "--reviewed-by", "Ada")]
    k.commit_main({"tracks.json": json.dumps(k.tracks(specWatch={
        "pollEnv": {}, "landScript": shlex.join(argv)}))}, "the land script is a person's landing")
    old = k.rev("main")
    rc = tick_mod.tick(k.primary, environ=k.env())
    err = capfd.readouterr().err
    assert rc == 1, err
    assert "NEV_UNATTENDED is set" in err and "specWatch.landScript exited 1" in err
    assert k.gates_started() == 0
    check_invariant(k, old, "alpha", tip, landed=False)


def test_a_job_stage_runs_with_the_marker_so_a_persons_landing_is_refused(tmp_path: Path) -> None:
    gateway = Listener()
    try:
        work = tmp_path / "work"
        base = make_checkout(work)
        land = shlex.join([sys.executable, "-m", "rig.cli", "land", "alpha", "1234567", "1234567",
                           "--reviewed-by", "Ada"])
        m = write_manifest(tmp_path / "job.yaml", base, [
            {"name": "sneak", "kind": "command",
             "command": f"PYTHONPATH={shlex.quote(str(Path(__file__).parents[1]))} {land} "
                        f"2> {tmp_path}/refusal.txt; echo $? > {tmp_path}/rc.txt"}], name="sneak")
        env = lane_env(tmp_path, gateway.port)
        r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(tmp_path / "st")], env)
        assert r.returncode == 0, r.stderr
    finally:
        gateway.close()
    assert (tmp_path / "rc.txt").read_text().strip() == "1"
    assert "NEV_UNATTENDED is set" in (tmp_path / "refusal.txt").read_text()
