"""`nev lane sweep`: remove lane copies whose track has no worktree in the primary checkout.

The lane layout is the agent's (`lanes/agent/layout.py`): one bare mirror, one git worktree per
track at `<root>/<name>`, its payload at `<root>/.payload-<name>` and its lock at
`<root>/.lock-<name>` (flock held while a gate runs); a writer started in a copy keeps its record
at `<root>/.writer-<name>/` (`decide_writers`: an orphan record goes once its writer ended and its
commits were fetched, never before).

Three parts: the agent's `survey` reports plain facts about every copy under the root and the
agents cached in the lane user's state; `decide` and `stale_agents` (pure, here) say which copies
and agents go and why the others stay; the agent's `remove` archives a copy's untracked corpus
data to the NAS as one tar, then removes it through `git worktree remove` and `git worktree
prune`, and removes the stale agents (`lanes/agent/root.py`). Nothing outside `<root>` and the
agent cache is touched, no symlink is followed out of it, the mirror and the shared folders stay.

Every sweep also removes the lane's old nev installs (`decide_installs`, `lanes/agent/installs.py`):
never the current one, never one a nev runs from, and the last NEV_INSTALLS_KEEP made current stay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lanes import agentpack, busy, lanesfile, payload, session
from lanes.agent import layout
from lanes.agent.messages import (
    ArchiveEntry,
    ArchiveRef,
    ArchivesRequest,
    ArchivesResult,
    Cred,
    DropArchivesRequest,
    DropArchivesResult,
    InstallFacts,
    MirrorPrune,
    PruneRefsRequest,
    PruneRefsResult,
    RemoveRequest,
    RemoveResult,
    SurveyEntry,
    SurveyRequest,
    SurveyResult,
    WriterFacts,
)
from lanes.base import settings, ui
from lanes.base.errors import NevError
from lanes.base.gitrun import GitError, Repo
from lanes.base.ssh import Connection, SshError
from lanes.forge import forge_for
from lanes.lanesfile import Lane

SURVEY_TIMEOUT = 600
REMOVE_TIMEOUT = 3600     # per copy: archiving its corpus data can take long


Entry = SurveyEntry   # what the survey found for one name under the lane root


@dataclass(frozen=True)
class Decision:
    name: str
    remove: bool
    why: str
    size: int = 0


def of_track(name: str, track: str | None, key: str) -> bool:
    """Whether the copy `name` is one of `track`'s (pure): any when no track is given; else the
    copy named `track` exactly, `track`'s unkeyed one, or the repository's copy of folder
    `track`."""
    return track is None or name in (track, layout.plain_name(track), layout.copy_name(track, key))


def mine(name: str, key: str, track: str | None) -> str | None:
    """Whether the sweep of the repository keyed `key` may remove the copy (or writer record)
    `name` at all: None when it may, else why it stays (pure). Only its own copies and the ones
    the sweep is told by name go; whose a copy is, is its key (`lanes.agent.layout.copy_key`).

    | the name | `track` | may go? |
    |---|---|---|
    | `<folder>-<key>`, this repository's key | any | yes (what else `decide` says) |
    | exactly `track`, or its unkeyed name (`plain_name`) | given | yes: named (or landed) |
    | `<folder>-<other key>` | | no: another repository's copy |
    | no key (a copy from before copies were keyed) | | no: not provably this repository's |
    """
    if layout.copy_key(name) == key:
        return None
    if track is not None and name in (track, layout.plain_name(track)):
        return None
    if layout.copy_key(name) is not None:
        return (f"another repository's copy (its key {layout.copy_key(name)} is not this "
                f"repository's, {key})")
    return ("unkeyed, from before copies were keyed: not provably this repository's "
            f"(`nev lane sweep --track {name}` removes it)")


def decide(entries: list[Entry], tracks: set[str], primary: str | None, track: str | None,
           nas: bool, key: str) -> list[Decision]:
    """Which copies go and why the others stay (pure). `tracks` and `primary` are the copy names
    of the repository's worktrees and primary checkout (`primary_tracks`), `key` its key;
    `track` (a worktree folder's or a copy's name) limits the sweep to that track's copies.

    | the copy (first row that holds) | goes? |
    |---|---|
    | not `track`'s (when given) | not looked at |
    | the primary checkout's own | kept |
    | a worktree of the repository has it | kept |
    | not this repository's (`mine`: another key, or unkeyed and not named) | kept |
    | a symlink | kept: never followed out of the lane root |
    | a folder that is no worktree of the lane's mirror | kept |
    | locked by a running gate, or a process runs in it | kept |
    | untracked corpus files and no NAS folder to archive them into | kept |
    | otherwise (this repository's, no worktree has it) | removed (corpus files to the NAS first) |
    """
    out = []
    for e in entries:
        if not of_track(e.name, track, key):
            continue

        def keep(why: str, e: Entry = e) -> None:
            out.append(Decision(e.name, False, why, e.size))

        theirs = mine(e.name, key, track)
        if e.name == primary:
            keep("the primary checkout's own copy")
        elif e.name in tracks:
            keep("its track has a worktree in the primary checkout")
        elif theirs is not None:
            keep(theirs)
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


WriterRecord = WriterFacts   # what the survey found for one writer record (`.writer-<name>/`)


def decide_writers(records: list[WriterRecord], gone: set[str], track: str | None,
                   key: str) -> list[Decision]:
    """Which writer records go (pure): `gone` are the copies this sweep removes, `key` the
    repository's (a record is named by its copy: another repository's stays, as its copy does).

    | the record | goes? |
    |---|---|
    | not this repository's (`mine`) | no |
    | its writer runs | no |
    | commits of its writer never fetched | no, never: `nev lane writer fetch` first |
    | not readable (no state.json) | no: nothing says its commits were fetched |
    | its copy stays | no: `nev lane writer status` and `fetch` read it |
    | its writer ended, everything fetched, its copy gone or going | yes |
    """
    out = []
    for w in records:
        if not of_track(w.name, track, key):
            continue
        label = layout.WRITER + w.name
        theirs = mine(w.name, key, track)
        if theirs is not None:
            out.append(Decision(label, False, theirs))
        elif w.running:
            out.append(Decision(label, False, "its writer is running"))
        elif w.unfetched:
            out.append(Decision(label, False, f"{len(w.unfetched)} commit(s) of its writer never fetched "
                                              f"({'; '.join(w.unfetched[:3])}); run `nev lane writer fetch` first"))
        elif not w.record:
            out.append(Decision(label, False, "no readable record (state.json): nothing says its commits were fetched"))
        elif w.copy and w.name not in gone:
            out.append(Decision(label, False, "its lane copy stays"))
        else:
            out.append(Decision(label, True, "an orphan: its writer ended and its commits were fetched"))
    return out


def stale_agents(cached: list[str], current: str, ages: dict[str, float] | None = None,
                 keep_hours: float = 0.0) -> list[str]:
    """The cached agents a sweep removes (pure): entries of the lane's agent cache that are not
    the agent this development box sends (`current`, its hash) and were not used within
    `keep_hours` (`ages`: seconds since each was last used; a `.code` counts its agent's use).
    The lane's other development boxes, on older or newer nevs, keep theirs while they use them.

    | cached entry | goes |
    |---|---|
    | `current`, `current.code` (its compiled modules) | no: the next gate runs it |
    | another hash, or its `.code`, used within `keep_hours` | no: another box's (a teammate's) |
    | another hash, or its `.code`, not used for longer | yes: a gate that needs it sends it again |
    | `<hash>.tmp<pid>`, `<hash>.code.tmp<pid>` older than `keep_hours` (a write cut short) | yes |
    | one whose age is unknown | as not used recently |
    | any other name (not nev's) | no |
    """
    ages = ages or {}
    limit = keep_hours * 3600

    def recent(n: str) -> bool:
        own = ages.get(n)
        agent = ages.get(n[:-len(".code")]) if n.endswith(".code") else None
        return any(a is not None and a < limit for a in (own, agent))

    return sorted(n for n in cached if n not in (current, current + ".code")
                  and layout.agent_entry_ok(n) and not recent(n))



# One entry of the lane's nev installs, as the survey sends it.
Install = InstallFacts


def decide_installs(installs: list[Install], keep: int) -> list[Decision]:
    """Which of the lane's nev installs go (pure).

    | the install | goes? |
    |---|---|
    | the current one (`~/.local/share/nev/current` leads to it) | no |
    | a process runs from it (a nev holds its in-use lock, or works or was started in it) | no |
    | among the `keep` last made current (the current one counted) | no |
    | older | yes |
    | one being built (`.tmp-*`) while an install runs | no; once none runs, yes (cut short) |
    | one being removed (`.gone-*`), no process in it | yes (a removal cut short) |
    | the venv of the time before versioned installs | as an older install |

    The lane checks again as it removes: an install whose lock a nev holds by then stays."""
    out = []
    ranked = sorted((i for i in installs if i.kind == "install"), key=lambda i: (-i.chosen, i.name))
    newest = {i.name for i in sorted(ranked, key=lambda i: not i.current)[:max(keep, 1)]}
    for i in sorted(installs, key=lambda i: i.name):
        if i.current:
            out.append(Decision(i.name, False, "the current install"))
        elif i.pids:
            users = ", ".join(f"{c} ({p})" for p, c in i.pids)
            out.append(Decision(i.name, False, f"in use by {users}"))
        elif i.kind == "tmp" and i.building:
            out.append(Decision(i.name, False, "being built by an install that runs"))
        elif i.kind == "install" and i.name in newest:
            out.append(Decision(i.name, False, f"one of the {keep} last made current"))
        else:
            why = {"tmp": "a build cut short", "gone": "a removal cut short",
                   "legacy": "the venv before versioned installs, not in use"}.get(
                       i.kind, f"older than the {keep} last made current, not in use")
            out.append(Decision(i.name, True, why))
    return out


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def primary_tracks(repo: Repo) -> tuple[set[str], str, str]:
    """Copy names of the primary checkout's worktrees (`lanes.payload.copy_name_of`: a worktree's
    folder name and the repository's key), the primary's own, and that key."""
    out = repo.git("worktree", "list", "--porcelain").stdout
    paths = [ln[9:] for ln in out.splitlines() if ln.startswith("worktree ")]
    common = str(repo.common_dir())
    names = [payload.copy_name_of(repo, p.rstrip("/").rsplit("/", 1)[-1], common) for p in paths]
    return set(names), names[0], layout.copy_key(names[0]) or ""


@dataclass
class LaneSweep:
    lane: Lane
    decisions: list[Decision] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)      # stale cached agents (stale_agents)
    writers: list[Decision] = field(default_factory=list)   # writer records (decide_writers)
    installs: list[Decision] = field(default_factory=list)  # nev's installs (decide_installs)
    installs_removed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    agents_removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    free_gb: float | None = None
    peak_rss_kb: dict = field(default_factory=dict)   # of the survey on the lane (and its largest du)


def as_json(s: LaneSweep) -> dict[str, object]:
    """One lane's sweep as `nev lane sweep --json` prints it: each decision (copies, writer
    records, installs: name, remove, why, size in bytes), the stale agents, and what was removed
    or failed (empty on a dry run)."""
    def rows(ds: list[Decision]) -> list[dict[str, object]]:
        return [{"name": d.name, "remove": d.remove, "why": d.why, "size": d.size} for d in ds]

    return {"lane": s.lane.index, "ssh": s.lane.ssh, "free_gb": s.free_gb,
            "copies": rows(s.decisions), "writers": rows(s.writers), "installs": rows(s.installs), "stale_agents": s.agents,
            "removed": s.removed, "installs_removed": s.installs_removed,
            "agents_removed": s.agents_removed, "failed": s.failed}


def survey(conn: Connection, lane: Lane, nas: str | None) -> SurveyResult:
    """The agent's facts about every copy under the lane root, and whether the `nas` folder is there."""
    try:
        req = SurveyRequest(root=lane.root, busy=busy.pattern().split("|"), nas=nas)
        return session.call(conn, lane, req, SURVEY_TIMEOUT, SurveyResult)
    except NevError as e:
        raise NevError(f"surveying {lane.root} on {conn.target} failed: {e}") from None


