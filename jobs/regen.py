"""Regeneration, unattended: for each function `nev provenance stale` says to regenerate, the job
that regenerates it (a best-of-N batch seeded with the current version's failures, then the
verify gate; landed by the poll like any job), at most NEV_REGEN_MAX at once, never twice for the
same input change. `regen.json` in the state folder records each change key -> the job started
for it and why; the tick runs `tick_regen` when NEV_PROVENANCE_REGEN is set (or tracks.json's
specWatch.pollEnv sets it), a person `nev provenance regen [FUNCTION]`. The jobs are spread over
the configured lanes, each to the least busy (`pick_lane`); with one lane, or Dagu's distributed
mode on, all go to the Dagu lane (docs/provenance.md says why not to the distributed workers).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench import provenance as prov
from bench import provenance_tree
from jobs import records
from lanes.base import jsonfile, settings
from lanes.base.errors import ConfigError, NevError
from lanes.base.gitrun import Repo
from lanes.base.ui import info

STATE_FILE = "regen.json"


@dataclass(frozen=True)
class Plan:
    submit: list[prov.Finding]
    lines: list[str]


def job_name(f: prov.Finding) -> str:
    return f"regen-{f.function.replace('_', '-')}-{f.key()[:10]}"


def plan(
    findings: Sequence[prov.Finding],
    started: Mapping[str, Mapping[str, Any]],
    running: int,
    max_at_once: int,
    only: str | None = None,
) -> Plan:
    """Which findings get a regeneration job now (pure), and one line for each that does not:

    | finding | → |
    |---|---|
    | another function than `only` | nothing |
    | regenerate, its change key in `started` | skip: started for this change (never twice) |
    | regenerate, `running` + submissions now at `max_at_once` | wait for a slot (next tick) |
    | regenerate otherwise | submit |
    | redump, its change key in `started` | a line: re-scored for this change already |
    | redump otherwise | a line: re-dump the ground truth and re-score (`redumped` does) |
    | incomplete | a line: the record cannot say what changed |
    """
    out: list[prov.Finding] = []
    lines: list[str] = []
    for f in findings:
        if only is not None and f.function != only:
            continue
        why = "; ".join(r.text for r in f.reasons)
        if f.action == prov.REDUMP and f.key() in started:
            lines.append(f"{f.function}: re-dumped and re-scored for this change already ({why})")
        elif f.action == prov.REDUMP:
            lines.append(f"{f.function}: re-dump the ground truth and re-score ({why})")
        elif f.action == prov.INCOMPLETE:
            lines.append(f"{f.function}: {why}; not regenerated (nothing says what changed)")
        elif f.key() in started:
            lines.append(
                f"{f.function}: already started as job {started[f.key()].get('job')} "
                "for this change"
            )
        elif running + len(out) >= max_at_once:
            lines.append(
                f"{f.function}: waits: {running + len(out)} regeneration job(s) running "
                f"(NEV_REGEN_MAX {max_at_once})"
            )
        else:
            out.append(f)
    return Plan(out, lines)


def track_spec(function: str) -> str:
    """The track a function's regeneration lands on: `specs/<function>.md` on main, whose
    `touches:` name the function's generated files (jobs/spec.py)."""
    return f"specs/{function}.md"


def manifest_for(
    f: prov.Finding, entry: prov.Entry, base: str, batch: str, floor: str
) -> dict[str, Any]:
    """The regeneration job's manifest (pure): the batch stage (NEV_REGEN_BATCH with {function}
    and {floor}: the floor file, protected, is put back; floors rise on main after the landing),
    then the verify gate."""
    recorded = entry.get("models")
    models = [
        m.get("alias")
        for m in (recorded if isinstance(recorded, list) else [])
        if isinstance(m, Mapping) and m.get("alias")
    ]
    # the regen job's stage as a Dagu workflow step: a YAML document built to be dumped
    stage: dict[str, Any] = {
        "name": "gen",
        "kind": "batch",
        "command": batch.format(function=f.function, floor=floor),
    }
    if models:
        stage["models"] = models
    return {
        "name": job_name(f),
        "base": base,
        "spec": track_spec(f.function),
        "stages": [stage, {"name": "verify", "kind": "verify"}],
    }


