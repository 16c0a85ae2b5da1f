"""The guarded landing: main only ever moves, by compare-and-swap, to a commit that passed
the whole gate (bors-ng's "not rocket science rule", marge-bot's pinned SHAs).

    pins match what was approved? -> scope and protected paths -> rebase onto main in a
    private worktree (main's handoff.md roster kept) -> scope again -> gate (verify +
    landChecks, `jobs.land_gate`) -> pins again -> land-pending marker ->
    update-ref main NEW OLD -> after-steps (`jobs.land_after`)

The track's branch is never rewritten: the rebase happens in a detached worktree under the
git directory, so a refusal, an interrupt or a SIGKILL at any point leaves the branch as it
was. A marker written before main moves lets a rerun finish what is owed after it.

A person's landing (`--reviewed-by NAME`, from a terminal, never from the tick or a job stage) is
the same landing but for one rule: the protected paths the diff touches land on that person's
review instead of being refused. The spec's touches still bound every other path, and the tag,
the reflog and the rig's change log name the person.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jobs import approvals as store
from jobs import protected, spec, tracks
from jobs.approvals import MAIN, LandPaths, Pending, reviewer_arg, sha_arg
from jobs.land_after import after_landing, finish_pending
from jobs.land_gate import fault, run_gate, stop_leftover_gate
from jobs.landlock import LandLock
from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.exitcodes import LAND_CONFLICT, Exit
from lanes.base.gitrun import GitError, Repo
from lanes.base.ui import info

MAX_REGATES = 3
NO_LANE = 3  # a gate command's exit when no build lane answered (lanes.base.errors.NoLaneError)


class NotLanded(NevError):
    exit_code = Exit.FAILED


class RebaseConflict(NevError):
    exit_code = LAND_CONFLICT   # a rebase conflict outside handoff.md (the reference rig's 2)


@dataclass
class Track:
    repo: Repo
    paths: LandPaths
    name: str
    spec_sha: str  # as given (may be abbreviated)
    tip: str  # as given (may be abbreviated)
    env: Mapping[str, str]  # the landing's environment: settings, and the gate's and install's processes
    reviewed_by: str | None = None  # a person's landing: protected paths land on their review
    ledgers: tuple[str, ...] = ()   # whose batches are behind it (its announcement)

    @property
    def branch(self) -> str:
        return f"refs/heads/{self.name}"


def land(repo_path: Path, name: str, spec_sha: str, tip: str, check: bool = False,
         environ: Mapping[str, str] | None = None, reviewed_by: str | None = None,
         ledgers: tuple[str, ...] = ()) -> int:
    """`nev land NAME SPEC_SHA TIP [--check] [--reviewed-by P]`: 0 landed (or --check passed), 1 not
    landed, 2 conflict. `ledgers`: whose batches are behind it, for its announcement (the tick
    landing a job: the job's; default: the track's own)."""
    spec.check_name(name)
    env = dict(os.environ if environ is None else environ)
    if reviewed_by is not None:
        reviewed_by = _person_present(name, reviewed_by, env)
    repo = Repo(repo_path)
    try:
        paths = LandPaths.of(repo)
    except GitError:
        raise NotLanded(f"{repo_path} is not a git repository; run nev land in the primary checkout") from None
    t = Track(repo, paths, name, _sha("spec sha", spec_sha), _sha("branch tip", tip), env,
              reviewed_by, ledgers or (name,))
    with LandLock(paths.lock, wait=settings.get_float(settings.LAND_LOCK_WAIT, env)):
        stop_leftover_gate(paths, name)
        if not check and finish_pending(repo, paths, name, env):
            return 0
        landed = _already_landed(t)
        if landed is not None:
            print(f"{name}: already landed ({landed})")
            return 0
        return _land_locked(t, check)


def _person_present(name: str, reviewer: str, env: Mapping[str, str]) -> str:
    """A person's landing runs only with a person present: refused (exit 1, nothing done) under
    the tick or a job stage (NEV_UNATTENDED), or when stdin or stdout is not a terminal."""
    try:
        who = reviewer_arg(reviewer)
    except NevError as e:
        raise NotLanded(f"{name}: not landed: {e.message}") from None
    why = None
    if settings.get_flag(settings.UNATTENDED, env):
        why = (f"{settings.UNATTENDED.name} is set: the tick or a job stage runs this, and no "
               "person is present")
    else:
        streams = (("stdin", sys.stdin), ("stdout", sys.stdout))
        bad = [n for n, f in streams if f is None or not f.isatty()]
        if bad:
            why = f"{' and '.join(bad)} {'is' if len(bad) == 1 else 'are'} not a terminal"
    if why:
        raise NotLanded(f"{name}: not landed: --reviewed-by is a person's landing, and {why}; "
                        "run it yourself from a terminal (nothing was done)")
    return who


def _sha(what: str, value: str) -> str:
    try:
        return sha_arg(what, value)
    except NevError as e:
        raise NotLanded(e.message) from None


def _already_landed(t: Track) -> str | None:
    if t.repo.try_rev(t.branch) is not None:
        return None
    for ref in t.repo.refs(f"refs/tags/spec/{t.name}/"):
        if ref.rsplit("/", 1)[-1].startswith(t.spec_sha):
            c = t.repo.try_rev(ref)
            if c and t.repo.is_ancestor(c, MAIN):
                return f"tag {ref.removeprefix('refs/tags/')} at {c[:12]} is on main"
    return None


def _land_locked(t: Track, check: bool) -> int:
    strict = settings.get_flag(settings.LANE_STRICT, t.env)
    moves = 0
    try:
        while True:
            old = t.repo.rev(MAIN)
            tr = tracks.at(t.repo, old)
            sp, tip = _pins(t, old)
            problems = protected.touches_problems(sp.touches, tr.protected)
            extra = tr.protected + _gate_files(t.repo, old, tr)
            if problems:
                raise NotLanded(f"{t.name}: not landed: spec {spec.spec_path(t.name)}: " + "; ".join(problems))
            fork = t.repo.merge_base(old, tip)
            _refuse_changes(t, protected.changes(t.repo, fork, tip), sp, extra, "of the track")
            info(f"land: {t.name}: pins match (tip {tip[:12]}, spec {sp.sha[:12]}); rebasing onto main {old[:12]}")
            fault("before-rebase")
            t.repo.discard_worktree(t.paths.worktree(t.name))
            wt = t.repo.add_detached_worktree(t.paths.worktree(t.name), tip)
            gated = _rebase(t, wt, old)
            diff = protected.changes(t.repo, old, gated)
            if not diff:
                raise NotLanded(f"{t.name}: not landed: nothing to land, main {old[:12]} already has the track's changes")
            reviewed = _refuse_changes(t, diff, sp, extra, "against main after the rebase")
            if reviewed:
                info(f"land: {t.name}: protected paths, landing on {t.reviewed_by}'s review: "
                     + "; ".join(v.line() for v in reviewed))
            _gate(t, wt, tr, strict)
            if check:
                _refuse_checkout_blocks(t, old, gated)
                print(f"{t.name}: check passed: would move main {old[:12]} -> {gated[:12]}; nothing changed")
                return 0
            now = t.repo.rev(MAIN)
            if now == old:
                _pins(t, now)
                _refuse_checkout_blocks(t, old, gated)
                marker = Pending(name=t.name, spec_sha=sp.sha, tip=tip, old=old, new=gated, time=time.time(),
                                 pid=os.getpid(), reviewed_by=t.reviewed_by, ledgers=t.ledgers)
                store.write_pending(t.paths, marker)
                fault("before-ref-update")
                why = f"nev land {t.name} (spec {sp.sha[:12]})" + (
                    f", reviewed by {t.reviewed_by}" if t.reviewed_by else "")
                if t.repo.compare_and_swap(MAIN, gated, old, why):
                    info(f"land: {t.name}: main {old[:12]} -> {gated[:12]} (fast-forward to the gated tip)")
                    fault("after-ref-update")
                    after_landing(t.repo, t.paths, marker, t.env)
                    print(f"{t.name}: landed: main {old[:12]} -> {gated[:12]}, tag spec/{t.name}/{sp.sha}"
                          + (f", reviewed by {t.reviewed_by}" if t.reviewed_by else ""))
                    return 0
                store.drop_pending(t.paths, t.name)
                now = t.repo.rev(MAIN)
            moves += 1
            if moves > MAX_REGATES:
                raise NotLanded(f"{t.name}: not landed: main moved {moves} times while the track was "
                                f"gated (limit {MAX_REGATES} re-gates); the next tick tries again")
            info(f"land: {t.name}: main moved during the gate ({old[:12]} -> {now[:12]}); "
                 f"rebasing and gating again ({moves}/{MAX_REGATES})")
    finally:
        t.repo.discard_worktree(t.paths.worktree(t.name))


def _pins(t: Track, main: str) -> tuple[spec.Spec, str]:
    """Refuse unless the branch tip and main's spec are exactly what was approved."""
    now = t.repo.try_rev(t.branch)
    if now is None:
        raise NotLanded(f"{t.name}: not landed: branch {t.name} does not exist")
    if not now.startswith(t.tip):
        raise NotLanded(f"{t.name}: not landed: tip moved since approval (branch {t.name} is at "
                        f"{now[:12]}, approved {t.tip[:12]}); approve it again")
    path = spec.spec_path(t.name)
    blob = t.repo.blob(main, path)
    if blob is None:
        raise NotLanded(f"{t.name}: not landed: {path} is not on main; a track lands only against its spec")
    if not blob.startswith(t.spec_sha):
        raise NotLanded(f"{t.name}: not landed: spec sha differs ({path} on main is {blob[:12]}, "
                        f"approved {t.spec_sha[:12]}); review the spec and approve again")
    return spec.parse(t.name, blob, t.repo.show(main, path) or ""), now


