"""`nev rig ...`: parses arguments and dispatches to the rig modules."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from lanes.base.laneopt import Default, lane_option
from rig.forward_cli import forward
from rig.services_cli import services
from rig.serving_cli import COMMANDS as SERVING_COMMANDS

if TYPE_CHECKING:
    from rig.snapshot.changelog import Entry


@click.group("rig")
def rig() -> None:
    """The rig as a whole: inventory, probes, status, snapshots, capacity, dashboard, port forwards."""


@rig.command("advertise")
@click.option("--inventory", type=click.Path(dir_okay=False),
              help="This host's declared inventory (JSON: name, role(s), hardware_class, gpus, serving, models, pools).")
@click.option("--interface", help="Address to advertise on (never all interfaces); default NEV_MDNS_INTERFACE.")
@click.option("--port", type=int, help="HTTP inventory port (default NEV_INVENTORY_PORT, 8787).")
@click.option("--name", help="Instance name (default: the file's name, else hostname-address).")
def advertise(inventory: str | None, interface: str | None, port: int | None, name: str | None) -> int:
    """Advertise this host over mDNS and serve its HTTP inventory until stopped.

    SIGTERM or Ctrl-C unregisters the service (the mDNS goodbye) and exits 0.
    """
    from pathlib import Path

    from lanes.base import settings
    from rig.inventory import advertise as adv

    return adv.run(interface or settings.get(settings.MDNS_INTERFACE),
                   Path(inventory) if inventory else None,
                   port if port is not None else settings.get_int(settings.INVENTORY_PORT), name)


@rig.command("collect")
@click.option("--timeout", type=float, default=3.0, show_default=True, help="Seconds to browse mDNS.")
@click.option("--interface", help="Address to browse on (never all interfaces); default NEV_MDNS_INTERFACE.")
@click.option("--expect", type=int, help="Stop browsing early once this many hosts are found.")
@click.option("--every", type=float, help="Keep browsing and collect every S seconds.")
@click.option("--rounds", type=int, help="With --every: stop after N rounds.")
@click.option("--ansible", is_flag=True,
              help="Print an Ansible --list inventory (groups by role; reached through the jump host).")
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot's hosts as JSON.")
def collect(timeout: float, interface: str | None, expect: int | None, every: float | None,
            rounds: int | None, ansible: bool, as_json: bool) -> int:
    """Browse, fetch every inventory, aggregate into the inventory snapshot (NEV_INVENTORY).

    A host listed by mDNS whose HTTP inventory does not answer is marked down.
    """
    from bench import folknet
    from lanes.base import settings
    from lanes.base.ui import emit_json, info
    from rig import rigfile
    from rig.inventory import collect as col
    from rig.inventory import inventoryfile

    rig_path = rigfile.default_path()
    seeds = rigfile.load(rig_path).seeds if rig_path.exists() else []
    decl_path = folknet.default_path()
    declared = folknet.load(decl_path) if decl_path.exists() else None
    if declared is None:
        info(f"no declared aliases at {decl_path} (NEV_FOLKNET_FILE): collecting hosts only")
    snap = col.run(interface or settings.get(settings.MDNS_INTERFACE), seeds, inventoryfile.default_path(),
                   declared, timeout, expect, every, rounds)
    if ansible:
        from rig.inventory import reach

        emit_json(col.ansible(snap, reach.load()))
    elif as_json:
        emit_json({n: h.to_json() for n, h in snap.hosts.items()})
    return 0


@rig.command("probe")
@click.option("--every", type=float, help="Repeat every S seconds (300 on the rig: NEV_PROBE_EVERY).")
@click.option("--rounds", type=int, help="With --every: stop after N rounds.")
@click.option("--timeout", type=float, help="Seconds per alias probe (default NEV_PROBE_TIMEOUT).")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: one line per round, {\"round\": N, \"aliases\": {alias: state}}.")
def probe(every: float | None, rounds: int | None, timeout: float | None, as_json: bool) -> int:
    """One real completion per alias (max_tokens 1); record status, since, last answer.

    Status changes after NEV_PROBE_FAILS failures or NEV_PROBE_OKS answers in a row.
    """
    import json

    from bench import folknet, gateway
    from lanes.base import settings
    from rig.inventory import inventoryfile
    from rig.inventory import probe as pr

    t = timeout if timeout is not None else settings.get_float(settings.PROBE_TIMEOUT)
    def line(n: int, aliases: dict[str, object]) -> None:
        click.echo(json.dumps({"round": n, "aliases": aliases}, sort_keys=True, default=str))

    return pr.run(inventoryfile.default_path(), folknet.load(folknet.default_path()), gateway.endpoint_from_settings(),
                  t, pr.Policy.from_settings(), every, rounds, on_round=line if as_json else None)


@rig.command("status")
@lane_option(Default.HERE)
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: the snapshot (aliases with status, held for, last answer).")
@click.option("--ansible", is_flag=True,
              help="Print the snapshot's hosts as an Ansible --list inventory (reached through the jump host).")
def status(lane_index: int | None, as_json: bool, ansible: bool) -> int:
    """Alias, status, held for, last answer, snapshot age.

    With --lane N --ansible, the development box's Ansible inventory: the hosts lane N's
    collector found, each with its rig address, SSH user and port, and the jump host.
    """
    from lanes.base.ui import emit_json
    from rig.inventory import inventoryfile
    from rig.inventory import status as st

    data, source = st.load(lane_index)
    if ansible:
        from rig.inventory import collect as col
        from rig.inventory import reach

        emit_json(col.ansible(data, reach.load()))
        return 0
    s = st.with_replicas(st.summary(data, inventoryfile.now_utc(), source))
    if as_json:
        emit_json(s)
    else:
        click.echo(st.render(s))
    return 0


@rig.command("metrics")
@lane_option(Default.HERE)
@click.option("--skip", multiple=True,
              type=click.Choice(["aliases", "jobs", "lanes", "dagu", "counts"]),
              help="Leave a source out (its nev_source_up is 0); repeat for more.")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Write FILE by rename (node_exporter's textfile collector: a *.prom file).")
@click.option("--json", "as_json", is_flag=True, help="Print each family's samples as JSON.")
def metrics(lane_index: int | None, skip: tuple[str, ...], out: str | None, as_json: bool) -> int:
    """The rig's state as Prometheus text: aliases ready, jobs in flight, lanes' free disk,
    Dagu's queue, landings and failures counted (docs/notify.md lists the families).

    A source that cannot be read is nev_source_up{source=...} 0, its families left out; the
    exit is 0 all the same (the scrape shows what is missing).
    """
    from pathlib import Path

    from lanes.base.ui import emit_json, info
    from rig import metrics as m

    state = m.gather(lane_index, skip)
    for src, why in state.missing.items():
        info(f"metrics: {src}: not read: {why}")
    if as_json:
        emit_json({name: [x.to_json() for x in ss] for name, ss in m.samples(state).items() if ss})
        return 0
    text = m.render(state)
    if out:
        m.write(Path(out), text)
        info(f"metrics: wrote {out}")
    else:
        click.echo(text, nl=False)
    return 0


def _say(line: str) -> None:
    from lanes.base.mask import known_secrets, mask

    click.echo(mask(line, extra=known_secrets()))


@rig.command("snapshot")
@click.argument("label")
@click.argument("roles", nargs=-1)
@click.option("--dry-run", is_flag=True,
              help="Print the roles, hosts, files and commands it would record; connect to none, "
                   "change nothing.")
def snapshot(label: str, roles: tuple[str, ...], dry_run: bool) -> int:
    """Record every role's serving configuration under LABEL.

    Files with owner, mode and content plus command outputs, kept on each host (root-only
    folder) and in the local rig notes (mode 600). Exits 1 when refused (label taken,
    store inside a git worktree or on the NAS) or a host fails, 2 for an unknown role.
    """
    from rig.snapshot.context import Context
    from rig.snapshot.record import plan, take

    if dry_run:
        for line in plan(Context.load(create=False), label, roles):
            _say(line)
        return 0
    take(Context.load(), label, roles, _say)
    return 0


@rig.command("restore")
@click.argument("label")
@click.argument("roles", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Show the diff and run validate only; replace nothing.")
def restore(label: str, roles: tuple[str, ...], dry_run: bool) -> int:
    """Put back the serving configuration recorded under LABEL.

    Per role: temporary copies, validate, atomic move, reload, health check; on any failure
    the previous files go back and the service is reloaded. Exits 1 naming the role and
    the failing step, or when the snapshot's hashes do not match its files.
    """
    from rig.snapshot.context import Context
    from rig.snapshot.restore import restore as run_restore

    return run_restore(Context.load(), label, roles, dry_run, _say)


@rig.command("snapshots")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: a list, one object per snapshot ([] when none).")
def snapshots(as_json: bool) -> int:
    """Labels, times and roles of the snapshots; a damaged label is named (stderr) and exits 1."""
    from lanes.base.ui import emit_json
    from rig.snapshot.context import Context
    from rig.snapshot.record import listing

    rows, damaged = listing(Context.load())
    if as_json:
        emit_json(rows)
    elif not rows and not damaged:
        click.echo("no snapshots yet; take one with `nev rig snapshot LABEL`")
    for r in rows if not as_json else []:
        roles = r["roles"]
        assert isinstance(roles, list)
        click.echo(f"{r['label']:<32} {r['time']}  {','.join(roles):<24} {r['who']}")
    for line in damaged:      # a damaged label is named, never hidden
        click.echo(f"nev: {line}", err=True)
    return 1 if damaged else 0


@rig.command("diff")
@click.argument("label")
@click.argument("other", required=False)
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: a list of what differs (role, host, file or command, left, "
                   "right, lines).")
def diff(label: str, other: str | None, as_json: bool) -> int:
    """Diff a snapshot against another or the live state (secrets masked)."""
    from rig.snapshot.context import Context
    from rig.snapshot.diff import compare, entries, sides

    ctx = Context.load()
    if as_json:
        from lanes.base.ui import emit_json

        left, _, right = sides(ctx, label, other)
        emit_json([e.to_json() for e in entries(left, right, ctx.rig.roles)])
        return 0
    text = compare(ctx, label, other)
    click.echo(text.rstrip("\n") if text else f"no differences between {label} and {other or 'live'}")
    return 0


@rig.command("trust")
@click.argument("host")
@click.option("--yes", is_flag=True, help="Pin without asking (after checking the fingerprint "
              "another way).")
@click.option("--direct", is_flag=True, help="Reach HOST directly, not through the jump host.")
def trust(host: str, yes: bool, direct: bool) -> int:
    """Show the fingerprint of HOST's key ([user@]host[:port]; reached through the jump host, as
    nev reaches it) and pin it in the known_hosts file (NEV_KNOWN_HOSTS) after you confirm it is
    the one its administrator gives (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` there).
    A host pinned with another key is re-pinned only after you confirm the change.
    """
    from rig import trust as tr

    return tr.trust(host, yes, direct, click.echo, lambda q: click.confirm(q, default=False))


@rig.command("log")
@click.argument("message", required=False)
@click.option("--worked", is_flag=True, help="The change did what it was for.")
@click.option("--failed", is_flag=True, help="The change was tried and did not work.")
@click.option("--role", help="The rig file role (or serving role) the change was made on.")
@click.option("--snapshot", "label",
              help="A snapshot label the change goes with (taken before or after it).")
@click.option("--show", is_flag=True,
              help="List the change log, oldest first, instead of adding to it.")
@click.option("--json", "as_json", is_flag=True,
              help="With --show: the entries as a JSON list.")
def log(message: str | None, worked: bool, failed: bool, role: str | None, label: str | None,
        show: bool, as_json: bool) -> int:
    """Add a change made by hand to the rig's change log, worked or not; or --show the log.

    The log is NEV_RIG_NOTES/changelog.md, the one nev's snapshots, restores and serving
    actions write: a person's entries stand beside them in order, with who (the OS user) and
    when. One of --worked/--failed is required; an empty MESSAGE is refused (both exit 2).
    """
    from lanes.base.errors import UsageError
    from rig.snapshot import changelog
    from rig.snapshot.context import notes_dir

    notes = notes_dir()
    if show:
        if message is not None or worked or failed or role or label:
            raise UsageError("--show takes no MESSAGE, --worked/--failed, --role or --snapshot; "
                             "run `nev rig log --show [--json]` alone")
        _show_log(changelog.read(notes), notes / changelog.NAME, as_json)
        return 0
    if as_json:
        raise UsageError("--json goes with --show; run `nev rig log --show --json`")
    if message is None or not message.strip():
        raise UsageError("nothing to log: give what was changed, e.g. "
                         "nev rig log \"raised tabbyapi max_seq_len to 32768\" --worked")
    if worked == failed:
        raise UsageError("say whether the change worked: add one of --worked or --failed"
                         + (", not both" if worked else ""))
    if role is not None and not role.strip():
        raise UsageError("--role is empty; name the role the change was made on, "
                         "or leave --role out")
    if label is not None:
        _known_snapshot(label, notes)
    path = changelog.append(notes, changelog.person_entry(message, worked, role, label))
    click.echo(f"logged in {path}")
    return 0


def _known_snapshot(label: str, notes: Path) -> None:
    from lanes.base.errors import UsageError
    from rig.snapshot.store import LocalStore, check_label

    check_label(label)
    if not LocalStore(notes).has_label(label):
        raise UsageError(f"no snapshot labelled {label} in {notes / 'snapshots'}; "
                         "list them with `nev rig snapshots`")


def _show_log(entries: list[Entry], path: Path, as_json: bool) -> None:
    from lanes.base.mask import known_secrets, mask
    from lanes.base.ui import emit_json

    if as_json:
        emit_json([e.to_json() for e in entries])
        return
    if not entries:
        click.echo(f"the change log is empty ({path}); "
                   "add to it with `nev rig log \"...\" --worked`")
    for e in entries:
        click.echo(mask(f"{e.time}  {e.heading}  ({e.who})", extra=known_secrets()))
        for ln in e.lines:
            click.echo(mask(f"    {ln}", extra=known_secrets()))


