"""`nev land` scenarios in real temporary git repositories (Zuul-style: real repos, the
lander run as its own process, the invariant checked after every scenario)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.helpers.landkit")

from tests.helpers.landkit import Kit, check_invariant, finish, git, pid_dead, wait_for  # noqa: E402


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit.create(tmp_path)


def test_lands_happy_path_moves_main_to_the_gated_tip_and_cleans_up(kit: Kit) -> None:
    old = kit.rev("main")
    wt = kit.track("alpha", {"src/new.txt": "x\n", "handoff.md": "alpha's working note\n"})
    tip = kit.rev("alpha")
    r = kit.land("alpha")
    assert r.rc == 0, r.text
    assert "landed" in r.out
    main = kit.rev("main")
    assert main in kit.gated_passed()
    # the track commit, then the roster commit, right on the old main
    assert git(kit.primary, "rev-parse", "main~2") == old
    assert kit.show("main", "src/new.txt") == "x\n"
    # main's roster kept, the landed track off it; the track's note did not overwrite it
    roster = kit.show("main", "handoff.md") or ""
    assert "working note" not in roster and "- alpha" not in roster and "- beta: tables" in roster
    assert kit.rev(f"refs/tags/spec/alpha/{kit.spec_sha('alpha')}") == main
    assert kit.rev("refs/heads/alpha") == ""
    assert not wt.exists()
    assert kit.land_worktrees() == []
    assert git(kit.primary, "status", "--porcelain") == ""  # main's checkout follows main
    assert (kit.primary / "src/new.txt").read_text() == "x\n"
    assert not (kit.common() / "nev/land-pending/alpha.json").exists()
    assert "lane copies: skipped" in r.err and "floors: skipped" in r.err
    check_invariant(kit, old, "alpha", tip, landed=True)


def test_a_second_run_after_landing_says_already_landed(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip, sha = kit.rev("alpha"), kit.spec_sha("alpha")
    assert kit.land("alpha").rc == 0
    main = kit.rev("main")
    r = kit.land("alpha", tip=tip, spec_sha=sha)
    assert r.rc == 0 and "already landed" in r.out
    assert kit.rev("main") == main
    check_invariant(kit, old, "alpha", tip, landed=True)


def test_refuses_when_tip_moved_after_approval(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    approved = kit.rev("alpha")
    kit.track("alpha", {"src/more.txt": "more\n"})
    r = kit.land("alpha", tip=approved)
    assert r.rc == 1
    assert "tip moved since approval" in r.err and r.err.count("\n") >= 1
    assert kit.gates_started() == 0
    check_invariant(kit, old, "alpha", kit.rev("alpha"), landed=False)


def test_refuses_when_spec_sha_differs(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    r = kit.land("alpha", spec_sha="0123456789abcdef0123456789abcdef01234567")
    assert r.rc == 1 and "spec sha differs" in r.err
    r = kit.land("alpha", spec_sha="not-a-sha")
    assert r.rc == 1 and "not a commit sha" in r.err
    assert kit.gates_started() == 0
    check_invariant(kit, old, "alpha", kit.rev("alpha"), landed=False)


def test_refuses_when_spec_changed_on_main_after_approval(kit: Kit) -> None:
    kit.track("alpha")
    sha = kit.spec_sha("alpha")
    kit.spec("alpha", ["src/**", "lib/**"])
    git(kit.primary, "commit", "-qam", "spec edit")
    old = kit.rev("main")
    r = kit.land("alpha", spec_sha=sha)
    assert r.rc == 1 and "spec sha differs" in r.err
    check_invariant(kit, old, "alpha", kit.rev("alpha"), landed=False)


def test_refuses_touches_outside_scope_naming_the_path(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha", {"src/ok.txt": "ok\n", "lib/outside.rs": "no\n"})
    r = kit.land("alpha")
    assert r.rc == 1 and "leaves the spec's touches" in r.err and "lib/outside.rs" in r.err
    assert "src/ok.txt" not in r.err
    assert kit.gates_started() == 0
    check_invariant(kit, old, "alpha", kit.rev("alpha"), landed=False)


PROTECTED_EDITS = [
    ("bench/x.sh", "bench/"), ("BENCH/new.sh", "bench/"), ("Bench/Deep/y.sh", "bench/"),
    ("tracks.json", "tracks.json"), ("Tracks.JSON", "tracks.json"),
    (".github/workflows/ci.yml", ".github/"), (".GitHub/x.yml", ".github/"),
    ("specs/other.md", "specs/"), ("Specs/alpha.md", "specs/"),
    (".cargo/config.toml", ".cargo/"), ("src/deep/.cargo/config.toml", ".cargo/"), ("src/.CARGO/x", ".cargo/"),
    ("rust-toolchain.toml", "rust-toolchain"), ("src/Rust-Toolchain", "rust-toolchain"),
    (".env", ".env"), ("src/.env.local", ".env"), ("src/deep/.ENV", ".env"),
    (".gitattributes", ".gitattributes"), ("src/.GitAttributes", ".gitattributes"),
    (".gitmodules", ".gitmodules"), ("src/x/.GITMODULES", ".gitmodules"),
    ("src/gen/f.floor.json", "floor.json"), ("src/gen/G.FLOOR.JSON", "floor.json"),
    ("scripts/setup", "named by tracks.json"), ("SCRIPTS/Setup", "named by tracks.json"),
    (".ci/run", "named by tracks.json"),
]


@pytest.mark.parametrize(("path", "rule"), PROTECTED_EDITS)
def test_refuses_each_protected_path_by_case_and_depth(kit: Kit, path: str, rule: str) -> None:
    old = kit.rev("main")
    kit.track("alpha", {"src/ok.txt": "ok\n", path: "changed\n"})
    r = kit.land("alpha")
    assert r.rc == 1, r.text
    assert "protected" in r.err and rule in r.err.lower() and path in r.err
    assert kit.gates_started() == 0
    check_invariant(kit, old, "alpha", kit.rev("alpha"), landed=False)


@pytest.mark.parametrize(("src", "dst", "rule"), [
    ("src/a.txt", "bench/a.txt", "bench/"),                  # into a protected folder
    ("bench/x.sh", "src/x.sh", "bench/"),                    # out of a protected folder
    ("src/gen/f.floor.json", "src/gen/f.json", "floor.json"),  # a floor renamed away, at depth
    ("src/a.txt", "src/deep/.Env", ".env"),                  # into a protected name, by case
    ("scripts/setup", "src/setup", "named by tracks.json"),  # out of an extra protected path
])
def test_refuses_renames_into_and_out_of_protected_paths(kit: Kit, src: str, dst: str, rule: str) -> None:
    old = kit.rev("main")
    kit.track("alpha", {"src/ok.txt": "ok\n"}, renames={src: dst})
    r = kit.land("alpha")
    assert r.rc == 1, r.text
    assert "renamed to" in r.err and "protected" in r.err and rule in r.err.lower()
    check_invariant(kit, old, "alpha", kit.rev("alpha"), landed=False)


@pytest.mark.parametrize(("touches", "why"), [
    (["**"], "matches every path"), (["*"], "matches every path"), (["**/*"], "matches every path"),
    (["src/**", "bench/**"], "reaches protected bench/"), (["*.json"], "reaches protected"),
    (["src/**/*.floor.json"], "floor.json"), (["src/**", "Specs/*.md"], "reaches protected specs/"),
    ([], "touches is empty"),
])
def test_refuses_a_spec_whose_touches_match_everything_or_reach_protected(kit: Kit, touches: list[str], why: str) -> None:
    kit.spec("alpha", touches)
    git(kit.primary, "commit", "-qam", "spec")
    old = kit.rev("main")
    kit.track("alpha", {"src/ok.txt": "ok\n"})
    r = kit.land("alpha")
    assert r.rc == 1 and why in r.err, r.text
    check_invariant(kit, old, "alpha", kit.rev("alpha"), landed=False)


def test_conflict_only_in_handoff_is_resolved_with_mains_roster(kit: Kit) -> None:
    kit.track("alpha", {"src/new.txt": "x\n", "handoff.md": "alpha: my working note\n"})
    tip = kit.rev("alpha")
    roster = (kit.primary / "handoff.md").read_text().replace("- beta: tables", "- beta: tables, landed soon\n- delta: new")
    old = kit.commit_main({"handoff.md": roster}, "roster edit on main")
    r = kit.land("alpha")
    assert r.rc == 0, r.text
    assert "handoff.md conflict resolved" in r.err
    on_main = kit.show("main", "handoff.md") or ""
    assert "- delta: new" in on_main and "working note" not in on_main and "- alpha" not in on_main
    assert kit.show("main", "src/new.txt") == "x\n"
    check_invariant(kit, old, "alpha", tip, landed=True)


def test_conflict_outside_handoff_exits_2_naming_the_files(kit: Kit) -> None:
    kit.track("alpha", {"src/a.txt": "track side\n", "src/b.txt": "b\n", "handoff.md": "note\n"})
    tip = kit.rev("alpha")
    old = kit.commit_main({"src/a.txt": "main side\n", "handoff.md": "main roster\n"})
    r = kit.land("alpha")
    assert r.rc == 2, r.text
    assert "conflict outside handoff.md" in r.err and "src/a.txt" in r.err and "src/b.txt" not in r.err
    assert kit.land_worktrees() == []
    assert kit.gates_started() == 0
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_gate_failure_refuses_and_keeps_everything(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip = kit.rev("alpha")
    kit.gate(rc=1)
    r = kit.land("alpha")
    assert r.rc == 1 and "verify failed on the tip (exit 1)" in r.err
    assert kit.gates_started() == 1 and kit.gated_passed() == set()
    assert kit.land_worktrees() == []
    assert (kit.base / "wt-alpha").exists()
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_failing_land_check_refuses_after_verify_passed(tmp_path: Path) -> None:
    k = Kit.create(tmp_path)
    t = k.tracks()
    t["landChecks"] = ["true", "exit 5"]
    k.commit_main({"tracks.json": json.dumps(t)})
    old = k.rev("main")
    k.track("alpha")
    r = k.land("alpha")
    assert r.rc == 1 and "landChecks[1] failed on the tip (exit 5)" in r.err
    assert "landChecks[0] passed" in r.err
    check_invariant(k, old, "alpha", k.rev("alpha"), landed=False)


def test_no_lane_answering_with_strict_refuses_with_exit_3_and_runs_nothing(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip = kit.rev("alpha")
    r = kit.land("alpha", NEV_LANE_STRICT="1", NEV_ON_LANE="")
    assert r.rc == 1
    assert "verify failed on the tip (exit 3: no build lane answered" in r.err
    assert kit.gates_started() == 0  # nothing of the gate ran on this box
    # A lane configured but not answering is the same refusal.
    r = kit.land("alpha", NEV_LANE_STRICT="1", NEV_LANE_SSH="lane@127.0.0.1:1", NEV_ON_LANE="")
    assert r.rc == 1 and "exit 3: no build lane answered" in r.err
    assert kit.gates_started() == 0
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_no_lane_answering_without_strict_verify_refuses_with_exit_3_and_runs_nothing_here(kit: Kit) -> None:
    """verify is lane-only whatever NEV_LANE_STRICT says (the seed's "the track gate runs only on
    the build lane"): no lane configured, or one configured that does not answer, refuses."""
    old = kit.rev("main")
    kit.track("alpha")
    tip = kit.rev("alpha")
    for extra in ({}, {"NEV_LANE_SSH": "lane@127.0.0.1:1"}):
        r = kit.land("alpha", NEV_ON_LANE="", **extra)
        assert r.rc == 1, r.text
        assert "verify failed on the tip (exit 3: no build lane answered; nothing of the gate ran here)" in r.err
        assert kit.gates_started() == 0
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_only_a_land_check_may_fall_back_here_and_only_when_not_strict(tmp_path: Path, monkeypatch) -> None:
    from jobs.land_gate import where

    none = {"NEV_LANES_FILE": str(tmp_path / "no-lanes.json")}
    for k in [k for k in os.environ if k.startswith(("NEV_", "GENERA_"))]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("NEV_LANES_FILE", none["NEV_LANES_FILE"])
    assert where(lane_only=True, environ=none) == "lane"          # verify: refused with exit 3 by the lane path
    assert where(lane_only=False, environ=none) == "here"         # a landCheck, not strict, no lane configured
    monkeypatch.setenv("NEV_LANE_SSH", "l@h:1")
    assert where(lane_only=False, environ={**none, "NEV_LANE_SSH": "l@h:1"}) == "lane"  # falls back in `nev lane on`
    assert where(lane_only=True, environ={**none, "NEV_ON_LANE": "1"}) == "here"   # already on a lane


def test_a_gate_on_a_lane_carries_the_landings_settings_and_no_secret(tmp_path: Path, monkeypatch) -> None:
    """pollEnv's NEV_CORPUS_CASES reaches a verify run on a lane (as it reaches the after-landing
    raise); a credential in the landing's environment does not."""
    from jobs import land_gate
    from lanes import gate

    seen: dict = {}

    def fake_on(worktree, command, *, lane_only=False, extra_env=None, **_kw):
        seen.update(command=command, lane_only=lane_only, env=dict(extra_env or {}))
        return 0

    monkeypatch.setattr(gate, "on", fake_on)
    environ = {"NEV_LANE_SSH": "l@h:1", "NEV_CORPUS_CASES": "40", "NEV_FORGE_TOKEN": "tok-s3cr3t-value",
               "NEV_GATEWAY_KEY": "sk-abcdefgh12345678", "PATH": "/usr/bin"}
    rc = land_gate.run_gate("nev floors check", tmp_path, True, tmp_path / "gate.json", environ)
    assert rc == 0 and seen["command"] == ["nev", "sandbox", "exec", "--", "sh", "-c", "nev floors check"] and seen["lane_only"] is True
    assert seen["env"].get("NEV_CORPUS_CASES") == "40"
    assert "tok-s3cr3t-value" not in repr(seen["env"]) and "sk-abcdefgh12345678" not in repr(seen["env"])
    assert "PATH" not in seen["env"] and "NEV_LANE_SSH" not in seen["env"]


def test_approved_tick_applies_poll_env_so_no_lane_refuses(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip = kit.rev("alpha")
    assert kit.nev("approve", "alpha").rc == 0
    r = kit.nev("--approved", NEV_ON_LANE="")
    assert r.rc == 1 and "NEV_LANE_STRICT=1" in r.err and "exit 3: no build lane answered" in r.err
    assert kit.gates_started() == 0
    assert (kit.common() / "nev/approvals/alpha.json").exists()  # still approved for the next tick
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_approved_tick_hands_poll_env_to_the_gate(tmp_path: Path) -> None:
    k = Kit.create(tmp_path)
    t = k.tracks()
    t["landChecks"] = ['test "$NEV_LANE_STRICT" = 1']  # passes only with pollEnv in the gate's environment
    k.commit_main({"tracks.json": json.dumps(t)})
    old = k.rev("main")
    k.track("alpha")
    tip = k.rev("alpha")
    assert k.nev("approve", "alpha").rc == 0
    r = k.nev("--approved")
    assert r.rc == 0, r.text
    assert "land: track alpha: landed" in r.err and "landChecks[0] passed" in r.err
    check_invariant(k, old, "alpha", tip, landed=True)


def test_main_moving_during_the_gate_is_regated_and_lands(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip = kit.rev("alpha")
    kit.gate(move_main=1)
    r = kit.land("alpha")
    assert r.rc == 0, r.text
    assert "main moved during the gate" in r.err and "(1/3)" in r.err
    assert kit.gates_started() == 2
    moved = kit.moved()
    assert len(moved) == 1 and git(kit.primary, "rev-parse", "main~2") in moved
    assert kit.rev("main") in kit.gated_passed()
    assert kit.show("main", "moved.txt") == "move 1\n"
    check_invariant(kit, old, "alpha", tip, landed=True)


def test_main_moving_four_times_during_the_gate_refuses(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip = kit.rev("alpha")
    kit.gate(move_main=4)
    r = kit.land("alpha")
    assert r.rc == 1 and "main moved 4 times" in r.err
    assert kit.gates_started() == 4
    assert kit.rev("main") in kit.moved()
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_check_never_changes_a_ref(kit: Kit) -> None:
    kit.track("alpha")
    kit.gate(move_main=0)
    old, tip = kit.rev("main"), kit.rev("alpha")
    refs = kit.refs()
    reflog = git(kit.primary, "reflog", "show", "--all")
    r = kit.land("alpha", "--check")
    assert r.rc == 0 and "check passed" in r.out and "nothing changed" in r.out
    assert kit.gates_started() == 1
    assert kit.refs() == refs and git(kit.primary, "reflog", "show", "--all") == reflog
    assert kit.land_worktrees() == []
    kit.gate(rc=1)
    r = kit.land("alpha", "--check")
    assert r.rc == 1 and kit.refs() == refs
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_concurrent_landings_on_one_repository_wait_and_both_land(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    kit.track("beta", {"lib/b.rs": "b\n"})
    ta, tb = kit.rev("alpha"), kit.rev("beta")
    kit.gate(sleep=1)
    pa = kit.start("alpha", kit.spec_sha("alpha"), ta)
    wait_for(lambda: kit.gates_started() >= 1, what="first gate")
    pb = kit.start("beta", kit.spec_sha("beta"), tb)
    ra, rb = finish(pa), finish(pb)
    assert ra.rc == 0 and rb.rc == 0, ra.text + rb.text
    assert "waiting for the land lock" in rb.err and f"PID {pa.pid}" in rb.err
    log = [ln.split()[1] for ln in kit.gate_log() if ln.split()[1] in ("start", "end")]
    assert log == ["start", "end", "start", "end"]  # never two gates at once
    assert kit.show("main", "src/new.txt") and kit.show("main", "lib/b.rs") == "b\n"
    # each track: its commit and the roster commit; no merge commit
    assert git(kit.primary, "rev-list", "--count", f"{old}..main") == "4"
    check_invariant(kit, old, "alpha", ta, landed=True)
    check_invariant(kit, old, "beta", tb, landed=True)


def test_sigterm_during_the_gate_kills_the_gate_tree_and_keeps_the_branch(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip = kit.rev("alpha")
    kit.gate(sleep=30)
    p = kit.start("alpha", kit.spec_sha("alpha"), tip)
    wait_for(lambda: (kit.ctl / "gate.pid").exists(), what="gate start")
    gate_pid = kit.gate_host_pid()
    time.sleep(0.2)
    wait_for(lambda: (kit.ctl / "child.pid").exists(), what="the gate's child")
    child_pid = kit.gate_child_host_pid()
    p.send_signal(signal.SIGTERM)
    r = finish(p)
    assert r.rc == 143
    wait_for(lambda: pid_dead(gate_pid), 10, "gate to be killed")
    wait_for(lambda: pid_dead(child_pid), 10, "the gate's child to be killed")  # the whole tree
    assert kit.land_worktrees() == []
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_sigint_during_the_gate_exits_130(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip = kit.rev("alpha")
    kit.gate(sleep=30)
    p = kit.start("alpha", kit.spec_sha("alpha"), tip)
    wait_for(lambda: (kit.ctl / "gate.pid").exists(), what="gate start")
    gate_pid = kit.gate_host_pid()
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    r = finish(p)
    assert r.rc == 130
    wait_for(lambda: pid_dead(gate_pid), 10, "gate to be killed")
    check_invariant(kit, old, "alpha", tip, landed=False)


@pytest.mark.parametrize("phase", ["before-rebase", "gate", "before-ref-update", "after-ref-update", "cleanup"])
def test_sigkill_at_each_phase_then_a_rerun_finishes_the_landing(kit: Kit, phase: str) -> None:
    old = kit.rev("main")
    wt = kit.track("alpha")
    tip, sha = kit.rev("alpha"), kit.spec_sha("alpha")
    if phase == "gate":
        kit.gate(sleep=30)
    r = kit.land("alpha", NEV_LAND_FAULT=phase)
    assert r.rc == -signal.SIGKILL, r.text
    assert f"NEV_LAND_FAULT={phase}" in r.err
    moved = phase in ("after-ref-update", "cleanup")
    # Right after the kill: main is the old value or exactly the gated tip.
    assert kit.rev("main") == (next(iter(kit.gated_passed())) if moved else old)
    assert kit.rev("refs/heads/alpha") == tip  # the branch is deleted last, after the tag
    pending = (kit.common() / "nev/land-pending/alpha.json").exists()
    assert pending == (phase in ("before-ref-update", "after-ref-update", "cleanup"))
    if phase == "gate":
        # the gate runs in the sandbox, which dies with the lander that started it: nothing of the
        # gate's tree outlives a SIGKILLed lander (before the sandbox it ran on, and the rerun
        # stopped it)
        wait_for(lambda: (kit.ctl / "gate.pid").exists(), what="the gate's start")
        wait_for(lambda: not kit.gate_processes(), 10, "the gate's tree to die with its lander")
        kit.gate(sleep=0)
    rr = kit.land("alpha", tip=tip, spec_sha=sha)
    assert rr.rc == 0, rr.text
    assert "took over a stale land lock from dead PID" in rr.err
    if phase == "gate":
        assert not kit.gate_processes()
    if moved:
        assert "finishing what it owed" in rr.err
        assert kit.gates_started() == 1  # the rerun did not gate again
    main = kit.rev("main")
    assert main in kit.gated_passed()
    assert kit.rev(f"refs/tags/spec/alpha/{sha}") == main
    assert git(kit.primary, "tag", "--list", "spec/alpha/*") == f"spec/alpha/{sha}"
    assert kit.rev("refs/heads/alpha") == "" and not wt.exists()
    assert not (kit.common() / "nev/land-pending/alpha.json").exists()
    assert kit.land_worktrees() == []
    assert git(kit.primary, "status", "--porcelain") == ""
    check_invariant(kit, old, "alpha", tip, landed=True)


def test_approve_pins_under_the_git_dir_and_the_tick_lands_then_forgets_it(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip = kit.rev("alpha")
    r = kit.nev("approve", "alpha")
    assert r.rc == 0 and "approved alpha" in r.out
    stored = json.loads((kit.common() / "nev/approvals/alpha.json").read_text())
    assert stored["tip"] == tip and stored["spec_sha"] == kit.spec_sha("alpha")
    assert git(kit.primary, "status", "--porcelain") == ""  # nothing in the tree
    assert kit.refs() == git(kit.primary, "for-each-ref", "--format=%(refname) %(objectname)")
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_tick_lands_every_approved_track_and_skips_a_moved_tip(tmp_path: Path) -> None:
    k = Kit.create(tmp_path, tracks=None)
    t = k.tracks()
    t["specWatch"]["pollEnv"] = {"NEV_LAND_EXAMPLE": "1"}
    k.commit_main({"tracks.json": json.dumps(t)})
    old = k.rev("main")
    k.track("alpha")
    alpha_tip = k.rev("alpha")
    k.track("beta", {"lib/b.rs": "b\n"})
    assert k.nev("approve", "alpha").rc == 0 and k.nev("approve", "beta").rc == 0
    beta_approved = k.rev("beta")
    k.track("beta", {"lib/c.rs": "c\n"})
    r = k.nev("--approved")
    assert r.rc == 0, r.text
    assert "land: track beta: skipped: tip moved since approval" in r.err
    assert "tick: 1 landed, 1 skipped, 0 refused" in r.err
    assert "alpha: landed" in r.out
    assert not (k.common() / "nev/approvals/alpha.json").exists()
    assert (k.common() / "nev/approvals/beta.json").exists()
    assert k.rev("beta") != beta_approved and k.rev("refs/heads/beta")
    check_invariant(k, old, "alpha", alpha_tip, landed=True)


@pytest.mark.parametrize("field,spoil,problem", [
    ("new", lambda m: m.pop("new"), "is missing"),
    ("old", lambda m: m.update(old=42), "must be a string, not a number"),
    ("tip", lambda m: m.update(tip=m["tip"][:12]), "must be a full object id (40 hex digits)"),
])
def test_a_corrupt_pending_marker_is_one_line_naming_file_and_field_and_is_left_as_it_was(
        kit: Kit, field: str, spoil, problem: str) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip, sha = kit.rev("alpha"), kit.spec_sha("alpha")
    marker = kit.common() / "nev/land-pending/alpha.json"
    data = {"name": "alpha", "spec_sha": sha, "tip": tip, "old": old, "new": tip, "time": 1.0, "pid": 1}
    spoil(data)
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps(data))
    before = marker.read_bytes()
    r = kit.land("alpha")
    assert r.rc == 1, r.text
    [line] = r.err.splitlines()
    assert line.startswith(f"nev: {marker}: field {field} {problem}") and line.endswith("; fix the file")
    assert marker.read_bytes() == before
    assert kit.gates_started() == 0
    # The tick says the same on one line, lands nothing else of this track, and leaves the file too.
    assert kit.nev("approve", "alpha").rc == 0
    r = kit.nev("--approved")
    assert r.rc == 1
    [tick_line] = [ln for ln in r.err.splitlines() if str(marker) in ln]
    assert tick_line == "nev land alpha: " + line.removeprefix("nev: ")
    assert marker.read_bytes() == before
    assert kit.gates_started() == 0
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_approve_refuses_a_tip_other_than_the_reviewed_one(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    r = kit.nev("approve", "alpha", "--tip", "0123456789abcdef")
    assert r.rc == 1 and "not the reviewed" in r.err
    assert not (kit.common() / "nev/approvals/alpha.json").exists()
    check_invariant(kit, old, "alpha", kit.rev("alpha"), landed=False)


def test_local_changes_in_mains_checkout_to_landed_files_refuse_before_main_moves(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha", {"src/a.txt": "track\n"})
    tip = kit.rev("alpha")
    (kit.primary / "src/a.txt").write_text("uncommitted edit\n")
    r = kit.land("alpha", "--check")
    assert r.rc == 1 and "local changes" in r.err and "src/a.txt" in r.err
    r = kit.land("alpha")
    assert r.rc == 1 and "local changes" in r.err and "src/a.txt" in r.err
    assert (kit.primary / "src/a.txt").read_text() == "uncommitted edit\n"  # nothing lost
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_unrelated_local_changes_in_mains_checkout_survive_a_landing(kit: Kit) -> None:
    old = kit.rev("main")
    kit.track("alpha")
    tip = kit.rev("alpha")
    (kit.primary / "README.md").write_text("my local edit\n")
    r = kit.land("alpha")
    assert r.rc == 0, r.text
    assert (kit.primary / "README.md").read_text() == "my local edit\n"
    assert (kit.primary / "src/new.txt").exists()
    check_invariant(kit, old, "alpha", tip, landed=True)


def test_dirty_track_worktree_is_kept_with_its_branch(kit: Kit) -> None:
    old = kit.rev("main")
    wt = kit.track("alpha")
    tip = kit.rev("alpha")
    (wt / "src/scratch.txt").write_text("unsaved\n")
    r = kit.land("alpha")
    assert r.rc == 0, r.text
    assert "uncommitted changes (nothing lost)" in r.err
    assert (wt / "src/scratch.txt").read_text() == "unsaved\n"
    assert kit.rev("refs/heads/alpha") == tip
    main = kit.rev("main")
    assert main in kit.gated_passed() and main != old
    check_invariant(kit, old, "alpha", tip, landed=True)


def test_install_runs_staged_only_when_a_crate_is_added(tmp_path: Path) -> None:
    k = Kit.create(tmp_path)
    t = k.tracks()
    t["install"] = {"command": 'echo built > "$NEV_INSTALL_STAGE/done"', "target": "oracle/node_modules"}
    k.commit_main({"tracks.json": json.dumps(t)})
    k.track("alpha", {"src/plain.txt": "p\n"})
    assert k.land("alpha").rc == 0
    assert not (k.primary / "oracle/node_modules").exists()
    old, beta = k.rev("main"), k.track("beta", {"lib/newcrate/Cargo.toml": "[package]\nname='n'\n"})
    tip = k.rev("beta")
    r = k.land("beta")
    assert r.rc == 0 and "installed oracle/node_modules (crate added (lib/newcrate/Cargo.toml))" in r.err
    assert (k.primary / "oracle/node_modules/done").read_text() == "built\n"
    assert not list((k.primary / "oracle").glob(".node_modules.nev-*"))  # no stage left behind
    assert beta.name == "wt-beta"
    check_invariant(k, old, "beta", tip, landed=True)


def test_failed_install_is_one_line_and_keeps_the_previous_install(tmp_path: Path) -> None:
    k = Kit.create(tmp_path)
    t = k.tracks()
    t["install"] = {"command": "exit 4", "target": "oracle/node_modules"}
    k.commit_main({"tracks.json": json.dumps(t)})
    (k.primary / "oracle/node_modules").mkdir(parents=True)
    (k.primary / "oracle/node_modules/old").write_text("old\n")
    old = k.rev("main")
    k.spec("alpha", ["src/**", "oracle/package.json"])
    k.commit_main({"specs/alpha.md": (k.primary / "specs/alpha.md").read_text()}, "spec")
    k.track("alpha", {"oracle/package.json": "{}\n"})
    tip = k.rev("alpha")
    r = k.land("alpha")
    assert r.rc == 0, r.text
    assert "install: failed (exit 4) for oracle/package.json changed" in r.err
    assert (k.primary / "oracle/node_modules/old").read_text() == "old\n"
    check_invariant(k, old, "alpha", tip, landed=True)


def test_bad_tracks_json_on_main_refuses_with_the_field_named(tmp_path: Path) -> None:
    k = Kit.create(tmp_path)
    k.commit_main({"tracks.json": json.dumps({"verify": "", "landChecks": []})})
    old = k.rev("main")
    k.track("alpha")
    r = k.land("alpha")
    assert r.rc == 1 and "main:tracks.json" in r.err and "verify" in r.err
    assert len(r.err.strip().splitlines()) == 1
    check_invariant(k, old, "alpha", k.rev("alpha"), landed=False)


def test_usage_errors_exit_1_not_landed_never_2_which_is_a_conflict(kit: Kit) -> None:
    """`nev land` keeps the reference rig's 0/1/2 (2 = rebase conflict): its usage errors are one
    line and exit 1, "not landed", so the tick never takes a typo for a conflict."""
    old = kit.rev("main")
    kit.track("alpha")
    for args in (("alpha",), ("approve",), ("--approved", "alpha")):
        r = kit.nev(*args)
        assert r.rc == 1 and r.err.startswith("nev: ") and r.err.count("\n") == 1, (args, r)
    r = kit.nev("../x", "abcdef1", "abcdef1")
    assert r.rc == 1 and "not valid" in r.err
    check_invariant(kit, old, "alpha", kit.rev("alpha"), landed=False)


def test_the_tracks_branch_is_never_rewritten_by_a_landing_attempt(kit: Kit) -> None:
    kit.track("alpha", {"src/new.txt": "x\n"})
    old = kit.commit_main({"README.md": "moved on\n"})
    tip = kit.rev("alpha")
    kit.gate(rc=1)
    assert kit.land("alpha").rc == 1
    assert kit.rev("alpha") == tip
    assert git(kit.base / "wt-alpha", "rev-parse", "HEAD") == tip
    assert git(kit.base / "wt-alpha", "status", "--porcelain") == ""
    check_invariant(kit, old, "alpha", tip, landed=False)


def test_the_projects_own_tracks_json_gates_this_repository() -> None:
    from jobs import tracks

    root = Path(__file__).resolve().parent.parent
    t = tracks.load(root / "tracks.json")
    assert t.verify == "make test"
    assert t.spec_watch.poll_env.get("NEV_LANE_STRICT") == "1"
    assert t.spec_watch.land_script == "nev land --approved"
    assert os.path.exists(root / "Makefile")


def test_a_file_the_gate_command_runs_is_protected_even_inside_touches(tmp_path: Path) -> None:
    k = Kit.create(tmp_path)
    k.write("src/check.sh", "exit 0\n")
    t = k.tracks()
    t["landChecks"] = ["sh src/check.sh"]
    k.commit_main({"src/check.sh": "exit 0\n", "tracks.json": json.dumps(t)})
    old = k.rev("main")
    k.track("alpha", {"src/ok.txt": "ok\n", "src/check.sh": "exit 0 # weakened\n"})
    r = k.land("alpha")
    assert r.rc == 1 and "src/check.sh" in r.err and "gate command's file" in r.err
    assert k.gates_started() == 0
    check_invariant(k, old, "alpha", k.rev("alpha"), landed=False)


def test_floors_after_landing_without_a_lane_is_one_line_and_the_landing_stands(tmp_path: Path) -> None:
    k = Kit.create(tmp_path)
    gen = "engine/crates/layout/src/generated"
    prov = {"format": 1, "function": "block_width", "verification": {"corpus": "block_width", "cases_passed": 1}}
    old = k.commit_main({f"{gen}/block_width.rs": "pub fn block_width() {}\n",
                         f"{gen}/block_width.provenance.json": json.dumps(prov)}, "a generated function")
    k.track("alpha")
    tip = k.rev("alpha")
    r = k.land("alpha", NEV_ENGINE_DIR="engine")
    assert r.rc == 0, r.text
    floors = [ln for ln in r.err.splitlines() if "after: floors" in ln]
    assert len(floors) == 1 and "failed" in floors[0] and "build lane" in floors[0] and "nothing undone" in floors[0]
    assert k.rev(f"refs/tags/spec/alpha/{k.spec_sha('alpha')}") == k.rev("main")
    assert not (k.primary / gen / "block_width.floor.json").exists()  # nothing written
    check_invariant(k, old, "alpha", tip, landed=True)
