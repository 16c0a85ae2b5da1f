"""One-call operations on the lane root: `status`, `cleanup`, and the sweep's `survey` and `remove`.

`survey` reports plain facts about every copy under the root (and the cached agents, and nev's
installs in the lane user's home, `installs`) and `remove`
archives a copy's untracked corpus data to the NAS as one tar, then removes the copy through
`git worktree remove` and `git worktree prune`, and removes the cached agents named; which copies
and agents go is decided on the development box (`lanes.sweep.decide`, `lanes.sweep.stale_agents`).
Nothing outside the root and the agent cache is touched, no symlink is followed out of it, the
mirror stays.
"""

from __future__ import annotations

import fcntl
import os
import resource
import shutil
import signal
import subprocess
import time

from lanes.agent import installs, layout, writer
from lanes.agent.copy import remove_env
from lanes.agent.errors import Refused
from lanes.agent.git import git
from lanes.agent.messages import (
    CleanupRequest,
    CleanupResult,
    CopySize,
    RemoveRequest,
    RemoveResult,
    StatusRequest,
    StatusResult,
    SurveyEntry,
    SurveyRequest,
    SurveyResult,
)


def free_gb(path: str) -> float:
    """Free space under `path` in GiB (binary, as every size nev shows)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / (1 << 30)


def copy_sizes(root: str) -> list[CopySize]:
    """Each copy's size in KiB (`du -sk`), largest first: what the disk guard's refusal names."""
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not layout.copy_name_ok(name) or not os.path.isdir(path) or os.path.islink(path):
            continue
        cp = subprocess.run(["du", "-sk", path], capture_output=True)
        kb = int(cp.stdout.split()[0]) if cp.returncode == 0 and cp.stdout else 0
        out.append(CopySize(name, kb))
    return sorted(out, key=lambda c: -c.kb)


def locked(path: str, shared: bool = False) -> bool:
    """Whether another process holds the flock of the lock file at `path` (a gate runs)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def status(req: StatusRequest) -> StatusResult:
    """`nev lane list`: free disk, copies present (worktrees of the mirror), gates running (locks held)."""
    root = layout.Root(req.root)
    guest = os.uname().nodename
    if not os.path.isdir(root.path):
        return StatusResult(guest=guest, root=root.path, free_gb=None)
    copies = []
    if os.path.isdir(root.mirror):
        mirror = os.path.realpath(root.mirror)
        copies = sorted(os.path.basename(p) for p in _worktrees(root) if p != mirror)
    running = []
    for entry in sorted(os.listdir(root.path)):
        name = layout.lock_owner(entry)
        if name is not None and locked(root.lock(name), shared=True):
            running.append(name)
    return StatusResult(guest=guest, root=root.path, free_gb=round(free_gb(root.path), 2),
                        copies=copies, running=running)


