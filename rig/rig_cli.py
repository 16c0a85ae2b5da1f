"""`nev rig ...`: parses arguments and dispatches to the rig modules."""

from __future__ import annotations

import click

from lanes.ui import not_built


@click.group("rig")
def rig() -> None:
    """The rig as a whole: inventory, probes, status, snapshots, capacity, dashboard."""


@rig.command("advertise")
@click.option("--inventory", type=click.Path(dir_okay=False))
@click.option("--interface", help="Address to advertise on (never all interfaces).")
def advertise(inventory: str | None, interface: str | None) -> None:
    """Advertise this host over mDNS and serve its HTTP inventory."""
    raise not_built("rig advertise", 7)


@rig.command("collect")
@click.option("--timeout", type=float, default=3.0, show_default=True)
@click.option("--ansible", is_flag=True, help="Print an Ansible --list inventory.")
def collect(timeout: float, ansible: bool) -> None:
    """Browse, fetch every inventory, aggregate into the inventory snapshot."""
    raise not_built("rig collect", 7)


@rig.command("probe")
@click.option("--every", type=float, help="Repeat every S seconds (300 on the rig).")
def probe(every: float | None) -> None:
    """One real completion per alias; record status, since, last answer."""
    raise not_built("rig probe", 7)


@rig.command("status")
@click.option("--lane", "lane_index", type=int)
@click.option("--json", "as_json", is_flag=True)
def status(lane_index: int | None, as_json: bool) -> None:
    """Alias, status, held since, last answer, snapshot age."""
    raise not_built("rig status", 7)


def _say(line: str) -> None:
    from lanes.mask import known_secrets, mask

    click.echo(mask(line, extra=known_secrets()))


@rig.command("snapshot")
@click.argument("label")
@click.argument("roles", nargs=-1)
def snapshot(label: str, roles: tuple[str, ...]) -> int:
    """Record every role's serving configuration under LABEL.

    Files with owner, mode and content plus command outputs, kept on each host (root-only
    folder) and in the local rig notes (mode 600). Exits 1 when refused (label taken,
    store inside a git worktree or on the NAS) or a host fails, 2 for an unknown role.
    """
    from rig.snapshot.context import Context
    from rig.snapshot.record import take

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
@click.option("--json", "as_json", is_flag=True)
def snapshots(as_json: bool) -> int:
    """Labels, times and roles of the snapshots."""
    from lanes.ui import emit_json
    from rig.snapshot.context import Context
    from rig.snapshot.record import listing

    rows = listing(Context.load())
    if as_json:
        emit_json(rows)
    elif not rows:
        click.echo("no snapshots yet; take one with `nev rig snapshot LABEL`")
    for r in rows if not as_json else []:
        roles = r["roles"]
        assert isinstance(roles, list)
        click.echo(f"{r['label']:<32} {r['time']}  {','.join(roles):<24} {r['who']}")
    return 0


@rig.command("diff")
@click.argument("label")
@click.argument("other", required=False)
def diff(label: str, other: str | None) -> int:
    """Diff a snapshot against another or the live state (secrets masked)."""
    from rig.snapshot.context import Context
    from rig.snapshot.diff import compare

    text = compare(Context.load(), label, other)
    click.echo(text.rstrip("\n") if text else f"no differences between {label} and {other or 'live'}")
    return 0


@rig.command("throughput")
@click.argument("alias")
@click.option("--inflight", default="1,2,4,8,16,32", show_default=True)
def throughput(alias: str, inflight: str) -> None:
    """Drive ALIAS at each in-flight level; tokens/s, latency, the knee."""
    raise not_built("rig throughput", 14)


@rig.command("capacity")
def capacity() -> None:
    """The power and token-rate model of the declared rig."""
    raise not_built("rig capacity", 14)


@rig.command("dashboard")
@click.option("--port", type=int, default=8088, show_default=True)
def dashboard(port: int) -> None:
    """A local page: lanes, aliases, jobs, batches, floors."""
    raise not_built("rig dashboard", 14)
