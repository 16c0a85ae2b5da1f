"""`nev lane sweep`: remove lane copies whose track has no worktree in the primary checkout.

The lane layout is the gate's (`lanes/apply.py`): one bare mirror `<root>/.git-mirror`, one git
worktree per track at `<root>/<name>`, its payload at `<root>/.payload-<name>` and its lock at
`<root>/.lock-<name>` (flock held while a gate runs).

Three parts: `SURVEY` (a stdlib script run with the lane's python3) reports plain facts about
every entry under the root; `decide` (pure) says which copies go and why the others stay;
`REMOVE` (the same kind of script) archives a copy's untracked corpus data to the NAS as one
tar, then removes it through `git worktree remove` and `git worktree prune`. Nothing outside
`<root>` is touched, no symlink is followed out of it, the mirror and the shared folders stay.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lanes import busy, config, settings, ui
from lanes.config import Lane
from lanes.errors import NevError
from lanes.gitrun import Repo
from lanes.ssh import Connection, SshError

MIRROR = ".git-mirror"

# Run on the lane as `python3 - ROOT BUSY`: prints one JSON object. Stdlib only.
SURVEY = r'''
import fcntl, json, os, subprocess, sys
root, busy_names = os.path.realpath(sys.argv[1]), set(sys.argv[2].split("|"))
mirror = os.path.join(root, ".git-mirror")
def du_all(paths):
    """One du for every folder (-l: hard links counted per folder, as a du of each alone)."""
    if not paths:
        return {}
    r = subprocess.run(["du", "-sbl", "--", *paths], capture_output=True, text=True)
    out = {}
    for line in r.stdout.splitlines():
        size, _, path = line.partition("\t")
        out[path] = int(size)
    return out
wts = set()
if os.path.isdir(mirror):
    r = subprocess.run(["git", "-C", mirror, "worktree", "list", "--porcelain"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("worktree "):
            wts.add(os.path.realpath(line[9:]))
users = {}   # path prefix -> pids with cwd or an open file there
procs = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    paths = []
    try:
        paths.append(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        continue
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                paths.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
    except OSError:
        pass
    try:
        comm = open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        comm = "?"
    procs.append((int(pid), comm, paths))
def in_use(p):
    pre = p + "/"
    return sorted({(pid, comm) for pid, comm, paths in procs for q in paths if q == p or q.startswith(pre)})
def locked(name):
    path = os.path.join(root, ".lock-" + name)
    if not os.path.exists(path):
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
def corpus_untracked(copy):
    if not os.path.isdir(os.path.join(copy, "corpus")) or os.path.islink(os.path.join(copy, "corpus")):
        return []
    r = subprocess.run(["git", "-C", copy, "ls-files", "--others", "-z", "--", "corpus"], capture_output=True)
    out = []
    for n in r.stdout.split(b"\0"):
        if n and not os.path.islink(os.path.join(copy, n.decode("utf-8", "surrogateescape"))):
            out.append(n.decode("utf-8", "surrogateescape"))
    return out
entries = []
names = set()
for e in sorted(os.listdir(root)):
    if e in (".git-mirror",) or e.startswith(".lock-"):
        continue
    if e.startswith(".payload-"):
        names.add(e[len(".payload-"):])
    elif not e.startswith("."):
        names.add(e)
def real_dir(p):
    return os.path.isdir(p) and not os.path.islink(p)
sizes = du_all([p for n in sorted(names) for p in (os.path.join(root, n), os.path.join(root, ".payload-" + n))
                if real_dir(p)])
for n in sorted(names):
    copy, payload = os.path.join(root, n), os.path.join(root, ".payload-" + n)
    d = {"name": n, "copy": os.path.lexists(copy), "payload": os.path.lexists(payload)}
    d["symlink"] = os.path.islink(copy) or os.path.islink(payload)
    d["dir"] = os.path.isdir(copy) and not os.path.islink(copy)
    d["worktree"] = d["dir"] and os.path.realpath(copy) in wts
    d["size"] = sizes.get(copy, 0) + sizes.get(payload, 0)
    use = (in_use(copy) if d["dir"] else []) + (in_use(payload) if d["payload"] else [])
    d["pids"] = [[p, c] for p, c in use]
    d["busy"] = [[p, c] for p, c in use if c in busy_names]
    d["locked"] = locked(n)
    d["corpus"] = corpus_untracked(copy) if d["worktree"] else []
    entries.append(d)
st = os.statvfs(root)
import resource
print(json.dumps({"root": root, "mirror": os.path.isdir(mirror), "entries": entries,
                  "free_gb": st.f_bavail * st.f_frsize / 1e9,
                  "peak_rss_kb": {"survey": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                                  "largest_child": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}}))
'''

# Run on the lane as `python3 - ROOT NAME NAS STAMP` (NAS "-" when none): archive, then remove.
REMOVE = r'''
import os, subprocess, sys, tarfile
root, name, nas, stamp = os.path.realpath(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
copy, payload, mirror = os.path.join(root, name), os.path.join(root, ".payload-" + name), os.path.join(root, ".git-mirror")
assert "/" not in name and name not in ("", ".", "..", ".git-mirror")
for p in (copy, payload):
    if os.path.islink(p) or (os.path.lexists(p) and os.path.dirname(os.path.realpath(p)) != root):
        sys.exit(f"{p} is a link or leaves {root}; kept")
archived = ""
if os.path.isdir(copy):
    r = subprocess.run(["git", "-C", copy, "ls-files", "--others", "-z", "--", "corpus"], capture_output=True)
    files = [n.decode("utf-8", "surrogateescape") for n in r.stdout.split(b"\0") if n]
    files = [n for n in files if not os.path.islink(os.path.join(copy, n))]
    if files:
        if nas == "-" or not os.path.isdir(nas):
            sys.exit("no NAS folder to archive corpus/ into; kept")
        dest = os.path.join(nas, "archive", "corpus", name)
        os.makedirs(dest, exist_ok=True)
        tmp = os.path.join(dest, f".{stamp}.tar.part")
        with tarfile.open(tmp, "w") as tf:
            for n in files:
                tf.add(os.path.join(copy, n), arcname=n, recursive=False)
        archived = os.path.join(dest, f"{stamp}.tar")
        os.replace(tmp, archived)
    subprocess.run(["git", "-C", mirror, "worktree", "remove", "--force", "--force", copy], check=True,
                   capture_output=True)
subprocess.run(["git", "-C", mirror, "worktree", "prune"], check=True, capture_output=True)
if os.path.isdir(payload) and not os.path.islink(payload):
    subprocess.run(["rm", "-rf", "--one-file-system", "--", payload], check=True)
lock = os.path.join(root, ".lock-" + name)
if os.path.isfile(lock) and not os.path.islink(lock):
    os.unlink(lock)
print(archived)
'''


@dataclass(frozen=True)
class Entry:
    """What the survey found for one name under the lane root."""

    name: str
    copy: bool = True
    payload: bool = False
    dir: bool = True
    worktree: bool = True
    symlink: bool = False
    size: int = 0
    pids: tuple[tuple[int, str], ...] = ()
    locked: bool = False
    corpus: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: dict) -> Entry:
        return cls(name=d["name"], copy=d["copy"], payload=d["payload"], dir=d["dir"], worktree=d["worktree"],
                   symlink=d["symlink"], size=int(d["size"]), pids=tuple((int(p), c) for p, c in d["pids"]),
                   locked=d["locked"], corpus=tuple(d["corpus"]))


@dataclass(frozen=True)
class Decision:
    name: str
    remove: bool
    why: str
    size: int = 0


def decide(entries: list[Entry], tracks: set[str], primary: str | None, track: str | None,
           nas: bool) -> list[Decision]:
    """Which copies go and why the others stay (pure)."""
    out = []
    for e in entries:
        if track is not None and e.name != track:
            continue

        def keep(why: str, e: Entry = e) -> None:
            out.append(Decision(e.name, False, why, e.size))

        if e.name == primary:
            keep("the primary checkout's own copy")
        elif e.name in tracks:
            keep("its track has a worktree in the primary checkout")
        elif e.symlink:
            keep("a symlink, never followed out of the lane root")
        elif e.copy and not e.worktree:
            keep("not a worktree of the lane's mirror")
        elif e.locked:
            keep("locked by a running gate")
        elif e.pids:
            keep("a process runs in it (" + ", ".join(f"{c} {p}" for p, c in e.pids[:3]) + ")")
        elif e.corpus and not nas:
            keep(f"{len(e.corpus)} untracked corpus file(s) and no NAS folder to archive them into")
        else:
            out.append(Decision(e.name, True, "its track has no worktree in the primary checkout"
                                + (f"; {len(e.corpus)} corpus file(s) go to the NAS first" if e.corpus else ""),
                                e.size))
    return out


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def primary_tracks(repo: Repo) -> tuple[set[str], str]:
    """Names of the primary checkout's worktrees (a copy is named after its worktree folder) and
    the primary's own name."""
    out = repo.git("worktree", "list", "--porcelain").stdout
    paths = [ln[9:] for ln in out.splitlines() if ln.startswith("worktree ")]
    names = {p.rstrip("/").rsplit("/", 1)[-1] for p in paths}
    return names, paths[0].rstrip("/").rsplit("/", 1)[-1]


