"""The guarded landing: main only ever moves, by compare-and-swap, to a commit that passed
the whole gate (bors-ng's "not rocket science rule", marge-bot's pinned SHAs).

    pins match what was approved? -> scope and protected paths -> rebase onto main in a
    private worktree (main's handoff.md roster kept) -> scope again -> gate (verify +
    landChecks through the lane path) -> pins again -> land-pending marker ->
    update-ref main NEW OLD -> tag, cleanup, sweep, install, floors

The track's branch is never rewritten: the rebase happens in a detached worktree under the
git directory, so a refusal, an interrupt or a SIGKILL at any point leaves the branch as it
was. A marker written before main moves lets a rerun finish what is owed after it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs import approvals as store
from jobs import protected, spec, tracks
from jobs.approvals import LandPaths
from jobs.landlock import LandLock, pid_alive
from lanes import settings
from lanes.errors import NevError, NotBuiltError
from lanes.gitrun import GitError, Repo
from lanes.ui import info

MAIN = "refs/heads/main"
MAX_REGATES = 3
FAULT_PHASES = ("before-rebase", "gate", "before-ref-update", "after-ref-update", "cleanup")
# Configuration that must not change what a rebase or commit does on this box.
_GIT_CFG = ("-c", "core.editor=true", "-c", "commit.gpgSign=false", "-c", "rebase.autoSquash=false",
            "-c", "rebase.autoStash=false", "-c", "rebase.updateRefs=false", "-c", "core.hooksPath=/dev/null")


class NotLanded(NevError):
    exit_code = 1


class RebaseConflict(NevError):
    exit_code = 2


def fault(phase: str) -> None:
    """Test-only fault injection: with NEV_LAND_FAULT=<phase> the lander SIGKILLs itself here."""
    if settings.get(settings.LAND_FAULT) == phase:
        info(f"land: NEV_LAND_FAULT={phase}: killing this lander with SIGKILL (test only)")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------- the gate


def _lanes_gate() -> Any | None:
    try:
        mod = importlib.import_module("lanes.gate")
    except ImportError:
        return None
    return mod if callable(getattr(mod, "on", None)) else None


def _lane_answers() -> bool:
    from lanes import config

    lf = config.configured(require=False)
    return any(lane.answers() for lane in lf.lanes)


def _proc_start(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return None


def _kill_group(pgid: int, grace: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not _group_alive(pgid):
                return
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """A live (non-zombie) process is in group `pgid` (zombies wait for a reaper, not for us)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        if len(rest) > 2 and rest[2] == str(pgid) and rest[0] != "Z":
            return True
    return False


def _fault_timer(phase: str, delay: float = 0.3) -> threading.Timer | None:
    if settings.get(settings.LAND_FAULT) != phase:
        return None
    t = threading.Timer(delay, fault, args=(phase,))
    t.daemon = True
    t.start()
    return t


def _lanes_configured() -> bool:
    # Cheap first: with no NEV_LANE_SSH and no lanes file, skip loading the SSH stack at all.
    lanes_file = settings.get_path(settings.LANES_FILE)
    if not settings.get(settings.LANE_SSH) and (lanes_file is None or not lanes_file.exists()):
        return False
    from lanes import config

    return bool(config.configured(require=False).lanes)