def state_path(env: Mapping[str, str]) -> Path:
    return records.path(env).with_name(STATE_FILE)


@contextmanager
def state(env: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """regen.json under its lock: change key -> {job, function, reasons, started_at}; written
    back when the block ends."""
    p = state_path(env)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(p) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = jsonfile.load(p, "regeneration state file") if p.exists() else {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"{p}: must hold a JSON object; move it away (the next tick starts it anew)"
            )
        before = json.dumps(data, sort_keys=True)
        yield data
        if json.dumps(data, sort_keys=True) != before:
            jsonfile.write_atomic(p, data, mode=0o600)
    finally:
        os.close(fd)


def running(started: Mapping[str, Mapping[str, Any]], recs: records.Records) -> int:
    """The started regeneration jobs that have not ended (landed, failed, not landed)."""
    n = 0
    for s in started.values():
        if not s.get("job"):  # a re-score that started no job
            continue
        rec = recs.jobs.get(str(s.get("job")))
        if rec is None or not rec.status.final:
            n += 1
    return n


#: sends a manifest from the checkout to a lane's Dagu (None: the default lane); its exit code
Submit = Callable[[Path, Path, int | None], int]
#: the lanes regeneration jobs are spread over ([None]: one, the default lane)
Spread = Callable[[Mapping[str, str]], list[int | None]]
#: re-dumps the ground truth and re-scores every generated function: their floors' judgements
Rescore = Callable[[Path, Mapping[str, str]], list[Any]]


def _rescore(root: Path, env: Mapping[str, str]) -> list[Any]:
    """`nev scores` on a build lane: its corpora built (or found) under the key of the lane's
    browser versions, i.e. the ground truth re-dumped; every function judged against its floor."""
    from bench import floors, scores

    req = floors.scoring_for(root, env)
    return floors.evaluate(req, lambda r: scores.lane_scorer(r, env))


def after_rescore(f: prov.Finding, judgement: Any | None) -> tuple[prov.Finding | None, str]:
    """What a re-scored corpus change becomes (pure): a regeneration when the function no longer
    holds its floor (the reason added), nothing when it holds it; and the line that says so."""
    if judgement is None:
        return None, f"{f.function}: not scored after the re-dump; nothing regenerated"
    if not judgement.failed:
        return None, (
            f"{f.function}: holds its floor after the re-dump ({judgement.reason}); "
            "nothing regenerated"
        )
    why = prov.Reason(
        "floor",
        f.function,
        None,
        judgement.status,
        f"after the re-dump it no longer holds its floor: {judgement.reason}",
    )
    return (
        prov.Finding(f.function, prov.REGENERATE, (*f.reasons, why), f.section),
        f"{f.function}: no longer holds its floor after the re-dump ({judgement.reason})",
    )


def redumped(
    findings: list[prov.Finding],
    started: dict[str, Any],
    root: Path,
    env: Mapping[str, str],
    rescore: Rescore,
    only: str | None,
) -> list[prov.Finding]:
    """`findings` with each corpus change not re-scored yet re-scored (once for all of them):
    recorded in `started` under its change key, and replaced by a regeneration when the function
    no longer holds its floor. A re-score that cannot run (no lane) is a line; the next run
    tries again."""
    due = [
        f
        for f in findings
        if f.action == prov.REDUMP and f.key() not in started and only in (None, f.function)
    ]
    if not due:
        return findings
    try:
        judged = {j.function: j for j in rescore(root, env)}
    except NevError as e:
        info(f"provenance: re-dump and re-score: {e.message}; the next run tries again")
        return findings
    out = [f for f in findings if f not in due]
    for f in due:
        regen_f, line = after_rescore(f, judged.get(f.function))
        info(f"provenance: {line}")
        started[f.key()] = {
            "job": None,
            "function": f.function,
            "reasons": [r.text for r in f.reasons],
            "rescored": line,
            "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        if regen_f is not None:
            out.append(regen_f)
    return out


def _submit(manifest: Path, repo: Path, lane: int | None) -> int:
    from jobs.submit import submit

    return submit(manifest, lane_flag=lane, repo_path=repo)


def spread_over(indices: Sequence[int], distributed: bool, first: int = 0) -> list[int | None]:
    """The lanes regeneration jobs go to (pure): every configured lane, the Dagu lane (`first`)
    first and the others after it in turn, each job to the least busy (`pick_lane`); one lane, or
    Dagu's distributed mode on (its other lanes run only a worker, no Dagu to submit to), the
    default lane alone ([None])."""
    if distributed or len(indices) < 2:
        return [None]
    at = indices.index(first) if first in indices else 0
    return [*indices[at:], *indices[:at]]


def pick_lane(spread: Sequence[int | None], busy: Mapping[int | None, int]) -> int | None:
    """The lane of the next regeneration job (pure): the one with the fewest regeneration jobs
    not yet ended, the earliest in `spread` among equals (so idle lanes take turns)."""
    return min(spread, key=lambda lane: (busy.get(lane, 0), spread.index(lane)))


def busy_lanes(
    started: Mapping[str, Mapping[str, Any]], recs: records.Records
) -> dict[int | None, int]:
    """Per lane (regen.json's `lane`; None: the default lane), the started regeneration jobs that
    have not ended (as `running` counts them)."""
    out: dict[int | None, int] = {}
    for s in started.values():
        if not s.get("job"):
            continue
        rec = recs.jobs.get(str(s.get("job")))
        if rec is None or not rec.status.final:
            lane = s.get("lane") if isinstance(s.get("lane"), int) else None
            out[lane] = out.get(lane, 0) + 1
    return out


def _lanes(spread: Spread, env: Mapping[str, str]) -> list[int | None]:
    """`spread`'s lanes; the default lane alone when they cannot be told (its submit says why)."""
    try:
        return spread(env) or [None]
    except NevError as e:
        info(f"provenance: which lanes run Dagu: {e.message}; submitting to the default lane")
        return [None]


def _spread(env: Mapping[str, str]) -> list[int | None]:
    """The configured lanes, unless there is one or the Dagu lane runs distributed (its layout
    keeps Dagu's data on the NAS: `dagu.service.opened`)."""
    from dagu import service
    from lanes import lanesfile

    indices = [lane.index for lane in lanesfile.configured().lanes]
    if len(indices) < 2:
        return [None]
    with service.opened(None) as ld:
        distributed = ld.layout.shared is not None
        first = ld.lane.index
    return spread_over(indices, distributed, first)


def regen(
    repo_path: Path,
    env: Mapping[str, str],
    only: str | None = None,
    submit: Submit = _submit,
    again: bool = False,
    rescore: Rescore = _rescore,
    spread: Spread = _spread,
) -> int:
    """Submit the regeneration jobs `stale` asks for now; each one recorded before it is sent (a
    crash mid-submit leaves it recorded: never twice), and dropped again when the submit fails (the
    next run tries it). `again` (a person, for `only`): the change's earlier job is forgotten
    first (it failed, say), and one more is submitted. Each job goes to the least busy of the
    lanes `spread` gives (Dagu's distributed mode off: every configured lane). Exit: 0, or the
    worst failed submit."""
    repo = Repo(Repo(repo_path).toplevel())
    entries, findings = stale_here(repo.path, env)
    by_fn = {e.function: e for e in entries}
    if only is not None and only not in by_fn:
        raise NevError(f"no generated function `{only}`; see `nev provenance list`", 2)
    base = repo.rev("main")
    folder = state_path(env).with_name("regen")
    engine = settings.value(settings.ENGINE_DIR, env).rstrip("/")
    worst = 0
    with state(env) as started:
        for f in findings:
            if again and f.function == only and f.key() in started:
                earlier = started[f.key()].get("job")
                info(f"provenance: {only}: submitting again (earlier: job {earlier})")
                del started[f.key()]
        findings = redumped(findings, started, repo.path, env, rescore, only)
        untracked = _untracked(repo, base, findings, only)
        p = plan(
            [f for f in findings if f.function not in untracked],
            started,
            running(started, records.read(env)),
            settings.get_int(settings.REGEN_MAX, env),
            only,
        )
        for line in p.lines:
            info(f"provenance: {line}")
        lanes = _lanes(spread, env) if p.submit else [None]
        busy = busy_lanes(started, records.read(env)) if p.submit else {}
        for f in p.submit:
            floor = f"{engine}/crates/layout/src/generated/{f.function}.floor.json"
            m = manifest_for(
                f, by_fn[f.function], base, settings.value(settings.REGEN_BATCH, env), floor
            )
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{m['name']}.yaml"
            path.write_text(yaml.safe_dump(m, sort_keys=False), encoding="utf-8")
            why = [r.text for r in f.reasons]
            lane = pick_lane(lanes, busy)
            started[f.key()] = {
                "job": m["name"],
                "function": f.function,
                "reasons": why,
                "lane": lane,
                "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            }
            jsonfile.write_atomic(state_path(env), started, mode=0o600)
            on = "" if lane is None else f" on lane {lane}"
            info(
                f"provenance: {f.function}: regenerating as job {m['name']}{on}: {'; '.join(why)}"
            )
            try:
                rc = submit(path, repo.path, lane)
            except NevError as e:
                rc = int(e.exit_code)
                info(
                    f"provenance: {f.function}: the submit failed: {e.message}; "
                    "the next run tries again"
                )
            if rc != 0:
                del started[f.key()]
                jsonfile.write_atomic(state_path(env), started, mode=0o600)
                worst = max(worst, rc)
            else:
                busy[lane] = busy.get(lane, 0) + 1
    return worst


def _untracked(
    repo: Repo, base: str, findings: Sequence[prov.Finding], only: str | None
) -> set[str]:
    """The functions to regenerate whose track spec is not on main (each said on a line)."""
    out = {
        f.function
        for f in findings
        if f.action == prov.REGENERATE and repo.show(base, track_spec(f.function)) is None
    }
    for fn in sorted(out):
        if only in (None, fn):
            info(
                f"provenance: {fn}: no track spec {track_spec(fn)} on main (its touches: the "
                "function's generated files); not regenerated: add it"
            )
    return out


def stale_here(
    root: Path, env: Mapping[str, str], rev: str | None = "main"
) -> tuple[list[prov.Entry], list[prov.Finding]]:
    """The index of the checkout at `root` as `rev` holds it (None: the working tree), and what
    that tree invalidates."""
    tree = provenance_tree.Tree(root, rev)
    engine = settings.value(settings.ENGINE_DIR, env)
    entries = provenance_tree.load_index(tree, engine)
    cur = provenance_tree.current_of(
        entries,
        tree,
        engine,
        settings.value(settings.SPECS_DIR, env),
        settings.path_under(settings.CORPUS_DIR, root, env),
    )
    return entries, prov.stale(entries, cur)


def tick_regen(repo_path: Path, env: Mapping[str, str]) -> int:
    """The tick's part (only with NEV_PROVENANCE_REGEN set): regen, its failure one line."""
    if not settings.get_flag(settings.PROVENANCE_REGEN, env):
        return 0
    try:
        return regen(repo_path, env)
    except NevError as e:
        info(f"tick: provenance: {e.message}")
        return int(e.exit_code)
