"""`nev rig status`: the snapshot as a table (alias, status, held for, last answer, age).

`rows`, `summary` and `render` are pure; `load_local` and `load_from_lane` fetch the
snapshot (the lane's over SSH, read with `cat` through the one SSH module) and parse it into the
typed record (`lanes.base.inventory_record.Snapshot`) at that edge. The summary is `nev rig status
--json`'s document (`Summary`), also read by the metrics, the dashboard and `nev doctor`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path

from bench.readiness import parse_time
from lanes import lanesfile
from lanes.base import jsonfile, notify, settings
from lanes.base.errors import ConfigError, NevError
from lanes.base.inventory_record import RowJson, Snapshot, Summary
from lanes.base.isotime import age


def _since(value: str | None, now: dt.datetime) -> float | None:
    t = parse_time(value)
    return None if t is None else (now - t).total_seconds()


def rows(snap: Snapshot, now: dt.datetime) -> list[RowJson]:
    """One row per declared alias, retired ones last, for people and for --json: how long its
    status has held, when it last answered, its last error while not ready."""
    out: list[RowJson] = []
    for name, a in sorted(snap.aliases.items(), key=lambda kv: (kv[1].status == "retired", kv[0])):
        status = a.status or "unknown"
        out.append({
            "alias": name, "status": status,
            "held_for_s": None if status == "retired" else _since(a.since, now),
            "since": a.since,
            "last_answer": a.last_answer,
            "last_answer_ago_s": _since(a.last_answer, now),
            "latency_s": a.last_answer_latency_s,
            "last_error": a.last_error if status != "ready" else None,
            "retired": a.retired,
            "pool": a.pool,
        })
    return out


def notify_aliases(snap: Snapshot, now: dt.datetime,
                   environ: Mapping[str, str] | None = None) -> list[str]:
    """The webhook told of each alias not ready for NEV_NOTIFY_ALIAS_DOWN_S or longer (once per
    incident, lanes/base/notify.py) and of each ready one that was; the aliases held down."""
    limit = settings.get_float(settings.NOTIFY_ALIAS_DOWN_S, environ)
    held = []
    for r in rows(snap, now):
        held_for = r["held_for_s"]
        if r["status"] == "retired" or held_for is None:
            continue
        if r["status"] == "ready":
            notify.up(notify.Kind.ALIAS_DOWN, r["alias"], f"ready since {r['since']}", environ)
        elif held_for >= limit:
            since = parse_time(r["since"])
            notify.down(notify.Kind.ALIAS_DOWN, r["alias"],
                        f"{r['status']} for {age(held_for)} (since {r['since']}); "
                        f"last error: {r['last_error'] or '-'}",
                        since.timestamp() if since else None, environ)
            held.append(r["alias"])
    return held


def summary(snap: Snapshot, now: dt.datetime, source: str) -> Summary:
    return {
        "snapshot": source,
        "written_at": snap.written_at,
        "probed_at": snap.probed_at,
        "snapshot_age_s": _since(snap.probed_at, now),
        "collected_at": snap.collected_at,
        "collected_age_s": _since(snap.collected_at, now),
        "aliases": rows(snap, now),
        "hosts": [{"name": n, "status": h.status, "role": h.role, "url": h.url, "error": h.error}
                  for n, h in sorted(snap.hosts.items())],
    }


def render(s: Summary) -> str:
    head = ("alias", "status", "held for", "last answer", "latency", "last error")
    table = [head]
    for r in s["aliases"]:
        if r["status"] == "retired":
            held = f"since {r['retired']}"
        else:
            held = age(r["held_for_s"])
        last = "-" if r["last_answer_ago_s"] is None else f"{age(r['last_answer_ago_s'])} ago"
        lat = "-" if r["latency_s"] is None else f"{r['latency_s']:.2f} s"
        table.append((r["alias"], r["status"], held, last, lat, (r["last_error"] or "")[:90]))
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table]
    lines += replica_lines(s.get("replicas"))
    probe_age = "never probed" if s["snapshot_age_s"] is None else f"probed {age(s['snapshot_age_s'])} ago"
    coll = "never collected" if s["collected_age_s"] is None else f"collected {age(s['collected_age_s'])} ago"
    lines.append(f"snapshot age: {probe_age}, hosts {coll} ({s['snapshot']})")
    if s["snapshot_age_s"] is None and s["aliases"]:
        lines.append("aliases unknown: nothing probes this snapshot; `nev rig services "
                     "install` runs the probe on the collector lane (or `nev rig probe` once "
                     "where it lives)")
    if s["hosts"]:
        # The hosts whose inventory answered the collector (mDNS advertisers and seeds), not the
        # serving replicas above: a down one is an advertiser that stopped answering (a host
        # SIGKILLed stays listed until its mDNS record expires), with the collector's reason.
        down = [h for h in s["hosts"] if h["status"] != "up"]
        lines.append(f"inventory hosts: {len(s['hosts']) - len(down)} up"
                     + (", down: " + ", ".join(f"{h['name']} ({h['error'] or 'no answer'})"[:120]
                                               for h in down) if down else ""))
    return "\n".join(lines)


def replica_lines(reps: list[dict[str, object]] | str | None) -> list[str]:
    """The serving replicas as HAProxy has them (ready, drained, stopped, down), or why unknown."""
    if reps is None:
        return []
    if isinstance(reps, str):
        return [f"replicas: unknown ({reps})"]
    table = [("replica", "server", "state", "last action")]
    table += [(str(r["replica"]), str(r["server"]), str(r["state"]), str(r["by"])) for r in reps]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    return [""] + ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table] + [""]


def parse(text: str, source: str) -> Snapshot:
    """The snapshot read from `source` (a file, or a lane's): NevError in one line naming the
    source (and the field) when it is not JSON, not an object or holds a field of the wrong type."""
    try:
        data = jsonfile.parse(text, source, "inventory snapshot")
        if not isinstance(data, dict):
            raise NevError(f"inventory snapshot {source} is not a JSON object; "
                           "run `nev rig probe` to rewrite it")
        return Snapshot.from_json(data, source)
    except ConfigError as e:
        raise NevError(f"inventory snapshot {e.message.removesuffix('; fix the file')}; "
                       "run `nev rig probe` to rewrite it") from None


def load_local(path: Path) -> Snapshot:
    text = jsonfile.read_text(path, "inventory snapshot", "run `nev rig collect` and `nev rig probe` "
                              "(NEV_INVENTORY names the file), or read the collector lane's with "
                              "--lane N or NEV_INVENTORY_LANE=N")
    return parse(text, str(path))


def lane_snapshot_path() -> str:
    """The snapshot's path on a lane: the lane's own default (NEV_INVENTORY here may name a
    local file), relative to the lane user's home for `~/`."""
    raw = settings.value(settings.INVENTORY, {})
    return raw[2:] if raw.startswith("~/") else raw


def load_from_lane(index: int) -> tuple[Snapshot, str]:
    lane = lanesfile.chosen(index)
    path = lane_snapshot_path()
    with lane.connect() as conn:
        res = conn.run(["cat", "--", path])
    source = f"{lane.label}:{path}"
    if res.exit_status != 0:
        raise NevError(f"no inventory snapshot at {source}: run `nev rig probe` on that lane")
    return parse(res.stdout.decode("utf-8", "replace"), source), source


def inventory_lane(environ: Mapping[str, str] | None = None) -> int | None:
    """NEV_INVENTORY_LANE as a lane index (None when unset)."""
    raw = settings.given(settings.INVENTORY_LANE, environ)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"NEV_INVENTORY_LANE={raw!r} is not a lane index; "
                          "set it to 0, 1, ...") from None


