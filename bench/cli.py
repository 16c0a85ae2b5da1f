"""`nev batch|oracle|floors|scores|ledger`: parse arguments and dispatch to the bench modules."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from lanes.ui import not_built

if TYPE_CHECKING:
    from bench.floors import Scoring


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
@click.option("--shard", help="i/n: take seeds i, i+n, ... (written to CORPUS.shard-i-of-n)")
@click.option("--engines", default="chromium,firefox,webkit", show_default=True)
@click.option("--cases", type=int, default=1000, show_default=True, help="Seeds 0..N-1 (before sharding).")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def oracle_build(corpus: str, shard: str | None, engines: str, cases: int, as_json: bool) -> int:
    """Generate, render and vote a corpus; write it once, keyed by the engine versions.

    Writes corpus/CORPUS/ (NEV_CORPUS_DIR); an up-to-date corpus is left as it is.
    Exit 0 done, 1 an engine failed, 2 bad arguments, 143 terminated (nothing published).
    """
    from bench.oracle.build import build, summary_lines
    from bench.oracle.cases import parse_shard
    from bench.oracle.engines import parse_engines
    from lanes import settings
    from lanes.ui import emit_json

    root = settings.get_path(settings.CORPUS_DIR)
    assert root is not None
    result = build(corpus, root=root, shard=parse_shard(shard), engine_names=parse_engines(engines),
                   count=cases)
    if as_json:
        emit_json({"folder": str(result.folder), "written": result.written, "manifest": result.manifest,
                   "seconds": round(result.seconds, 2), "rates": result.rates})
    else:
        for line in summary_lines(result):
            click.echo(line)
    return 0


@oracle.command("render")
@click.argument("pages", nargs=-1, required=True)
@click.option("--engines", default="chromium,firefox,webkit", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def oracle_render(pages: tuple[str, ...], engines: str, as_json: bool) -> int:
    """Render pages (files or folders) in the engines; print rects per element id and the vote.

    Elements with data-expected-width/-height/-x/-y are checked in every engine;
    exit 1 when one does not match.
    """
    from bench.oracle.engines import parse_engines
    from bench.oracle.render import collect_pages, format_pages, render_pages
    from bench.oracle.vote import DEFAULT_TOLERANCE
    from lanes.ui import emit_json

    results = render_pages(collect_pages(pages), parse_engines(engines), DEFAULT_TOLERANCE)
    if as_json:
        emit_json(results)
    else:
        for line in format_pages(results):
            click.echo(line)
    return 1 if any(r["expectation_failures"] for r in results) else 0


@oracle.command("engines")
@click.option("--json", "as_json", is_flag=True)
def oracle_engines(as_json: bool) -> int:
    """Versions of the three engines found here, and whether each starts (exit 1 if one does not)."""
    from bench.oracle.render import engines_report
    from lanes.ui import emit_json

    rows = engines_report()
    if as_json:
        emit_json(rows)
    else:
        for r in rows:
            state = f"starts ({r['seconds']} s)" if r["starts"] else f"does not start: {r.get('error')}"
            click.echo(f"{r['engine']:<9} {r['version'] or '-':<18} {state}")
    return 0 if all(r["starts"] for r in rows) else 1


@click.group("floors")
def floors() -> None:
    """Per-function score floors that only rise (docs/floors.md)."""


_REPO = click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=".",
                     show_default=True, help="The repository holding the engine (NEV_ENGINE_DIR inside it).")


def _scoring(repo: Path) -> Scoring:
    from bench.floors import scoring_for
    from lanes.gitrun import GitError, Repo

    try:
        root = Repo(repo.resolve()).toplevel()
    except GitError:
        root = repo.resolve()
    return scoring_for(root)


@floors.command("check")
@_REPO
def floors_check(repo: Path) -> int:
    """Score every generated function; fail on a drop, a shrunken corpus or zero passes.

    Exits 0 when every floor holds, 1 when one is broken (one line naming each),
    3 when no lane answered to score (nothing scored). Scores here when NEV_ON_LANE is set.
    """
    from bench.floors import check, default_scorer

    return check(_scoring(repo), default_scorer(), echo=click.echo)


@floors.command("raise")
@click.option("--print-raises", is_flag=True, help="Print each raised floor (old -> new).")
@_REPO
def floors_raise(print_raises: bool, repo: Path) -> int:
    """Write each floor the fresh score is above and commit only those files.

    Refuses on uncommitted changes or off main; writes nothing when scoring fails
    or no lane answers (exit 3); never lowers a number.
    """
    from bench.floors import default_scorer, raise_floors

    return raise_floors(_scoring(repo), default_scorer(), print_raises=print_raises, echo=click.echo)


@click.command("scores")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (what a lane scorer reads back).")
@_REPO
def scores(as_json: bool, repo: Path) -> int:
    """Every generated function against its corpus: passed/run, floor, batch, status."""
    from bench.floors import default_scorer
    from bench.scores import show

    return show(_scoring(repo), default_scorer(), as_json, echo=click.echo)


@click.command("ledger")
@click.option("--worktree")
def ledger(worktree: str | None) -> None:
    """The batches, as a table."""
    raise not_built("ledger", 12)
