"""`nev job ...` and `nev land`: parse arguments and dispatch to the jobs modules."""

from __future__ import annotations

import click

from lanes.ui import not_built


@click.group("job")
def job() -> None:
    """Submit, run, check and land jobs (Dagu workflow runs on a lane)."""


@job.command("submit")
@click.argument("manifest", type=click.Path(dir_okay=False))
def submit(manifest: str) -> None:
    """Push job/<name> to the forge and start its workflow run on the lane."""
    raise not_built("job submit", 9)


@job.command("run")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option("--workdir", type=click.Path(file_okay=False))
@click.option("--state", type=click.Path(file_okay=False))
@click.option("--inventory", type=click.Path(dir_okay=False))
def run(manifest: str, workdir: str | None, state: str | None, inventory: str | None) -> None:
    """Run a job's stages with durable state (on the lane, inside Dagu)."""
    raise not_built("job run", 9)


@job.group("check")
def check() -> None:
    """The checks a job makes before its first stage."""


@check.command("preflight")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option("--workdir", type=click.Path(file_okay=False))
@click.option("--state", type=click.Path(file_okay=False))
def preflight(manifest: str, workdir: str | None, state: str | None) -> None:
    """Requirements check: exit 0 when every requirement is met, 9 otherwise."""
    raise not_built("job check preflight", 9)


@check.command("inventory")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.argument("snapshot", type=click.Path(dir_okay=False))
@click.option("--declared", type=click.Path(dir_okay=False), help="Declared aliases (default NEV_FOLKNET_FILE).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome and reasons as JSON on stdout.")
def inventory(manifest: str, snapshot: str, declared: str | None, as_json: bool) -> int:
    """Inventory check: exit 0 ready, 3 not ready yet, 10 never clears by itself.

    Every reason is printed on stderr, one per line.
    """
    from pathlib import Path

    from jobs import inventory_check

    return inventory_check.run(Path(manifest), Path(snapshot), Path(declared) if declared else None, as_json)


@job.command("poll")
def poll() -> None:
    """The tick: read results, resend 3 and 7, land passed jobs."""
    raise not_built("job poll", 9)


@job.command("status")
@click.argument("name", required=False)
def status(name: str | None) -> None:
    """Each job's stage states."""
    raise not_built("job status", 9)


@click.command("land")
@click.argument("spec_name", required=False)
@click.argument("spec_sha", required=False)
@click.argument("branch_tip", required=False)
@click.option("--check", is_flag=True, help="Run every condition, stop before the merge.")
def land(spec_name: str | None, spec_sha: str | None, branch_tip: str | None, check: bool) -> None:
    """Land an approved track by a guarded fast-forward of main (0 landed, 1 not, 2 conflict)."""
    raise not_built("land", 6)