def run_gate(cmd: str, worktree: Path, strict: bool, record: Path | None = None) -> int:
    """Run one gate command on the tip checked out in `worktree`, through the lane path.

    `nev lane on` semantics: with NEV_ON_LANE set, in place; strict (NEV_LANE_STRICT=1) is
    lane-only, and no lane answering is exit 3 with nothing run here; not strict, no lane
    answering runs it here. When lanes are configured (or strict) and `lanes.gate` is in this
    build, it goes through `lanes.gate.on`. Otherwise it runs here in its own process group,
    recorded in `record` so a rerun after a SIGKILL stops it, and killed as a whole tree on
    SIGINT/SIGTERM."""
    on_lane = bool(settings.get(settings.ON_LANE))
    # The lane path (and its SSH stack) is loaded only when a lane could be used.
    gate = _lanes_gate() if not on_lane and (strict or _lanes_configured()) else None
    if gate is not None:
        timer = _fault_timer("gate")
        try:
            return int(gate.on(worktree, ["sh", "-c", cmd], lane_only=strict))
        except NevError as e:
            if e.exit_code in (130, 143):
                raise
            info(f"land: gate: {e.message}")
            return e.exit_code
        finally:
            if timer is not None:
                timer.cancel()
    if strict and not on_lane and not _lane_answers():
        info("land: gate: no build lane answered (NEV_LANE_STRICT=1); nothing ran on this box")
        return 3
    env = {k: v for k, v in os.environ.items() if k != settings.LAND_FAULT.name}
    proc = subprocess.Popen(["sh", "-c", cmd], cwd=worktree, env=env, stdin=subprocess.DEVNULL,
                            stdout=sys.stderr.fileno(), start_new_session=True)
    try:
        if record is not None:
            store.jsonfile.write_atomic(record, {"pgid": proc.pid, "start": _proc_start(proc.pid),
                                                 "lander": os.getpid(), "cmd": cmd})
        timer = _fault_timer("gate")
        rc = proc.wait()
        if timer is not None:
            timer.cancel()
        return rc
    except BaseException:
        _kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        # Anything the command left behind in its group goes too.
        if proc.returncode is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if record is not None:
            record.unlink(missing_ok=True)


def stop_leftover_gate(paths: LandPaths, name: str) -> None:
    """A lander killed during its gate leaves the gate running; the next run stops it."""
    rec = paths.gate(name)
    if not rec.exists():
        return
    try:
        data = store.jsonfile.load(rec, "gate record")
        pgid, start = int(data["pgid"]), data.get("start")
    except (NevError, KeyError, TypeError, ValueError):
        rec.unlink(missing_ok=True)
        return
    if pid_alive(pgid) and (start is None or _proc_start(pgid) == start):
        _kill_group(pgid)
        info(f"land: stopped a gate left running by an interrupted landing of {name} (process group {pgid})")
    rec.unlink(missing_ok=True)


# ---------------------------------------------------------------- git helpers


@dataclass(frozen=True)
class Worktree:
    path: Path
    head: str | None
    branch: str | None


def worktrees(repo: Repo) -> list[Worktree]:
    out: list[Worktree] = []
    cur: dict[str, str] = {}
    for line in repo.git("worktree", "list", "--porcelain").stdout.splitlines() + [""]:
        if not line:
            if "worktree" in cur and "bare" not in cur:
                out.append(Worktree(Path(cur["worktree"]), cur.get("HEAD"), cur.get("branch")))
            cur = {}
            continue
        k, _, v = line.partition(" ")
        cur[k] = v
    return out


def main_checkout(repo: Repo, paths: LandPaths) -> Path | None:
    for w in worktrees(repo):
        if w.branch == MAIN and paths.base not in w.path.parents:
            return w.path
    return None


def changes_between(repo: Repo, a: str, b: str) -> list[protected.Change]:
    raw = repo.git("diff", "--name-status", "-z", "-M", "--no-ext-diff", "--no-textconv", a, b).stdout
    return protected.parse_name_status(raw)


def _show(repo: Repo, rev: str, path: str) -> str | None:
    cp = repo.git("show", f"{rev}:{path}", check=False)
    return cp.stdout if cp.returncode == 0 else None


def _is_ancestor(repo: Repo, a: str, b: str) -> bool:
    return repo.git("merge-base", "--is-ancestor", a, b, check=False).returncode == 0


def _full(repo: Repo, what: str, value: str) -> str:
    v = value.strip().lower()
    if not (7 <= len(v) <= 40 and all(c in "0123456789abcdef" for c in v)):
        raise NotLanded(f"{what} {value!r} is not a commit sha (7 to 40 hex digits); nothing was done")
    return v


