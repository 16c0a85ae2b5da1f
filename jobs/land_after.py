"""What a landing owes once main moved: main's checkout, the tag, cleanup, the lane sweep, the
install step and the floors raise (and, for a person's landing, its entry in the rig's change
log); and finishing it for a landing that was interrupted."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from bench import floors, scores
from jobs import approvals as store
from jobs import protected, tracks
from jobs.approvals import MAIN, LandPaths, Pending
from jobs.land_gate import fault
from lanes.base import changelog, notify, settings
from lanes.base.errors import NevError
from lanes.base.gitrun import Repo
from lanes.base.ui import info
from lanes.lanesfile import lanes_configured


def finish_pending(repo: Repo, paths: LandPaths, name: str, environ: Mapping[str, str]) -> bool:
    """Finish what an interrupted landing of `name` owes. True when it had landed."""
    marker = store.read_pending(paths, name)
    if marker is None:
        return False
    main = repo.rev(MAIN)
    if main == marker.new or repo.is_ancestor(marker.new, main):
        info(f"land: {name}: an interrupted landing had moved main to {marker.new[:12]}; finishing what it owed")
        after_landing(repo, paths, marker, environ)
        print(f"{name}: landed: main {marker.old[:12]} -> {marker.new[:12]} (after-steps finished by this run)")
        return True
    info(f"land: {name}: an interrupted landing never moved main (marker for {marker.new[:12]} dropped)")
    store.drop_pending(paths, name)
    repo.discard_worktree(paths.worktree(name))
    return False


def _step(label: str, fn: Callable[[], str | None]) -> None:
    try:
        line = fn()
    except Exception as e:  # an after-step never stops the others: one line each
        msg = e.message if isinstance(e, NevError) else f"{type(e).__name__}: {e}"
        line = f"failed: {msg}; nothing undone"
    if line:
        info(f"land: after: {label}: {line}")


def after_landing(repo: Repo, paths: LandPaths, m: Pending, environ: Mapping[str, str]) -> None:
    """Each step is one line; a failure undoes nothing and the next step still runs."""
    checkout = repo.checkout_of(MAIN, paths.base)   # never a landing's private worktree
    tr: tracks.Tracks | None = None
    try:
        tr = tracks.at(repo, m.new)
    except NevError:
        pass
    _step("main checkout", lambda: _sync_checkout(repo, checkout, m.old, m.new))
    _step("tag", lambda: _tag(repo, m.name, m.spec_sha, m.new, m.reviewed_by))
    if m.reviewed_by is not None:
        _step("change log", lambda: _log_person(repo, m, environ))
    _step("land worktree", lambda: repo.discard_worktree(paths.worktree(m.name)))
    keep_branch: list[bool] = []
    _step("track worktree", lambda: _remove_track_worktree(repo, paths, m.name, keep_branch))
    fault("cleanup")
    _step("branch", lambda: _delete_branch(repo, m.name, m.tip, bool(keep_branch)))
    _step("lane copies", lambda: _sweep(repo, m.name, environ))
    _step("install", lambda: _install(repo, tr, checkout, m.old, m.new, environ))
    before = _floors_of(checkout, environ)
    _step("floors", lambda: _raise_floors(checkout, environ))
    _step("announcement", lambda: _announce(m, before, _floors_of(checkout, environ), environ))
    _step("approval", lambda: _drop_approval(paths, m))
    store.drop_pending(paths, m.name)


def _sync_checkout(repo: Repo, checkout: Path | None, old: str, new: str) -> str | None:
    if checkout is None:
        return None
    w = Repo(checkout)
    changed = sorted({p for c in protected.changes(repo, old, new) for p in c.paths()})
    if w.index_matches(new, changed):
        return None
    w.move_checkout(old, new)
    return f"files of {checkout} brought to {new[:12]}"


def _tag(repo: Repo, name: str, sha: str, new: str, reviewed_by: str | None = None) -> str:
    tag = f"spec/{name}/{sha}"
    have = repo.try_rev(f"refs/tags/{tag}")
    if have == new:
        return f"spec/{name}/{sha[:12]}... already at {new[:12]}"
    if have is not None:
        return f"spec/{name}/{sha[:12]}... exists at {have[:12]}, not {new[:12]}; left alone"
    msg = f"nev land {name} (spec {sha})"
    if reviewed_by is not None:     # a person's landing: the tag names the person
        msg = (f"nev land {name} (spec {sha}), reviewed by {reviewed_by}\n\n"
               f"Reviewed-by: {reviewed_by}")
    repo.tag_annotated(tag, new, msg)
    return f"spec/{name}/{sha[:12]}... -> {new[:12]}"


def _log_person(repo: Repo, m: Pending, environ: Mapping[str, str]) -> str:
    """A person's landing, in the rig notes' change log beside nev's own actions."""
    try:
        extra = tracks.at(repo, m.old).protected
    except NevError:
        extra = []
    touched = protected.protected_violations(protected.changes(repo, m.old, m.new), extra)
    lines = [f"## {changelog.now()} land {m.name}", f"- who: {changelog.who()}",
             f"- reviewed by: {m.reviewed_by}",
             f"- main: {m.old[:12]} -> {m.new[:12]} (tag spec/{m.name}/{m.spec_sha})",
             "- protected paths: " + ("; ".join(v.line() for v in touched) if touched else "none"),
             "- result: landed"]
    p = changelog.append(settings.path(settings.RIG_NOTES, environ), "\n".join(lines) + "\n")
    return f"a person's landing, reviewed by {m.reviewed_by}, recorded in {p}"


