"""`nev batch|oracle|floors|scores|ledger`: parse arguments and dispatch to the bench modules."""

from __future__ import annotations

import click

from lanes.ui import not_built


@click.group("batch")
def batch() -> None:
    """Best-of-N generation batches through the gateway."""


@batch.command("run")
@click.argument("function")
@click.option("--models", help="ALIAS:N:INFLIGHT,... (default NEV_MODELS)")
@click.option("--max-batches", type=int, help="Stop after K batches (default NEV_MAX_BATCHES)")
def batch_run(function: str, models: str | None, max_batches: int | None) -> None:
    """Sample, verify and keep the best version of FUNCTION (on a lane)."""
    raise not_built("batch run", 12)


@click.group("oracle")
def oracle() -> None:
    """The three-browser oracle: cached ground truth from Chromium, Firefox and WebKit."""


@oracle.command("build")
@click.argument("corpus")
@click.option("--shard", help="i/n: take seeds i, i+n, ...")
@click.option("--engines", default="chromium,firefox,webkit")
@click.option("--cases", type=int)
def oracle_build(corpus: str, shard: str | None, engines: str, cases: int | None) -> None:
    """Generate, render and vote a corpus; write it content-addressed."""
    raise not_built("oracle build", 11)


@oracle.command("render")
@click.argument("pages", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True)
def oracle_render(pages: tuple[str, ...], as_json: bool) -> None:
    """Render pages in the three engines; print rects per element and the vote."""
    raise not_built("oracle render", 11)


@oracle.command("engines")
def oracle_engines() -> None:
    """Versions of the three engines found here, and whether each starts."""
    raise not_built("oracle engines", 11)


@click.group("floors")
def floors() -> None:
    """Per-function score floors that only rise."""


@floors.command("check")
def floors_check() -> None:
    """Score every generated function; fail on a drop, a shrunken corpus or zero passes."""
    raise not_built("floors check", 10)


@floors.command("raise")
@click.option("--print-raises", is_flag=True)
def floors_raise(print_raises: bool) -> None:
    """Write each floor the fresh score is above and commit only those files."""
    raise not_built("floors raise", 10)


@click.command("scores")
def scores() -> None:
    """Every generated function against its corpus: passed/run, floor, status."""
    raise not_built("scores", 10)


@click.command("ledger")
@click.option("--worktree")
def ledger(worktree: str | None) -> None:
    """The batches, as a table."""
    raise not_built("ledger", 12)