@dataclass
class LaneSweep:
    lane: Lane
    decisions: list[Decision] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    free_gb: float | None = None
    peak_rss_kb: dict = field(default_factory=dict)   # of the survey on the lane (and its largest du)


def survey(conn: Connection, root: str) -> dict:
    res = conn.run(["python3", "-", root, busy.pattern()], stdin=SURVEY.encode(), timeout=600)
    if res.exit_status != 0:
        raise NevError(f"surveying {root} on {conn.target} failed: {(res.err.strip().splitlines() or ['?'])[-1]}")
    return json.loads(res.out)


def sweep_lane(conn: Connection, lane: Lane, tracks: set[str], primary: str | None, track: str | None,
               dry_run: bool, nas: str | None) -> LaneSweep:
    facts = survey(conn, lane.root)
    nas_dir = nas or lane.shared or settings.get(settings.LANE_SHARED)
    nas_ok = bool(nas_dir) and conn.run(["test", "-d", nas_dir or "/nonexistent"]).exit_status == 0
    result = LaneSweep(lane, decide([Entry.from_json(e) for e in facts["entries"]], tracks, primary, track, nas_ok),
                       free_gb=facts["free_gb"], peak_rss_kb=facts.get("peak_rss_kb", {}))
    if dry_run:
        return result
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for d in result.decisions:
        if not d.remove:
            continue
        res = conn.run(["python3", "-", lane.root, d.name, nas_dir if nas_ok and nas_dir else "-", stamp],
                       stdin=REMOVE.encode(), timeout=3600)
        if res.exit_status == 0:
            result.removed.append(d.name)
        else:
            result.failed.append(f"{d.name}: {(res.err.strip().splitlines() or ['exit ' + str(res.exit_status)])[-1]}")
    return result