def _gate_files(repo: Repo, main: str, tr: tracks.Tracks) -> list[str]:
    files = repo.tree_files(main)
    return protected.gate_files([tr.verify, *tr.land_checks], lambda p: p in files)


def _refuse_changes(t: Track, diff: list[protected.Change], sp: spec.Spec, extra: list[str],
                    when: str) -> list[protected.Violation]:
    """Refuse protected paths (unless a person reviewed them: those are returned) and paths
    outside the spec's touches. A reviewed protected change is out of the scope check too: no
    spec may name a protected path."""
    name = t.name
    bad = protected.protected_violations(diff, extra)
    if bad and t.reviewed_by is None:
        raise NotLanded(f"{name}: not landed: the diff {when} touches protected paths: "
                        + "; ".join(v.line() for v in bad[:5]) + ("; ..." if len(bad) > 5 else "")
                        + " (a person lands such a track: nev land ... --reviewed-by NAME)")
    reviewed = {v.change for v in bad}
    out = protected.scope_violations([c for c in diff if c not in reviewed], sp.touches)
    if out:
        raise NotLanded(f"{name}: not landed: the diff {when} leaves the spec's touches: "
                        + "; ".join(v.line() for v in out[:5]) + ("; ..." if len(out) > 5 else ""))
    return bad