@rig.command("throughput")
@click.argument("alias")
@click.option("--inflight", default="1,2,4,8,16,32", show_default=True,
              help="In-flight levels, increasing, comma-separated.")
@click.option("--requests", "n_requests", type=click.IntRange(min=1),
              help="Requests per level (default: max(20, 4 x level), enough for a p95).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=256, show_default=True,
              help="max_tokens of every request (the same prompt each time).")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds per request.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def throughput(alias: str, inflight: str, n_requests: int | None, max_tokens: int, timeout: float,
               as_json: bool) -> int:
    """Drive ALIAS through the gateway at each in-flight level (streamed, same prompt).

    Per level: output tokens/s, requests/s, p50/p95 latency and time to first token; then the
    level where throughput stops growing. The result is also written to NEV_THROUGHPUT_DIR/ALIAS.json
    for `nev rig capacity`. Standard library only: runs on a lane as on the dev box.
    """
    from lanes.base.ui import emit_json, info
    from rig import throughput as tp

    levels = tp.parse_levels(inflight)

    def progress(row: tp.Level) -> None:
        info(f"throughput: {row.inflight} in flight: {row.output_tok_s} output tok/s, "
             f"{row.answered}/{row.requests} answered")

    result = tp.run(alias, levels, n_requests, max_tokens, timeout, progress)
    path = tp.save(result)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(tp.render(result))
    info(f"throughput: saved to {path}")
    return 0