# ---------------------------------------------------------------- the landing


@dataclass
class Track:
    repo: Repo
    paths: LandPaths
    name: str
    spec_sha: str  # as given (may be abbreviated)
    tip: str  # as given (may be abbreviated)

    @property
    def branch(self) -> str:
        return f"refs/heads/{self.name}"


def _pins(t: Track, main: str) -> tuple[spec.Spec, str]:
    """Refuse unless the branch tip and main's spec are exactly what was approved."""
    now = t.repo.try_rev(t.branch)
    if now is None:
        raise NotLanded(f"{t.name}: not landed: branch {t.name} does not exist")
    if not now.startswith(t.tip):
        raise NotLanded(f"{t.name}: not landed: tip moved since approval (branch {t.name} is at "
                        f"{now[:12]}, approved {t.tip[:12]}); approve it again")
    path = spec.spec_path(t.name)
    blob = t.repo.git("rev-parse", "--verify", "--quiet", f"{main}:{path}", check=False).stdout.strip()
    if not blob:
        raise NotLanded(f"{t.name}: not landed: {path} is not on main; a track lands only against its spec")
    if not blob.startswith(t.spec_sha):
        raise NotLanded(f"{t.name}: not landed: spec sha differs ({path} on main is {blob[:12]}, "
                        f"approved {t.spec_sha[:12]}); review the spec and approve again")
    text = _show(t.repo, main, path) or ""
    return spec.parse(t.name, blob, text), now


def _tracks_at(repo: Repo, main: str) -> tracks.Tracks:
    text = _show(repo, main, "tracks.json")
    if text is None:
        raise NotLanded("tracks.json is not on main; it declares the gate (verify, landChecks); not landed")
    return tracks.parse_text(text, "main:tracks.json")


def _gate_files(repo: Repo, main: str, tr: tracks.Tracks) -> list[str]:
    files = set(repo.out("ls-tree", "-r", "--name-only", "-z", main).split("\0"))
    return protected.gate_files([tr.verify, *tr.land_checks], lambda p: p in files)


def _refuse_changes(name: str, changes: list[protected.Change], sp: spec.Spec,
                    extra: list[str], when: str) -> None:
    bad = protected.protected_violations(changes, extra)
    if bad:
        raise NotLanded(f"{name}: not landed: the diff {when} touches protected paths: "
                        + "; ".join(v.line() for v in bad[:5]) + ("; ..." if len(bad) > 5 else "")
                        + " (a person lands such a track)")
    out = protected.scope_violations(changes, sp.touches)
    if out:
        raise NotLanded(f"{name}: not landed: the diff {when} leaves the spec's touches: "
                        + "; ".join(v.line() for v in out[:5]) + ("; ..." if len(out) > 5 else ""))


def _remove_worktree(repo: Repo, path: Path) -> None:
    if path.exists():
        if repo.git("worktree", "remove", "--force", str(path), check=False).returncode != 0:
            shutil.rmtree(path, ignore_errors=True)
    repo.git("worktree", "prune", check=False)


