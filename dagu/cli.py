"""`nev dagu ...`: parses arguments and dispatches to the dagu modules."""

from __future__ import annotations

import click

from lanes.ui import not_built


@click.group("dagu")
def dagu() -> None:
    """Dagu on a lane: install, start, stop, run and watch workflows."""


def _lane_opt(f):  # type: ignore[no-untyped-def]
    return click.option("--lane", "lane_index", type=int, help="Lane N (default NEV_DAGU_LANE, else 0).")(f)


for _name, _help in [("up", "Install the pinned Dagu on the lane, configure, start and check it."),
                     ("start", "Start Dagu on the lane."), ("stop", "Stop Dagu on the lane."),
                     ("status", "Is Dagu running and healthy on the lane."),
                     ("tunnel", "Hold a port forward open to the web UI and API.")]:
    def _make(name: str, help: str) -> click.Command:
        @_lane_opt
        def cmd(lane_index: int | None) -> None:
            raise not_built(f"dagu {name}", 8)
        return click.command(name, help=help)(cmd)
    dagu.add_command(_make(_name, _help))


@dagu.command("autostart")
@click.argument("state", type=click.Choice(["on", "off"]))
@_lane_opt
def autostart(state: str, lane_index: int | None) -> None:
    """Add or remove the lane user's @reboot crontab line."""
    raise not_built("dagu autostart", 8)


@dagu.command("run")
@click.argument("workflow")
@click.option("--param", multiple=True, metavar="K=V")
def run(workflow: str, param: tuple[str, ...]) -> None:
    """Start (or enqueue) WORKFLOW and follow it to the end or NEV_DAGU_WAIT."""
    raise not_built("dagu run", 8)


@dagu.command("stop-run")
@click.argument("run_id")
def stop_run(run_id: str) -> None:
    """Stop a run."""
    raise not_built("dagu stop-run", 8)


@dagu.command("watch")
@click.argument("run_id")
@click.option("--once", is_flag=True)
@click.option("--step")
def watch(run_id: str, once: bool, step: str | None) -> None:
    """Follow a run; with --once --step print the step's exit code."""
    raise not_built("dagu watch", 8)


@dagu.command("clean-jobs")
@click.argument("name")
def clean_jobs(name: str) -> None:
    """Remove a job's folder on the lane."""
    raise not_built("dagu clean-jobs", 8)


@dagu.command("prune-mirror")
def prune_mirror() -> None:
    """Fetch and prune job/* and result/* in the lane mirror."""
    raise not_built("dagu prune-mirror", 8)


@dagu.command("queue")
@click.option("--max", "max_", type=int, required=True)
def queue(max_: int) -> None:
    """Write the global queue's concurrency and restart the scheduler."""
    raise not_built("dagu queue", 8)
