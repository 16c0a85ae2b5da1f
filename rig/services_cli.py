"""`nev rig services ...`: parses arguments and dispatches to rig.services (from the development
box) and rig.services_lane (on the lane)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from lanes.base.laneopt import Default, lane_option


@click.group("services")
def services() -> None:
    """The inventory's services on the lanes (advertise; collect and probe on the collector lane),
    kept running by each lane's own supervisor and @reboot line; see docs/inventory.md."""


def _lanes(lane_index: int | None) -> list:
    from lanes import lanesfile

    return lanesfile.pick(lanesfile.configured(), lane_index)


@services.command("install")
@lane_option(Default.EVERY)
@click.option(
    "--collector",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="The lane that collects and probes: its snapshot is the one jobs check.",
)
@click.option(
    "--declared",
    "declared_dir",
    type=click.Path(file_okay=False, exists=True),
    help="A folder of each lane's declared inventory, <lane name>.json (default: its role, "
    "SSH user and port, root and share from the lanes file).",
)
@click.option(
    "--probe-key-file",
    type=click.Path(dir_okay=False, exists=True),
    help="The collector's gateway key (mode 600). Default: one minted for it in the "
    "gateway's keys file (NEV_GATEWAY_KEYS_FILE).",
)
@click.option(
    "--expect",
    type=click.IntRange(min=1),
    help="The collector stops browsing early "
    "once this many hosts answer (default: browse for the whole timeout).",
)
@click.option("--dry-run", is_flag=True, help="Say what each lane would run; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def install(
    lane_index: int | None,
    collector: int,
    declared_dir: str | None,
    probe_key_file: str | None,
    expect: int | None,
    dry_run: bool,
    as_json: bool,
) -> int:
    """Install (or update) the services on the lanes; start them; add each lane's @reboot line.

    Idempotent: a lane whose plan did not change says `unchanged`. The lanes run their own nev
    (`nev lane install` first). Exit 1 when a lane failed.
    """
    from lanes.base.ui import emit_json
    from rig import services as svc

    lanes = _lanes(lane_index)
    inventories = svc.read_declared(Path(declared_dir)) if declared_dir else {}
    done = svc.install(
        lanes if lane_index is None else _lanes(None),
        collector,
        inventories=inventories,
        key_file=Path(probe_key_file) if probe_key_file else None,
        expect=expect,
        dry_run=dry_run,
        only=lane_index,
    )
    if as_json:
        emit_json([{"lane": o.lane, "ok": o.ok, "lines": o.lines} for o in done])
    else:
        for o in done:
            for line in o.lines:
                click.echo(f"{o.lane}: {line}")
    return 0 if all(o.ok for o in done) else 1


@services.command("status")
@lane_option(Default.EVERY)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(lane_index: int | None, as_json: bool) -> int:
    """Each lane's services as the lane reports them: state, PID, uptime, restarts, last exit.

    Exit 0 when every service runs and every lane has its @reboot line; 3 when a lane could not
    be reached (the cause on its line); else 1.
    """
    from lanes.base.exitcodes import Exit
    from lanes.base.ui import emit_json
    from rig import services as svc

    rows = svc.status(_lanes(lane_index))
    if as_json:
        emit_json([r.to_json() for r in rows])
    else:
        click.echo(svc.render(rows))
    if any(r.cause for r in rows):
        return Exit.UNAVAILABLE
    return 0 if svc.healthy(rows) else 1


@services.command("remove")
@lane_option(Default.EVERY)
@click.option("--dry-run", is_flag=True, help="Say what would go; change nothing.")
def remove(lane_index: int | None, dry_run: bool) -> int:
    """Stop the services, remove the @reboot line and their files from the lanes."""
    from rig import services as svc

    done = svc.remove(_lanes(lane_index), dry_run)
    for o in done:
        for line in o.lines:
            click.echo(f"{o.lane}: {line}")
    return 0 if all(o.ok for o in done) else 1


# ---- run on the lane itself ----------------------------------------------------------------


@services.command("apply")
@click.option("--remove", "remove_", is_flag=True, help="Remove this host's services instead.")
def apply(remove_: bool) -> int:
    """(On a lane: what `install` runs there.) Read the plan on stdin, write its files, add the
    @reboot line, (re)start the supervisor when anything changed."""
    from rig import services as svc
    from rig import services_lane as lane

    plan = None if remove_ else svc.plan_from_text(sys.stdin.read())
    for line in lane.apply(plan, lane.lane_home()):
        click.echo(line)
    return 0


@services.command("here")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def here(as_json: bool) -> int:
    """(On a lane.) This host's supervisor and services, read from the host itself."""
    from lanes.base.ui import emit_json
    from rig import services as svc
    from rig import services_lane as lane

    data = lane.here(lane.lane_home())
    if as_json:
        emit_json(data.to_json())
    else:
        click.echo(svc.render([svc.LaneServices(data.host or "", data)]))
    return 0


@services.command("once")
@click.argument("name", type=click.Choice(["collect", "probe"]))
def once(name: str) -> int:
    """(On a lane.) One round of a planned service now (collect or probe), with its environment."""
    from rig import services_lane as lane

    return lane.once(lane.lane_home(), name)


@services.command("run")
def run() -> int:
    """(On a lane: what the @reboot line runs.) The supervisor: runs every planned service and
    restarts one that exits, until SIGTERM."""
    from rig import services_lane as lane

    return lane.Supervisor(lane.lane_home()).run()
