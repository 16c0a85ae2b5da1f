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


@rig.command("snapshot")
@click.argument("label")
@click.argument("roles", nargs=-1)
def snapshot(label: str, roles: tuple[str, ...]) -> None:
    """Record every role's serving configuration under LABEL."""
    raise not_built("rig snapshot", 13)


@rig.command("restore")
@click.argument("label")
@click.argument("roles", nargs=-1)
@click.option("--dry-run", is_flag=True)
def restore(label: str, roles: tuple[str, ...], dry_run: bool) -> None:
    """Put back the serving configuration recorded under LABEL."""
    raise not_built("rig restore", 13)


@rig.command("snapshots")
def snapshots() -> None:
    """Labels, times and roles of the snapshots."""
    raise not_built("rig snapshots", 13)


@rig.command("diff")
@click.argument("label")
@click.argument("other", required=False)
def diff(label: str, other: str | None) -> None:
    """Diff a snapshot against another or the live state (secrets masked)."""
    raise not_built("rig diff", 13)


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