def _remove_track_worktree(repo: Repo, paths: LandPaths, name: str, keep: list[bool]) -> str | None:
    for w in repo.worktrees():
        if w.branch == f"refs/heads/{name}" and paths.base not in w.path.parents:
            if not w.path.exists():
                repo.prune_worktrees()
                return None
            if not Repo(w.path).is_clean():
                keep.append(True)
                return f"kept {w.path}: it has uncommitted changes (nothing lost); remove it by hand"
            if w.path.resolve() == repo.path.resolve():
                keep.append(True)
                return f"kept {w.path}: it is the checkout nev land ran in"
            repo.remove_worktree(w.path)
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
    if not repo.delete_ref(f"refs/heads/{name}", tip):
        return f"failed: branch {name} moved while it was being deleted; kept"
    return f"deleted branch {name} (was {tip[:12]})"


def _sweep(repo: Repo, name: str, environ: Mapping[str, str]) -> str | None:
    """`lanes.sweep.after_landing`: the track's copies on every lane."""
    if not lanes_configured(environ):
        return "skipped: no build lane is configured, so the gate ran here and no lane holds a copy"
    from lanes import sweep  # the SSH stack, loaded only when a lane is configured

    rc = sweep.after_landing(name, repo)
    return None if rc == 0 else f"failed: lane sweep exited {rc}; nothing undone"


def _install(repo: Repo, tr: tracks.Tracks | None, checkout: Path | None, old: str, new: str,
             environ: Mapping[str, str]) -> str | None:
    """Run tracks.json → install, staged, swapped in only on success."""
    reasons = protected.install_reasons(protected.changes(repo, old, new))
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
    env = {k: v for k, v in environ.items() if k != settings.LAND_FAULT.name}
    env["NEV_INSTALL_STAGE"] = str(stage)
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


def _raise_floors(checkout: Path | None, environ: Mapping[str, str]) -> str | None:
    """`bench.floors.raise_floors` in main's checkout, scored on a build lane (`bench.scores.lane_scorer`)."""
    if checkout is None:
        return "skipped: main is not checked out anywhere"
    req = floors.scoring_for(checkout, environ)
    if not req.generated_dir.is_dir() or not floors.functions_of(req):
        return f"skipped: no generated functions under {req.generated_dir}"
    rc = floors.raise_floors(req, lambda r: scores.lane_scorer(r, environ),
                             echo=lambda m: info(f"land: after: floors: {m}"))
    return None if rc == 0 else f"failed: floors raise exited {rc}; nothing undone"


def _floors_of(checkout: Path | None, environ: Mapping[str, str]) -> dict[str, str]:
    """Each generated function's floor in main's checkout now, "P/R" (none where nothing reads)."""
    if checkout is None:
        return {}
    try:
        fns = floors.functions_of(floors.scoring_for(checkout, environ))
        return {f.name: f"{f.floor.cases_passed}/{f.floor.cases_run}"
                for f in fns if f.floor is not None}
    except (NevError, OSError):
        return {}


def _announce(m: Pending, before: dict[str, str], after: dict[str, str],
              environ: Mapping[str, str]) -> str | None:
    """The landing's announcement from the ledger of the batches behind it: printed, and posted to
    the webhook (its format's form) as the `landed` event."""
    from bench import announce
    from bench.ledger import share_root

    names = m.ledgers or (m.name,)
    fns = sorted(set(before) | set(after))
    by = f"reviewed by {m.reviewed_by}" if m.reviewed_by else "the guarded fast-forward"
    try:
        shared = share_root()
    except NevError:
        shared = None
    lines, bad = announce.read(names, shared)
    a = announce.build(names[0], lines, {f: (before.get(f), after.get(f)) for f in fns},
                       f"{m.old[:12]} -> {m.new[:12]}", by, bad)
    for line in a.render().splitlines():
        info(f"land: announcement: {line}")
    notify.event(notify.Kind.LANDED, m.name, a.text(), m.new, environ, announcement=a.to_json())
    return None


def _drop_approval(paths: LandPaths, m: Pending) -> None:
    a = store.load_approval(paths, m.name)
    if a is not None and m.tip.startswith(a.tip):
        store.drop_approval(paths, m.name)