def _rebase(t: Track, wt: Repo, main: str) -> str:
    """Rebase the tip onto `main` in the private worktree; the rebased tip. A conflict only in
    handoff.md takes main's side; any other conflict aborts and refuses with exit 2 naming the
    files. Then main's roster is put back, without the landing track's line."""
    if not wt.is_ancestor(main, "HEAD"):
        cp = wt.rebase(main)
        while cp.returncode != 0:
            conflicted = wt.conflicted()
            if set(conflicted) != {protected.HANDOFF}:
                wt.rebase_abort()
                if not conflicted:
                    raise NotLanded(f"{t.name}: not landed: the rebase onto main stopped: "
                                    + ((cp.stderr or cp.stdout).strip().splitlines() or ["?"])[-1])
                raise RebaseConflict(f"{t.name}: not landed: rebase conflict outside handoff.md in "
                                     + ", ".join(sorted(conflicted)) + "; the track must rebase by hand")
            wt.keep_upstream(protected.HANDOFF)
            info(f"land: {t.name}: handoff.md conflict resolved with main's roster")
            cp = wt.rebase_continue()
    base = wt.show(main, protected.HANDOFF)
    want = None if base is None else protected.roster_without(base, t.name)
    if want != wt.show("HEAD", protected.HANDOFF):
        wt.commit_file(protected.HANDOFF, want, f"land {t.name}: keep main's handoff.md roster, {t.name} off it")
    return wt.rev("HEAD")


def _gate(t: Track, wt: Repo, tr: tracks.Tracks, strict: bool) -> None:
    # verify runs on a lane whatever the mode; only a landCheck falls back here when not strict
    checks = [("verify", tr.verify, True)] + [(f"landChecks[{i}]", c, strict) for i, c in enumerate(tr.land_checks)]
    for label, cmd, lane_only in checks:
        t0 = time.monotonic()
        info(f"land: {t.name}: gate: {label}: {cmd} ...")
        rc = run_gate(cmd, wt.path, lane_only, t.paths.gate(t.name), t.env)
        if rc != 0:
            why = ": no build lane answered; nothing of the gate ran here" if rc == NO_LANE else ""
            raise NotLanded(f"{t.name}: not landed: {label} failed on the tip (exit {rc}{why})")
        info(f"land: {t.name}: gate: {label} passed ({time.monotonic() - t0:.1f} s)")


def _refuse_checkout_blocks(t: Track, old: str, new: str) -> None:
    """Local changes in main's checkout to files the landing changes would block it: refuse first."""
    checkout = t.repo.checkout_of(MAIN, t.paths.base)
    if checkout is None:
        return
    changed = {p for c in protected.changes(t.repo, old, new) for p in c.paths()}
    blocks = sorted(changed & Repo(checkout).local_changes())
    if blocks:
        raise NotLanded(f"{t.name}: not landed: main's checkout {checkout} has local changes to "
                        f"files this landing changes ({', '.join(blocks[:5])}); commit or stash them")
