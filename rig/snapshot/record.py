"""`nev rig snapshot` and `nev rig snapshots`: capture every role, store it twice, log it."""

from __future__ import annotations

from collections.abc import Callable

from lanes.base.errors import NevError
from lanes.base.ui import info
from rig.snapshot import changelog
from rig.snapshot.capture import HostState, capture_host, sha256
from rig.snapshot.context import Context
from rig.snapshot.diff import learn_secrets
from rig.snapshot.hosts import Hosts
from rig.snapshot.store import HostStore, Manifest, check_label


def take(ctx: Context, label: str, role_names: tuple[str, ...], say: Callable[[str], None]) -> Manifest:
    check_label(label)
    _something_to_take(ctx)
    with ctx.store.taking():     # a second `nev rig snapshot SAME` waits here, then is refused
        return _take(ctx, label, role_names, say)


def _something_to_take(ctx: Context) -> None:
    """A rig file with no roles has nothing to record: refused before a label is used up."""
    if not ctx.rig.roles:
        raise NevError(f"no roles in {ctx.rig.path}: a snapshot would record nothing, and the "
                       "label would be used up; declare the roles (hosts, files, commands) first "
                       "(docs/snapshot.md)")


def plan(ctx: Context, label: str, role_names: tuple[str, ...]) -> list[str]:
    """What `take` would record (`nev rig snapshot --dry-run`): read from the rig file and the
    local store only, no host reached."""
    check_label(label)
    _something_to_take(ctx)
    lines = []
    if ctx.store.has_label(label):
        lines.append(f"a snapshot labelled {label} exists: `nev rig snapshot {label}` would refuse")
    for role in ctx.roles(role_names):
        for host in role.hosts:
            lines.append(f"would record {role.name} on {host} under {label}: "
                         f"{len(role.files)} file(s), {len(role.commands)} command(s)")
            lines += [f"  file {f}" for f in role.files]
            lines += [f"  command {c}" for c in role.commands]
    return lines


def _take(ctx: Context, label: str, role_names: tuple[str, ...], say: Callable[[str], None]) -> Manifest:
    if ctx.store.has_label(label):
        try:
            old = ctx.store.read_manifest(label)
            when = f" (taken {old.time} by {old.who})"
        except NevError:
            when = " (damaged)"
        raise NevError(f"a snapshot labelled {label} exists{when}; labels are never overwritten: choose a new one")
    roles = ctx.roles(role_names)
    states: dict[str, dict[str, HostState]] = {}
    with Hosts(ctx.rig) as hosts:
        for role in roles:
            states[role.name] = {}
            for host in role.hosts:
                info(f"snapshot {label}: {role.name} on {host}")
                states[role.name][host] = capture_host(hosts.get(host), host, role.files, role.commands)
        learn_secrets(states, ctx.rig.roles)
        m = Manifest(label=label, time=changelog.now(), who=changelog.who(), roles=states)
        by_host: dict[str, dict[str, HostState]] = {}
        for role_name, hs in states.items():
            for host, s in hs.items():
                by_host.setdefault(host, {})[role_name] = s
        stores = {h: HostStore(hosts.get(h), ctx.rig.host_store) for h in by_host}
        for hs_ in stores.values():
            hs_.check(ctx.nas)
        for h, st in stores.items():
            st.save(label, by_host[h], {"time": m.time, "who": m.who})
    new = 0
    for hs in states.values():
        for s in hs.values():
            for data in s.blobs.values():
                if not ctx.store.has_blob(sha256(data)):
                    new += 1
                ctx.store.put_blob(data)
    earlier = ctx.store.manifests()
    previous = earlier[-1] if earlier else None
    key = m.content_key()
    same = next((e.label for e in reversed(earlier) if e.content_key() == key), None)
    ctx.store.write_manifest(m, new=True)
    changelog.append(ctx.store.notes, changelog.snapshot_entry(m, previous, same))
    note = f"; same content as {same}, storage shared" if same else ""
    say(f"snapshot {label}: {len(states)} role(s), {m.file_count()} file(s), {new} new object(s), "
        f"kept in {ctx.store.root} and on {len(stores)} host(s) under {ctx.rig.host_store}{note}")
    return m


def listing(ctx: Context) -> tuple[list[dict[str, object]], list[str]]:
    """One row per readable label, and one line per damaged label (`nev rig snapshots` names each
    and exits 1)."""
    good, damaged = ctx.store.scan()
    return ([{"label": m.label, "time": m.time, "who": m.who, "roles": list(m.roles), "files": m.file_count()}
             for m in good], damaged)