@rig.command("capacity")
@click.option("--capacity-file", "declared_file", type=click.Path(dir_okay=False),
              help="Per-class power figures, budget and candidate size (default NEV_CAPACITY_FILE).")
@click.option("--declared", "declared_file", type=click.Path(dir_okay=False), hidden=True,
              help="The old name of --capacity-file.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: per alias the declared and measured figures.")
def capacity(declared_file: str | None, as_json: bool) -> int:
    """Candidates per hour per pool and power per role; warns when a power budget is exceeded.

    From bench/folknet.json, the inventory snapshot, the sweeps of `nev rig throughput` and the
    declared figures. A budget is a warning (exit 0), never enforced.
    """
    from pathlib import Path

    from bench import folknet
    from lanes.base import settings
    from lanes.base.ui import emit_json, info
    from rig import capacity as cap
    from rig import throughput as tp
    from rig.inventory import inventoryfile

    path = Path(declared_file) if declared_file else settings.path(settings.CAPACITY_FILE)
    declared = cap.load(path)
    snap_path = inventoryfile.default_path()
    snap = inventoryfile.read(snap_path) if snap_path.exists() else None
    if snap is None:
        info(f"capacity: no inventory snapshot at {snap_path}: alias status unknown, roles counted as declared")
    m = cap.model(folknet.load(folknet.default_path()), snap, cap.read_sweeps(tp.results_dir()), declared)
    if as_json:
        emit_json(m.to_json())
    else:
        click.echo(cap.render(m))
    for w in m.warnings:
        info(f"capacity: warning: {w}")
    return 0


@rig.command("dashboard")
@click.option("--port", type=click.IntRange(0, 65535), default=8088, show_default=True,
              help="Port on 127.0.0.1 (the page is never served on another address).")
@click.option("--refresh", type=int, help="Seconds between collections and page reloads (default NEV_DASHBOARD_REFRESH).")
def dashboard(port: int, refresh: int | None) -> int:
    """A local page on 127.0.0.1: lanes, aliases, jobs, batches, floors; refreshes by itself.

    Each source is collected on its own; one that is missing shows as `unavailable: <reason>`.
    Ctrl-C or SIGTERM stops it (exit 0).
    """
    from lanes.base import settings
    from lanes.base.ui import info
    from rig.dashboard import server

    every = refresh if refresh is not None else settings.get_int(settings.DASHBOARD_REFRESH)
    return server.serve(port, every, info)


rig.add_command(forward)
rig.add_command(services)
for _cmd in SERVING_COMMANDS:
    rig.add_command(_cmd)