def sweep_lane(conn: Connection, lane: Lane, tracks: set[str], primary: str | None, track: str | None,
               dry_run: bool, nas: str | None, key: str) -> LaneSweep:
    nas_dir = nas or lane.shared_dir
    facts = survey(conn, lane, nas_dir)
    nas_ok = facts.nas
    result = LaneSweep(lane, decide(facts.entries, tracks, primary, track, nas_ok, key),
                       agents=stale_agents(facts.agents, agentpack.lane_agent().hash,
                                           facts.agent_ages,
                                           settings.get_float(settings.AGENT_KEEP_HOURS)),
                       free_gb=facts.free_gb, peak_rss_kb=facts.peak_rss_kb)
    gone = [d.name for d in result.decisions if d.remove]
    result.writers = decide_writers(facts.writers, set(gone), track, key)
    writers = [d.name[len(layout.WRITER):] for d in result.writers if d.remove]
    keep = settings.get_int(settings.INSTALLS_KEEP)
    found = list(facts.installs)
    result.installs = decide_installs(found, keep)
    old = [d.name for d in result.installs if d.remove]
    if dry_run or not (gone or result.agents or writers or old):
        return result
    try:
        req = RemoveRequest(root=lane.root, names=gone, agents=result.agents, writers=writers,
                            installs=old, nas=nas_dir if nas_ok else None,
                            stamp=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        ans = session.call(conn, lane, req, REMOVE_TIMEOUT * max(len(gone), 1), RemoveResult)
    except NevError as e:   # what was removed before it failed shows in the next survey
        result.failed = [f"{', '.join(gone + result.agents + writers + old)}: {e}"]
        return result
    result.installs_removed = list(ans.installs_removed)
    result.failed += [f"nev install {n}: {why}" for n, why in ans.installs_failed.items()]
    result.removed = [n for n in gone if n in ans.removed]
    result.removed += [layout.WRITER + n for n in ans.writers_removed]
    result.agents_removed = list(ans.agents_removed)
    result.failed += [f"{n}: {why}" for n, why in {**ans.failed, **ans.agents_failed}.items()]
    result.failed += [f"{layout.WRITER}{n}: {why}" for n, why in ans.writers_failed.items()]
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
    for d in s.writers:
        if d.remove:
            verb = "would remove" if dry_run else ("removed" if d.name in s.removed else "failed")
            lines.append(f"{s.lane.label}: {verb} writer record {d.name}: {d.why}")
        else:
            lines.append(f"{s.lane.label}: kept writer record {d.name}: {d.why}")
    for d in s.installs:
        if d.remove:
            done = "removed" if d.name in s.installs_removed else "failed"
            verb = "would remove" if dry_run else done
            lines.append(f"{s.lane.label}: {verb} nev install {d.name}: {d.why}")
        else:
            lines.append(f"{s.lane.label}: kept nev install {d.name}: {d.why}")
    for a in s.agents:
        verb = "would remove" if dry_run else ("removed" if a in s.agents_removed else "failed")
        lines.append(f"{s.lane.label}: {verb} cached lane agent {a[:12]}: not the one this nev "
                     "sends, not used within NEV_AGENT_KEEP_HOURS")
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
    lf = lanesfile.configured()
    # a --lane no lane has is a usage error (2)
    chosen = lanes if lanes is not None else lanesfile.pick(lf, lane_index)
    if not chosen:
        raise NevError(f"no lanes to sweep; the lanes file lists {len(lf.lanes)}")
    repo = repo or Repo(Path("."))
    try:
        tracks, primary, key = primary_tracks(repo)
    except GitError as e:
        raise NevError(f"{repo.path} is no git checkout ({e}); give the primary checkout whose worktrees "
                       "name the tracks to keep (--repo)") from None
    status = 0
    results = []
    for ln in chosen:
        try:
            with ln.connect() as conn:
                s = sweep_lane(conn, ln, tracks, primary, track, dry_run, None, key)
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


def gate_hook(lane: Lane, track: str, repo: Repo) -> None:
    """The gate's disk guard (`lanes.gate` calls it): sweep the lane that is short of space,
    every copy that may go by the tracks of `repo`, the repository being gated (its own primary
    checkout and worktrees; never the current folder's, which may be another repository's: its
    copies would all look orphaned); the guard then asks the lane for its free space again. A
    sweep that fails says so in one line and the guard decides as if nothing was freed."""
    try:
        sweep(lanes=[lane], say=ui.info, repo=repo)     # stderr: a gate's stdout is its command's
    except NevError as e:
        ui.info(f"{lane.label}: the disk guard's sweep failed: {e}")


def after_landing(track: str, repo: Repo | None = None) -> int:
    """After a landing: sweep that track's copies only. A failure is one line and undoes nothing."""
    try:
        status, _ = sweep(track=track, repo=repo)
    except NevError as e:
        print(f"sweep after landing {track}: failed: {e}", flush=True)
        return 1
    return status


# ---------------------------------------------------------------- retention: archives and mirror refs


Archive = ArchiveEntry   # one entry of the share's archive folders (`lanes/agent/retention.py`)


def decide_archives(entries: list[Archive], now: float, keep_days: float) -> list[tuple[Archive, bool, str]]:
    """Which archives go (pure): (archive, remove, why).

    | the archive | goes? |
    |---|---|
    | the newest of its kind and name (worktree, job) | kept, whatever its age |
    | younger than `keep_days` | kept |
    | older | removed |
    """
    newest: dict[tuple[str, str], Archive] = {}
    for a in entries:
        cur = newest.get((a.kind, a.name))
        if cur is None or (a.mtime, a.entry) > (cur.mtime, cur.entry):
            newest[(a.kind, a.name)] = a
    out = []
    for a in sorted(entries, key=lambda a: (a.kind, a.name, a.mtime, a.entry)):
        age = (now - a.mtime) / 86400
        if newest[(a.kind, a.name)] is a:
            out.append((a, False, f"the newest of {a.kind}/{a.name}"))
        elif age < keep_days:
            out.append((a, False, f"{age:.1f} days old, within {keep_days:g}"))
        else:
            out.append((a, True, f"{age:.1f} days old, beyond {keep_days:g}"))
    return out


def sweep_archives(keep_days: float, dry_run: bool = False, lanes: list[Lane] | None = None,
                   say: Callable[[str], None] = _stdout) -> tuple[int, list[str]]:
    """Prune the share's archives through the first lane that answers (every lane mounts the same
    share): one line per removed archive and a total. (exit status, paths removed)."""
    chosen = lanes if lanes is not None else lanesfile.configured().lanes
    for ln in chosen:
        try:
            with ln.connect() as conn:
                facts = session.call(conn, ln, ArchivesRequest(shared=ln.shared_dir), SURVEY_TIMEOUT,
                                     ArchivesResult)
                plan = decide_archives(facts.entries, time.time(), keep_days)
                gone = [a for a, remove, _ in plan if remove]
                if dry_run or not gone:
                    for a in gone:
                        say(f"would remove {a.label} ({human(a.size)})")
                    say(f"archives on {ln.shared_dir} (through {ln.label}): {len(gone)} of {len(plan)} "
                        f"{'would go' if dry_run else 'go'}; the newest per worktree or job stays")
                    return 0, []
                refs = [ArchiveRef(a.kind, a.name, a.entry) for a in gone]
                drop = DropArchivesRequest(shared=ln.shared_dir, entries=refs)
                ans = session.call(conn, ln, drop, REMOVE_TIMEOUT, DropArchivesResult)
        except (SshError, NevError) as e:
            say(f"{ln.label}: archives not pruned: {e}")
            continue
        for a in gone:
            say(f"removed {a.label} ({human(a.size)})")
        for path, why in ans.failed.items():
            say(f"failed {path}: {why}")
        say(f"archives on {ln.shared_dir} (through {ln.label}): removed {len(ans.removed)} of {len(plan)}, "
            f"older than {keep_days:g} days; the newest per worktree or job stays")
        return (1 if ans.failed else 0), list(ans.removed)
    raise NevError("no lane answered; the archives were not pruned")


def prune_refs(conn: Connection, lane: Lane, mirrors: list[str],
               repo: Repo | None = None) -> dict[str, MirrorPrune]:
    """Remove from each mirror on the lane the job/* and result/* branches the forge no longer has,
    asking the forge from the lane (its URL and credential as a gate's mirror fetch gets them).
    Per mirror: the refs pruned and those kept (and why), or missing."""
    lf = lanesfile.configured(require=False)
    forge = forge_for(repo or Repo(Path(".")), lf)
    if not forge.lane_url:
        raise NevError("no forge URL for the lanes (NEV_LANE_GIT_URL or the lanes file's git_url); nothing pruned")
    req = PruneRefsRequest(mirrors=mirrors, git_url=forge.lane_url, cred=Cred.of(forge.lane_cred()))
    return session.call(conn, lane, req, SURVEY_TIMEOUT, PruneRefsResult).mirrors
