"""`nev lane ...`: parses arguments and dispatches to the lanes modules."""

from __future__ import annotations

from pathlib import Path

import click

from lanes.ui import not_built


@click.group("lane")
def lane() -> None:
    """Run a worktree's command on a build lane; list, sweep, provision and create lanes."""


@lane.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--lane", "lane_index", type=int, help="Use lane N of the lanes file (default: first that answers).")
@click.option("--lane-only", is_flag=True, help="Never run on the development box (always so for `run`).")
@click.option("--pull", multiple=True, metavar="DIR", help="Copy DIR of the lane copy back after the run (repeatable).")
@click.argument("worktree", type=click.Path(file_okay=False))
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(lane_index: int | None, lane_only: bool, pull: tuple[str, ...], worktree: str, command: tuple[str, ...]) -> int:
    """Ship WORKTREE (unpushed commits, diff, untracked files) to a lane and run COMMAND there.

    Exit status is the command's; 3 when no lane answered (nothing ran), 4 when the
    lane's disk is short even after a sweep, 130/143 when interrupted (the command on
    the lane is stopped too).
    """
    from lanes import gate

    return gate.run(Path(worktree), list(command), lane_index=lane_index, lane_only=True, pull=pull)


@lane.command("on", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--lane", "lane_index", type=int, help="Use lane N of the lanes file (default: first that answers).")
@click.option("--lane-only", is_flag=True, help="Exit 3 instead of running locally when no lane answers.")
@click.option("--pull", multiple=True, metavar="DIR", help="Copy DIR back after the run (ignored on a lane).")
@click.argument("worktree", type=click.Path(file_okay=False))
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def on(lane_index: int | None, lane_only: bool, pull: tuple[str, ...], worktree: str, command: tuple[str, ...]) -> int:
    """Run COMMAND on a lane, or in place when already on one (NEV_ON_LANE set).

    Without --lane-only (and without NEV_LANE_STRICT=1) it runs here when no lane answers.
    """
    from lanes import gate

    return gate.on(Path(worktree), list(command), lane_only=lane_only, pull=pull, lane_index=lane_index)


@lane.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(as_json: bool) -> int:
    """Configured lanes: answering or not, free disk, copies, gates running."""
    from lanes import gate
    from lanes.ui import emit_json

    rows = gate.lane_status()
    if as_json:
        emit_json(rows)
        return 0
    if not rows:
        click.echo("no lanes configured (NEV_LANE_SSH or the lanes file)")
        return 0
    for r in rows:
        state = "answers" if r["answers"] else "does not answer"
        free = f"{r['free_gb']:.1f} GB free" if r["free_gb"] is not None else "free disk unknown"
        click.echo(f"lane {r['index']}  {r['ssh']:<28} {state:<16} {free:<16} "
                   f"copies: {', '.join(r['copies']) or '-'}  running: {', '.join(r['running']) or '-'}")
    return 0


@lane.command("install")
@click.option("--lane", "lane_index", type=int, help="Only lane N (default: every configured lane).")
def install(lane_index: int | None) -> int:
    """Install this nev on the lanes (wheels built here, sent over SSH, installed offline).

    A lane never runs a different nev than the dev box: the install is keyed by the sources,
    and a second run with the same sources changes nothing.
    """
    from lanes import config, selfinstall
    from lanes.ssh import Connection

    lf = config.configured()
    for lane in config.pick(lf, lane_index):
        with Connection(lane.target) as conn:
            _changed, line = selfinstall.install(conn, selfinstall.default_cache())
        click.echo(f"{lane.label}: {line}")
    return 0


@lane.command("sweep")
@click.option("--lane", "lane_index", type=int, help="Only lane N.")
@click.option("--track", help="Only the copies of this track.")
@click.option("--dry-run", is_flag=True, help="List what would go, with sizes; change nothing.")
def sweep(lane_index: int | None, track: str | None, dry_run: bool) -> None:
    """Remove lane copies whose track has no worktree in the primary checkout."""
    raise not_built("lane sweep", 5)


@lane.command("provision")
@click.option("--lane", "lane_index", type=int, help="Only lane N.")
def provision(lane_index: int | None) -> None:
    """Idempotent set-up of a lane guest; prints changed:/unchanged: per step."""
    raise not_built("lane provision", 5)


@lane.command("create")
@click.option("--backend", type=click.Choice(["lxc", "pct"]), required=True)
def create(backend: str) -> None:
    """Create a lane as an unprivileged LXC guest (lxc on a Debian host, pct on Proxmox)."""
    raise not_built("lane create", 5)