def cleanup(req: CleanupRequest) -> CleanupResult:
    """The development box's second call after a dropped connection: stop the run, remove the
    `.env` files. Only when no other gate holds the copy's lock (the one that does removes its own)."""
    root, name = layout.Root(req.root), req.name
    if req.pid:
        try:
            os.kill(req.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    if not layout.copy_name_ok(name) or not os.path.exists(root.lock(name)):
        return CleanupResult()
    fd = os.open(root.lock(name), os.O_RDWR)
    try:
        deadline = time.monotonic() + req.wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return CleanupResult(busy=True)
                time.sleep(0.05)
        if req.keep_env:
            return CleanupResult()
        state = writer.read_state(root, name)   # a writer's `.env` is its own until it ends
        removed = remove_env(root, name, keep_copy_env=state is not None and writer.running(state))
        shutil.rmtree(root.payload(name), ignore_errors=True)
        return CleanupResult(removed=removed)
    finally:
        os.close(fd)


# -- the sweep -------------------------------------------------------------------------------

def _worktrees(root: layout.Root) -> set[str]:
    r = git(["worktree", "list", "--porcelain"], cwd=root.mirror, check=False)
    lines = r.stdout.decode(errors="surrogateescape").splitlines()
    return {os.path.realpath(ln[9:]) for ln in lines if ln.startswith("worktree ")}


def _du_all(paths: list[str]) -> dict[str, int]:
    """One du for every folder (-l: hard links counted per folder, as a du of each alone)."""
    if not paths:
        return {}
    r = subprocess.run(["du", "-sbl", "--", *paths], capture_output=True, text=True)
    out = {}
    for line in r.stdout.splitlines():
        size, _, path = line.partition("\t")
        out[path] = int(size)
    return out


def _processes() -> list[tuple[int, str, list[str]]]:
    """(pid, name, paths it works in: its cwd and its open files) of every process we can see."""
    procs = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            paths = [os.readlink(f"/proc/{entry}/cwd")]
        except OSError:
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                try:
                    paths.append(os.readlink(f"/proc/{entry}/fd/{fd}"))
                except OSError:
                    pass
        except OSError:
            pass
        try:
            with open(f"/proc/{entry}/comm") as f:
                comm = f.read().strip()
        except OSError:
            comm = "?"
        procs.append((int(entry), comm, paths))
    return procs


def _corpus_untracked(copy: str) -> list[str]:
    """The copy's untracked files under `corpus/` (links not followed, not counted)."""
    corpus = os.path.join(copy, "corpus")
    if not os.path.isdir(corpus) or os.path.islink(corpus):
        return []
    r = git(["ls-files", "--others", "-z", "--", "corpus"], cwd=copy, check=False)
    names = [n.decode("utf-8", "surrogateescape") for n in r.stdout.split(b"\0") if n]
    return [n for n in names if not os.path.islink(os.path.join(copy, n))]


def _real_dir(p: str) -> bool:
    return os.path.isdir(p) and not os.path.islink(p)


def agent_cache() -> str:
    """The lane user's agent cache (layout.AGENT_CACHE), where the bootstrap keeps the agent."""
    return layout.home_file(os.path.expanduser("~"), layout.AGENT_CACHE)


def cached_agents() -> list[str]:
    """The entries of the agent cache (none when there is no cache)."""
    try:
        return sorted(os.listdir(agent_cache()))
    except OSError:
        return []


def agent_ages(names: list[str]) -> dict[str, float]:
    """Seconds since each cached agent was last written or started (its mtime: the loader
    touches it on every start), for `lanes.sweep.stale_agents`."""
    now, out = time.time(), {}
    for n in names:
        try:
            out[n] = max(0.0, now - os.stat(os.path.join(agent_cache(), n)).st_mtime)
        except OSError:
            continue
    return out


def remove_agents(names: list[str]) -> tuple[list[str], dict[str, str]]:
    """Remove the cached agents named (only names an agent cache entry can have): (removed, failed)."""
    removed, failed = [], {}
    for name in names:
        if not layout.agent_entry_ok(name):
            failed[name] = "not a cached agent's name; kept"
            continue
        try:
            os.unlink(os.path.join(agent_cache(), name))
            removed.append(name)
        except FileNotFoundError:
            removed.append(name)
        except OSError as e:
            failed[name] = str(e)
    return removed, failed


def survey(req: SurveyRequest) -> SurveyResult:
    """Facts about every copy under the root (and payloads left without one), for `lanes.sweep.decide`."""
    root = layout.Root(os.path.realpath(req.root))
    busy = set(req.busy)
    worktrees = _worktrees(root) if os.path.isdir(root.mirror) else set()
    procs = _processes()

    def in_use(p: str) -> list[tuple[int, str]]:
        pre = p + "/"
        return sorted({(pid, comm) for pid, comm, paths in procs for q in paths if q == p or q.startswith(pre)})

    names = sorted(layout.copy_names(os.listdir(root.path)))
    sizes = _du_all([p for n in names for p in (root.copy(n), root.payload(n)) if _real_dir(p)])
    entries = []
    for n in names:
        copy, payload = root.copy(n), root.payload(n)
        is_dir, has_payload = _real_dir(copy), os.path.lexists(payload)
        is_worktree = is_dir and os.path.realpath(copy) in worktrees
        use = (in_use(copy) if is_dir else []) + (in_use(payload) if has_payload else [])
        entries.append(SurveyEntry(
            name=n, copy=os.path.lexists(copy), payload=has_payload, dir=is_dir,
            worktree=is_worktree,
            symlink=os.path.islink(copy) or os.path.islink(payload),
            size=sizes.get(copy, 0) + sizes.get(payload, 0), pids=tuple(use),
            busy=tuple((p, c) for p, c in use if c in busy), locked=locked(root.lock(n)),
            corpus=tuple(_corpus_untracked(copy)) if is_worktree else ()))
    writers = [writer.sweep_facts(root, n) for n in root.writer_names(os.listdir(root.path))]
    peak = {"survey": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "largest_child": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}
    agents = cached_agents()
    return SurveyResult(root=root.path, mirror=os.path.isdir(root.mirror), entries=entries,
                        writers=writers, free_gb=free_gb(root.path),
                        nas=req.nas is not None and os.path.isdir(req.nas), agents=agents,
                        agent_ages=agent_ages(agents),
                        installs=installs.facts(os.path.expanduser("~"), procs),
                        peak_rss_kb=peak)


def remove_copy(root: layout.Root, name: str, nas: str | None, stamp: str) -> str:
    """Archive the copy's untracked corpus files to `nas` (one tar), then remove the copy, its
    payload and its lock; the archive's path ("" when nothing was archived). Refused: kept."""
    if not layout.copy_name_ok(name):
        raise Refused(f"{name!r} cannot be a copy's name; kept")
    copy, payload = root.copy(name), root.payload(name)
    for p in (copy, payload):
        if os.path.islink(p) or (os.path.lexists(p) and os.path.dirname(os.path.realpath(p)) != root.path):
            raise Refused(f"{p} is a link or leaves {root.path}; kept")
    if locked(root.lock(name)):
        raise Refused("locked by a running gate; kept")
    archived = ""
    if os.path.isdir(copy):
        files = _corpus_untracked(copy)
        if files:
            if not nas or not os.path.isdir(nas):
                raise Refused("no NAS folder to archive corpus/ into; kept")
            dest = os.path.join(nas, "archive", "corpus", name)
            os.makedirs(dest, exist_ok=True)
            tmp = os.path.join(dest, f".{stamp}.tar.part")
            import tarfile  # only when archiving: a call starts without it

            with tarfile.open(tmp, "w") as tf:
                for n in files:
                    tf.add(os.path.join(copy, n), arcname=n, recursive=False)
            archived = os.path.join(dest, f"{stamp}.tar")
            os.replace(tmp, archived)
        git(["worktree", "remove", "--force", "--force", copy], cwd=root.mirror)
    git(["worktree", "prune"], cwd=root.mirror)
    if _real_dir(payload):
        r = subprocess.run(["rm", "-rf", "--one-file-system", "--", payload], capture_output=True, text=True)
        if r.returncode != 0:
            raise Refused(f"removing {payload} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    lock = root.lock(name)
    if os.path.isfile(lock) and not os.path.islink(lock):
        os.unlink(lock)
    return archived


def remove(req: RemoveRequest) -> RemoveResult:
    """`remove_copy` of each name: {"removed": {name: archive}, "failed": {name: why}}; the
    cached agents named in `agents`: {"agents_removed": [...], "agents_failed": {name: why}}; the
    writer records named in `writers` (`writer.remove_record`, after the copies):
    {"writers_removed": [...], "writers_failed": {name: why}}; nev's installs named in `installs`
    (`installs.remove`): {"installs_removed": [...], "installs_failed": {name: why}}."""
    root = layout.Root(os.path.realpath(req.root))
    ans = RemoveResult()
    agents_removed, agents_failed = remove_agents(req.agents)
    ans.agents_removed.extend(agents_removed)
    ans.agents_failed.update(agents_failed)
    for name in req.names:
        try:
            ans.removed[name] = remove_copy(root, name, req.nas, req.stamp)
        except (Refused, OSError) as e:
            ans.failed[name] = str(e)
    if req.installs:
        removed, failed = installs.remove(os.path.expanduser("~"), list(req.installs), _processes())
        ans.installs_removed.extend(removed)
        ans.installs_failed.update(failed)
    for name in req.writers:
        try:
            writer.remove_record(root, name)
            ans.writers_removed.append(name)
        except (Refused, OSError) as e:
            ans.writers_failed[name] = str(e)
    return ans
