"""Retention on the lane: the share's archives (listed, then the chosen ones removed) and the job and
result refs the lane's mirrors keep after the forge deleted them.

    <share>/archive/gate-logs/<worktree>/<time>-<guest>-<commit>.log
    <share>/archive/job-logs/<job>/<Dagu run id>/
    <share>/archive/corpus/<name>/<time>.tar
    <share>/corpora/<function>-<key>/        the oracle's corpus store (kind "corpora", name the function)

A store entry is touched each time a build finds it, so its time is when it was last used; one whose
`<entry>.lock` a builder holds is kept. Which archives go is the development box's decision (`lanes.sweep.decide_archives`); here only
plain facts are read and the named entries removed, each checked to be a real entry of
`<share>/archive/<kind>/<name>/` (no link followed, no `..`). A mirror's ref goes only when the
forge no longer has it, by `update-ref -d REF OLD` against the value read before the forge was
asked, so a job submitted again meanwhile keeps its ref. Stdlib only.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat

from lanes.agent.errors import Refused
from lanes.agent.git import credential_env, git
from lanes.agent.messages import (
    ArchiveEntry,
    ArchivesRequest,
    ArchivesResult,
    DropArchivesRequest,
    DropArchivesResult,
    MirrorPrune,
    PruneRefsRequest,
    PruneRefsResult,
)

KINDS = ("gate-logs", "job-logs", "corpus")
STORE = "corpora"   # the corpus store's folder under the share (bench.oracle.shared.FOLDER)
NAMESPACES = ("job", "result")


def _plain(part: str) -> bool:
    return bool(part) and "/" not in part and part not in (".", "..") and not part.startswith(".")


def _real_dirs(path: str) -> list[str]:
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:
        return []
    return [n for n in names if _plain(n) and stat.S_ISDIR(os.lstat(os.path.join(path, n)).st_mode)]


def archives(req: ArchivesRequest) -> ArchivesResult:
    """Every archive entry under the share: kind, name, entry, mtime, size (files only)."""
    shared = req.shared
    if not os.path.isdir(os.path.join(shared, "archive")) and not os.path.isdir(os.path.join(shared, STORE)):
        raise Refused(f"no archive folder under {shared}; nothing to prune")
    out = _store_entries(shared)
    for kind in KINDS:
        base = os.path.join(shared, "archive", kind)
        for name in _real_dirs(base):
            folder = os.path.join(base, name)
            for entry in sorted(os.listdir(folder)):
                if not _plain(entry):  # a write in progress (.part) or not ours
                    continue
                st = os.lstat(os.path.join(folder, entry))
                if stat.S_ISLNK(st.st_mode):
                    continue
                out.append(ArchiveEntry(kind=kind, name=name, entry=entry, mtime=st.st_mtime,
                                        size=st.st_size if stat.S_ISREG(st.st_mode) else 0))
    return ArchivesResult(out)


def _store_entries(shared: str) -> list[ArchiveEntry]:
    """The corpus store's published entries (not a build's temporary folder, not a lock)."""
    base = os.path.join(shared, STORE)
    out = []
    for entry in _real_dirs(base):
        function, sep, _key = entry.rpartition("-")
        if not sep or not function:
            continue
        folder = os.path.join(base, entry)
        size = 0
        for f in os.listdir(folder):
            st = os.lstat(os.path.join(folder, f))
            size += st.st_size if stat.S_ISREG(st.st_mode) else 0
        out.append(ArchiveEntry(kind=STORE, name=function, entry=entry,
                                mtime=os.lstat(folder).st_mtime, size=size))
    return out


def _drop_store_entry(shared: str, entry: str, ans: DropArchivesResult) -> None:
    """Remove one store entry under its builders' lock; one a builder holds is kept."""
    path = os.path.join(shared, STORE, entry)
    try:
        if not _plain(entry) or os.path.islink(path) or not os.path.isdir(path):
            raise Refused("not a corpus store entry; kept")
        fd = os.open(os.path.join(shared, STORE, f"{entry}.lock"), os.O_RDWR | os.O_CREAT, 0o664)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise Refused("a build holds it; kept") from None
            shutil.rmtree(path)
        finally:
            os.close(fd)
        ans.removed.append(path)
    except (Refused, OSError) as err:
        ans.failed[path] = str(err)


def drop_archives(req: DropArchivesRequest) -> DropArchivesResult:
    """Remove the named entries: the paths removed, and those kept with why."""
    shared = req.shared
    ans = DropArchivesResult()
    for e in req.entries:
        kind, name, entry = e.kind, e.name, e.entry
        if kind == STORE:
            _drop_store_entry(shared, entry, ans)
            continue
        path = os.path.join(shared, "archive", kind, name, entry)
        try:
            if kind not in KINDS or not _plain(name) or not _plain(entry):
                raise Refused("not an archive entry; kept")
            folder = os.path.join(shared, "archive", kind, name)
            if os.path.islink(folder) or os.path.islink(path) or \
                    os.path.dirname(os.path.realpath(path)) != os.path.realpath(folder):
                raise Refused("a link, or it leaves its archive folder; kept")
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            ans.removed.append(path)
        except (Refused, OSError) as err:
            ans.failed[path] = str(err)
    return ans


def stale_refs(mirror: dict[str, str], forge: set[str]) -> dict[str, str]:
    """The mirror's job/result refs the forge no longer has (pure): ref -> the value it had."""
    return {ref: sha for ref, sha in mirror.items() if ref not in forge}


def _refs(out: bytes) -> dict[str, str]:
    refs = {}
    for line in out.decode().splitlines():
        sha, _, ref = line.replace("\t", " ").partition(" ")
        if ref:
            refs[ref.strip()] = sha
    return refs


def prune_refs(req: PruneRefsRequest) -> PruneRefsResult:
    """Per mirror: the refs pruned and those kept (and why), or missing."""
    url, cred = req.git_url, req.cred
    pats = [f"refs/heads/{ns}/" for ns in NAMESPACES]
    before: dict[str, dict[str, str]] = {}
    ans: dict[str, MirrorPrune] = {}
    for m in req.mirrors:
        path = os.path.expanduser(m)
        if not os.path.isdir(os.path.join(path, "objects")):
            ans[m] = MirrorPrune(missing=True)
            continue
        before[m] = _refs(git(["for-each-ref", "--format=%(objectname) %(refname)", *pats], cwd=path).stdout)
    if not before:
        return PruneRefsResult(ans)
    # read after the mirrors, so a ref pushed since is seen here and kept
    cp = git(["ls-remote", "--heads", url, *(f"refs/heads/{ns}/*" for ns in NAMESPACES)],
             env=credential_env(cred.user if cred else None, cred.password if cred else None),
             check=False)
    if cp.returncode != 0:
        err = cp.stderr.decode(errors="replace").strip().splitlines()
        raise Refused(f"listing the forge's job and result branches failed: {err[-1] if err else cp.returncode}")
    forge = set(_refs(cp.stdout))
    for m, refs in before.items():
        path = os.path.expanduser(m)
        done = MirrorPrune()
        for ref, sha in sorted(stale_refs(refs, forge).items()):
            r = git(["update-ref", "-d", ref, sha], cwd=path, check=False)
            if r.returncode == 0:
                done.pruned.append(ref)
            else:
                done.kept[ref] = "it moved while being pruned"
        ans[m] = done
    return PruneRefsResult(ans)