def snapshot_lane(lane_index: int | None, environ: Mapping[str, str] | None = None) -> int | None:
    """Whose snapshot a reader uses (None: the local file NEV_INVENTORY): --lane N; else, when
    NEV_INVENTORY names no file here, NEV_INVENTORY_LANE's lane."""
    if lane_index is not None:
        return lane_index
    from rig.inventory import inventoryfile

    if settings.given(settings.INVENTORY_LANE, environ) is None:
        return None
    if inventoryfile.default_path().exists():
        return None
    return inventory_lane(environ)


def load(lane_index: int | None) -> tuple[Snapshot, str]:
    """The snapshot `nev rig status` (and `metrics`, the dashboard) reads: lane N's over SSH with
    --lane N; else NEV_INVENTORY here; else, when that file is missing, NEV_INVENTORY_LANE's."""
    lane = snapshot_lane(lane_index)
    if lane is None:
        from rig.inventory import inventoryfile

        path = inventoryfile.default_path()
        return load_local(path), str(path)
    return load_from_lane(lane)


def with_replicas(summary: Summary) -> Summary:
    """The serving replicas' states (HAProxy's runtime API) when the rig file declares serving
    roles: a drained or stopped replica shows as such, and an alias an operator stopped is not
    failing."""
    from rig import rigfile
    from rig.serving import state
    from rig.snapshot.context import notes_dir

    path = rigfile.default_path()
    if not path.exists():
        return summary
    try:
        rig_file = rigfile.load(path)
        if not rig_file.serving:
            return summary
        return state.overlay(summary, state.gather(rig_file, notes_dir()))
    except NevError as e:
        summary["replicas"] = f"HAProxy not read: {e.message}"
        return summary