def _prepare_worktree(t: Track, tip: str) -> Repo:
    path = t.paths.worktree(t.name)
    _remove_worktree(t.repo, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    t.repo.git("worktree", "add", "--detach", "-q", str(path), tip)
    return Repo(path)


def _rebase(t: Track, wt: Repo, main: str) -> str:
    """Rebase the tip onto `main` in the private worktree. A conflict only in handoff.md takes
    main's side; any other conflict aborts and refuses with exit 2 naming the files."""
    if not _is_ancestor(wt, main, "HEAD"):
        cp = wt.git(*_GIT_CFG, "rebase", "--quiet", main, check=False)
        while cp.returncode != 0:
            conflicted = [p for p in wt.git("diff", "--name-only", "--diff-filter=U", "-z").stdout.split("\0") if p]
            if not conflicted or set(conflicted) != {protected.HANDOFF}:
                wt.git("rebase", "--abort", check=False)
                if not conflicted:
                    raise NotLanded(f"{t.name}: not landed: the rebase onto main stopped: "
                                    + ((cp.stderr or cp.stdout).strip().splitlines() or ["?"])[-1])
                raise RebaseConflict(f"{t.name}: not landed: rebase conflict outside handoff.md in "
                                     + ", ".join(sorted(conflicted)) + "; the track must rebase by hand")
            if wt.git("checkout", "--ours", "--", protected.HANDOFF, check=False).returncode == 0:
                wt.git("add", "--", protected.HANDOFF)
            else:
                wt.git("rm", "-q", "--cached", "--ignore-unmatch", "--", protected.HANDOFF)
                (wt.path / protected.HANDOFF).unlink(missing_ok=True)
            info(f"land: {t.name}: handoff.md conflict resolved with main's roster")
            staged = wt.git("diff", "--cached", "--quiet", check=False).returncode != 0
            cp = wt.git(*_GIT_CFG, "rebase", "--continue" if staged else "--skip", check=False)
    # main's roster wins; the landing track leaves it.
    mine = _show(wt, "HEAD", protected.HANDOFF)
    base = _show(wt, main, protected.HANDOFF)
    want = None if base is None else protected.roster_without(base, t.name)
    if want != mine:
        target = wt.path / protected.HANDOFF
        if want is None:
            wt.git("rm", "-q", "--", protected.HANDOFF)
        else:
            target.write_text(want, encoding="utf-8")
            wt.git("add", "--", protected.HANDOFF)
        wt.git(*_GIT_CFG, "commit", "-q", "--no-verify", "-m",
               f"land {t.name}: keep main's handoff.md roster, {t.name} off it")
    return wt.rev("HEAD")


def _gate(t: Track, wt: Repo, tr: tracks.Tracks, strict: bool) -> None:
    checks = [("verify", tr.verify)] + [(f"landChecks[{i}]", c) for i, c in enumerate(tr.land_checks)]
    for label, cmd in checks:
        t0 = time.monotonic()
        info(f"land: {t.name}: gate: {label}: {cmd} ...")
        rc = run_gate(cmd, wt.path, strict, record=t.paths.gate(t.name))
        if rc != 0:
            why = ": no build lane answered; nothing of the gate ran here" if rc == 3 else ""
            raise NotLanded(f"{t.name}: not landed: {label} failed on the tip (exit {rc}{why})")
        info(f"land: {t.name}: gate: {label} passed ({time.monotonic() - t0:.1f} s)")


def _checkout_blocks(repo: Repo, checkout: Path, old: str, new: str) -> list[str]:
    """Local changes in main's checkout to files the landing changes (they would block it)."""
    changed = {p for c in changes_between(repo, old, new) for p in c.paths()}
    w = Repo(checkout)
    local = set(w.git("diff", "--name-only", "-z", "HEAD").stdout.split("\0"))
    local |= set(w.git("ls-files", "--others", "--exclude-standard", "-z").stdout.split("\0"))
    return sorted((changed & local) - {""})


def _refuse_checkout_blocks(t: Track, old: str, new: str) -> None:
    checkout = main_checkout(t.repo, t.paths)
    if checkout is not None:
        blocks = _checkout_blocks(t.repo, checkout, old, new)
        if blocks:
            raise NotLanded(f"{t.name}: not landed: main's checkout {checkout} has local changes to "
                            f"files this landing changes ({', '.join(blocks[:5])}); commit or stash them")


def land(repo_path: Path, name: str, spec_sha: str, tip: str, check: bool = False) -> int:
    """`nev land NAME SPEC_SHA TIP [--check]`: 0 landed (or --check passed), 1 not landed, 2 conflict."""
    spec.check_name(name)
    repo = Repo(repo_path)
    try:
        paths = LandPaths(repo.common_dir())
    except GitError:
        raise NotLanded(f"{repo_path} is not a git repository; run nev land in the primary checkout") from None
    t = Track(repo, paths, name, _full(repo, "spec sha", spec_sha), _full(repo, "branch tip", tip))
    with LandLock(paths.lock, wait=settings.get_float(settings.LAND_LOCK_WAIT)):
        stop_leftover_gate(paths, name)
        if not check and finish_pending(repo, paths, name):
            return 0
        landed = _already_landed(t)
        if landed is not None:
            print(f"{name}: already landed ({landed})")
            return 0
        return _land_locked(t, check)


def _already_landed(t: Track) -> str | None:
    if t.repo.try_rev(t.branch) is not None:
        return None
    for ref in t.repo.out("for-each-ref", "--format=%(refname)", f"refs/tags/spec/{t.name}/").split():
        if ref.rsplit("/", 1)[-1].startswith(t.spec_sha):
            c = t.repo.try_rev(ref)
            if c and _is_ancestor(t.repo, c, MAIN):
                return f"tag {ref.removeprefix('refs/tags/')} at {c[:12]} is on main"
    return None


def _land_locked(t: Track, check: bool) -> int:
    strict = settings.get_flag(settings.LANE_STRICT)
    wt_path = t.paths.worktree(t.name)
    moves = 0
    try:
        while True:
            old = t.repo.rev(MAIN)
            tr = _tracks_at(t.repo, old)
            sp, tip = _pins(t, old)
            problems = protected.touches_problems(sp.touches, tr.protected)
            extra = tr.protected + _gate_files(t.repo, old, tr)
            if problems:
                raise NotLanded(f"{t.name}: not landed: spec {spec.spec_path(t.name)}: " + "; ".join(problems))
            fork = t.repo.out("merge-base", old, tip)
            _refuse_changes(t.name, changes_between(t.repo, fork, tip), sp, extra, "of the track")
            info(f"land: {t.name}: pins match (tip {tip[:12]}, spec {sp.sha[:12]}); rebasing onto main {old[:12]}")
            fault("before-rebase")
            wt = _prepare_worktree(t, tip)
            gated = _rebase(t, wt, old)
            changes = changes_between(t.repo, old, gated)
            if not changes:
                raise NotLanded(f"{t.name}: not landed: nothing to land, main {old[:12]} already has the track's changes")
            _refuse_changes(t.name, changes, sp, extra, "against main after the rebase")
            _gate(t, wt, tr, strict)
            if check:
                _refuse_checkout_blocks(t, old, gated)
                print(f"{t.name}: check passed: would move main {old[:12]} -> {gated[:12]}; nothing changed")
                return 0
            now = t.repo.rev(MAIN)
            if now == old:
                _pins(t, now)
                _refuse_checkout_blocks(t, old, gated)
                marker = {"name": t.name, "spec_sha": sp.sha, "tip": tip, "old": old, "new": gated,
                          "time": time.time(), "pid": os.getpid()}
                store.write_pending(t.paths, t.name, marker)
                fault("before-ref-update")
                cas = t.repo.git("update-ref", "-m", f"nev land {t.name} (spec {sp.sha[:12]})",
                                 MAIN, gated, old, check=False)
                if cas.returncode == 0:
                    info(f"land: {t.name}: main {old[:12]} -> {gated[:12]} (fast-forward to the gated tip)")
                    fault("after-ref-update")
                    after_landing(t.repo, t.paths, marker)
                    print(f"{t.name}: landed: main {old[:12]} -> {gated[:12]}, tag spec/{t.name}/{sp.sha}")
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
        _remove_worktree(t.repo, wt_path)


# ---------------------------------------------------------------- after the landing


def finish_pending(repo: Repo, paths: LandPaths, name: str) -> bool:
    """Finish what an interrupted landing of `name` owes. True when it had landed."""
    marker = store.read_pending(paths, name)
    if marker is None:
        return False
    new, old = str(marker.get("new", "")), str(marker.get("old", ""))
    main = repo.rev(MAIN)
    if new and (main == new or _is_ancestor(repo, new, main)):
        info(f"land: {name}: an interrupted landing had moved main to {new[:12]}; finishing what it owed")
        after_landing(repo, paths, marker)
        print(f"{name}: landed: main {old[:12]} -> {new[:12]} (after-steps finished by this run)")
        return True
    info(f"land: {name}: an interrupted landing never moved main (marker for {new[:12]} dropped)")
    store.drop_pending(paths, name)
    _remove_worktree(repo, paths.worktree(name))
    return False


def _step(label: str, fn: Callable[[], str | None]) -> None:
    try:
        line = fn()
    except NotBuiltError as e:
        line = f"skipped: {e.message}"
    except Exception as e:  # an after-step never stops the others: one line each
        msg = e.message if isinstance(e, NevError) else f"{type(e).__name__}: {e}"
        line = f"failed: {msg}; nothing undone"
    if line:
        info(f"land: after: {label}: {line}")


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    prev = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(prev)


def after_landing(repo: Repo, paths: LandPaths, marker: dict[str, Any]) -> None:
    """Each step is one line; a failure undoes nothing and the next step still runs."""
    name, sha, tip = str(marker["name"]), str(marker["spec_sha"]), str(marker["tip"])
    old, new = str(marker["old"]), str(marker["new"])
    checkout = main_checkout(repo, paths)
    tr: tracks.Tracks | None = None
    with contextlib.suppress(NevError):
        tr = _tracks_at(repo, new)
    _step("main checkout", lambda: _sync_checkout(repo, checkout, old, new))
    _step("tag", lambda: _tag(repo, name, sha, new))
    _step("land worktree", lambda: _remove_worktree(repo, paths.worktree(name)))
    keep_branch: list[bool] = []
    _step("track worktree", lambda: _remove_track_worktree(repo, paths, name, keep_branch))
    fault("cleanup")
    _step("branch", lambda: _delete_branch(repo, name, tip, bool(keep_branch)))
    _step("lane copies", lambda: _sweep(name, checkout or repo.path))
    _step("install", lambda: _install(repo, tr, checkout, old, new))
    _step("floors", lambda: _raise_floors(checkout))
    a = store.load_approval(paths, name) if paths.approval(name).exists() else None
    if a is not None and tip.startswith(a.tip):
        store.drop_approval(paths, name)
    store.drop_pending(paths, name)


def _sync_checkout(repo: Repo, checkout: Path | None, old: str, new: str) -> str | None:
    if checkout is None:
        return None
    w = Repo(checkout)
    changed = sorted({p for c in changes_between(repo, old, new) for p in c.paths()})
    if w.git("diff-index", "--cached", "--quiet", new, "--", *changed, check=False).returncode == 0:
        return None
    w.git("read-tree", "-m", "-u", old, new)
    return f"files of {checkout} brought to {new[:12]}"


def _tag(repo: Repo, name: str, sha: str, new: str) -> str:
    tag = f"spec/{name}/{sha}"
    have = repo.try_rev(f"refs/tags/{tag}")
    if have == new:
        return f"spec/{name}/{sha[:12]}... already at {new[:12]}"
    if have is not None:
        return f"spec/{name}/{sha[:12]}... exists at {have[:12]}, not {new[:12]}; left alone"
    repo.git(*_GIT_CFG, "tag", "-a", "-m", f"nev land {name} (spec {sha})", tag, new)
    return f"spec/{name}/{sha[:12]}... -> {new[:12]}"


def _remove_track_worktree(repo: Repo, paths: LandPaths, name: str, keep: list[bool]) -> str | None:
    for w in worktrees(repo):
        if w.branch == f"refs/heads/{name}" and paths.base not in w.path.parents:
            if not w.path.exists():
                repo.git("worktree", "prune")
                return None
            dirty = Repo(w.path).out("status", "--porcelain")
            if dirty:
                keep.append(True)
                return f"kept {w.path}: it has uncommitted changes (nothing lost); remove it by hand"
            if w.path.resolve() == repo.path.resolve():
                keep.append(True)
                return f"kept {w.path}: it is the checkout nev land ran in"
            repo.git("worktree", "remove", "--force", str(w.path))
            return f"removed {w.path}"
    return None


def _delete_branch(repo: Repo, name: str, tip: str, keep: bool) -> str | None:
    now = repo.try_rev(f"refs/heads/{name}")
    if now is None:
        return None
    if keep:
        return f"kept branch {name} with its worktree"
    if now != tip:
        return f"kept branch {name}: it moved to {now[:12]} after approval"
    repo.git("update-ref", "-d", f"refs/heads/{name}", tip)
    return f"deleted branch {name} (was {tip[:12]})"


def _sweep(name: str, where: Path) -> str | None:
    """Hook: `nev lane sweep --track NAME` when the lanes package has it."""
    import click

    try:
        from lanes.cli import sweep
    except ImportError:
        return "skipped: no lane sweep in this build"
    from lanes.errors import NoLaneError

    with _cwd(where):
        try:
            rv = click.Context(sweep).invoke(sweep, track=name)
        except NoLaneError as e:
            # No lane configured: the gate ran here, so no lane holds a copy of this track.
            return f"skipped: {e.message}"
    return None if not rv else f"failed: lane sweep exited {rv}; nothing undone"


def _raise_floors(checkout: Path | None) -> str | None:
    """Hook: raise floors in main's checkout (bench.floors), scoring on a build lane."""
    try:
        from bench import floors as fl
    except ImportError:
        return "skipped: no floors in this build"
    if checkout is None:
        return "skipped: main is not checked out anywhere"
    req = fl.scoring_for(checkout)
    if not req.generated_dir.is_dir() or not fl.functions_of(req):
        return f"skipped: no generated functions under {req.generated_dir}"
    rc = fl.raise_floors(req, _lane_scorer(fl), echo=lambda m: info(f"land: after: floors: {m}"))
    return None if rc == 0 else f"failed: floors raise exited {rc}; nothing undone"


def _lane_scorer(fl: Any) -> Any:
    """`nev scores --json` on a build lane, read back (docs/floors.md); without the lane gate in
    this build, bench.floors' default (local on a lane, else no lane: nothing written)."""
    gate = _lanes_gate()
    if gate is None or not all(hasattr(gate, n) for n in ("gate_on_lane", "pick_lane", "forge_for")):
        return fl.default_scorer()

    def score(req: Any) -> Any:
        from bench.scores import from_json
        from lanes import config
        from lanes.errors import NoLaneError

        payload = importlib.import_module("lanes.payload")

        lf = config.configured(require=True)
        picked = gate.pick_lane(lf, None)
        if picked is None:
            raise NoLaneError("no build lane answered to score the floors; nothing was written")
        lane, conn = picked
        buf = bytearray()
        try:
            wt = payload.Worktree.open(req.repo)
            out = gate.gate_on_lane(lane, conn, wt, ["nev", "scores", "--json"], forge=gate.forge_for(wt, lf),
                                    on_stdout=buf.extend)
        finally:
            conn.close()
        if out.status != 0:
            raise NevError(f"`nev scores --json` on {lane.label} exited {out.status}; nothing was written")
        return from_json(buf.decode(errors="replace"))
    return score


def _install(repo: Repo, tr: tracks.Tracks | None, checkout: Path | None, old: str, new: str) -> str | None:
    """Run tracks.json → install, staged, swapped in only on success."""
    reasons = protected.install_reasons(changes_between(repo, old, new))
    if not reasons:
        return None
    why = ", ".join(reasons)
    if tr is None or tr.install is None:
        return f"needed ({why}) but tracks.json has no install entry; skipped"
    if checkout is None:
        return f"needed ({why}) but main is not checked out anywhere; skipped"
    target = checkout / tr.install.target
    stage = target.with_name(f".{target.name}.nev-stage")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    env = {**os.environ, "NEV_INSTALL_STAGE": str(stage)}
    env.pop(settings.LAND_FAULT.name, None)
    rc = subprocess.run(["sh", "-c", tr.install.command], cwd=checkout, env=env, stdin=subprocess.DEVNULL,
                        stdout=sys.stderr.fileno(), check=False).returncode
    if rc != 0:
        shutil.rmtree(stage, ignore_errors=True)
        return f"failed (exit {rc}) for {why}; {tr.install.target} left as it was"
    prev = target.with_name(f".{target.name}.nev-old")
    shutil.rmtree(prev, ignore_errors=True)
    if target.exists():
        target.rename(prev)
    stage.rename(target)
    shutil.rmtree(prev, ignore_errors=True)
    return f"installed {tr.install.target} ({why})"


# ---------------------------------------------------------------- approvals and the tick


def approve(repo_path: Path, name: str, spec_sha: str | None = None, tip: str | None = None) -> int:
    """Pin the reviewed spec sha and branch tip (default: what they are now)."""
    spec.check_name(name)
    repo = Repo(repo_path)
    paths = LandPaths(repo.common_dir())
    main = repo.rev(MAIN)
    now_tip = repo.try_rev(f"refs/heads/{name}")
    if now_tip is None:
        raise NotLanded(f"branch {name} does not exist; nothing approved")
    blob = repo.git("rev-parse", "--verify", "--quiet", f"{main}:{spec.spec_path(name)}", check=False).stdout.strip()
    if not blob:
        raise NotLanded(f"{spec.spec_path(name)} is not on main; nothing approved")
    if tip is not None and not now_tip.startswith(_full(repo, "branch tip", tip)):
        raise NotLanded(f"branch {name} is at {now_tip[:12]}, not the reviewed {tip}; review again; nothing approved")
    if spec_sha is not None and not blob.startswith(_full(repo, "spec sha", spec_sha)):
        raise NotLanded(f"{spec.spec_path(name)} on main is {blob[:12]}, not the reviewed {spec_sha}; nothing approved")
    a = store.save_approval(paths, name, blob, now_tip)
    print(f"approved {name}: spec {a.spec_sha[:12]}, tip {a.tip[:12]} (stored in {paths.approval(name)})")
    return 0


def land_approved(repo_path: Path) -> int:
    """The tick: finish pending landings, then land every approved track in turn, skipping
    (with a line) any whose tip moved since approval. Exit: the worst of the landings."""
    repo = Repo(repo_path)
    paths = LandPaths(repo.common_dir())
    with contextlib.suppress(NevError):
        env = _tracks_at(repo, repo.rev(MAIN)).spec_watch.poll_env
        for k, v in env.items():
            if os.environ.get(k) != v:
                info(f"land: {k}={v} (tracks.json specWatch.pollEnv)")
            os.environ[k] = v
    worst = 0
    names = set(store.pending_names(paths))
    for n in sorted(names):
        a = store.load_approval(paths, n)
        if a is None:
            with LandLock(paths.lock, wait=settings.get_float(settings.LAND_LOCK_WAIT)):
                stop_leftover_gate(paths, n)
                finish_pending(repo, paths, n)
    tally = {"landed": 0, "skipped": 0, "refused": 0}
    for a in store.list_approvals(paths):
        now = repo.try_rev(f"refs/heads/{a.name}")
        if now is not None and now != a.tip and not (paths.pending(a.name).exists()):
            info(f"land: skipped {a.name}: tip moved since approval (approved {a.tip[:12]}, now {now[:12]})")
            tally["skipped"] += 1
            continue
        try:
            rc = land(repo_path, a.name, a.spec_sha, a.tip)
        except NevError as e:
            info(f"nev land {a.name}: {e.message}")
            rc = e.exit_code
        if rc == 0:
            store.drop_approval(paths, a.name)
        tally["landed" if rc == 0 else "refused"] += 1
        worst = max(worst, rc)
    info("land: tick: " + ", ".join(f"{v} {k}" for k, v in tally.items()))
    return worst