def report(s: LaneSweep, dry_run: bool) -> list[str]:
    lines = []
    total = 0
    for d in s.decisions:
        if d.remove:
            total += d.size
            verb = "would remove" if dry_run else ("removed" if d.name in s.removed else "failed")
            lines.append(f"{s.lane.label}: {verb} {d.name} ({human(d.size)}): {d.why}")
        else:
            lines.append(f"{s.lane.label}: kept {d.name}: {d.why}")
    lines += [f"{s.lane.label}: failed {f}" for f in s.failed]
    lines.append(f"{s.lane.label}: {'would free' if dry_run else 'freed'} {human(total)} in total")
    return lines


def _stdout(line: str) -> None:
    print(line, flush=True)


def sweep(lane_index: int | None = None, track: str | None = None, dry_run: bool = False,
          repo: Repo | None = None, lanes: list[Lane] | None = None,
          say: Callable[[str], None] = _stdout) -> tuple[int, list[LaneSweep]]:
    """Sweep every configured lane (or one); print a line per copy. Exit 1 when a lane could not
    be swept or a removal failed (named on its line); nothing done is undone."""
    lf = config.configured()
    chosen = lanes if lanes is not None else [ln for ln in lf.lanes if lane_index is None or ln.index == lane_index]
    if not chosen:
        raise NevError(f"--lane {lane_index}: no such lane; the lanes file lists {len(lf.lanes)}")
    tracks, primary = primary_tracks(repo or Repo(Path(".")))
    status = 0
    results = []
    for ln in chosen:
        try:
            with ln.connect() as conn:
                s = sweep_lane(conn, ln, tracks, primary, track, dry_run, None)
        except (SshError, NevError) as e:
            say(f"{ln.label}: not swept: {e}")
            status = 1
            continue
        results.append(s)
        for line in report(s, dry_run):
            say(line)
        if s.failed:
            status = 1
    return status, results


def gate_hook(lane: Lane, track: str) -> None:
    """The gate's disk guard (`lanes.gate.SWEEP_HOOK`): sweep the lane that is short of space,
    every copy that may go (the primary checkout is the repository of the current folder); the
    guard then asks the lane for its free space again. A sweep that fails says so in one line
    and the guard decides as if nothing was freed."""
    try:
        sweep(lanes=[lane], say=ui.info)     # stderr: a gate's stdout is its command's
    except NevError as e:
        ui.info(f"{lane.label}: the disk guard's sweep failed: {e}")


def after_landing(track: str) -> int:
    """After a landing: sweep that track's copies only. A failure is one line and undoes nothing."""
    try:
        status, _ = sweep(track=track)
    except NevError as e:
        print(f"sweep after landing {track}: failed: {e}", flush=True)
        return 1
    return status
