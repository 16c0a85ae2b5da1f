"""`nev provenance list|stale|bom|regen`: the generated functions' provenance records as an index
(bench/provenance.py), and regeneration by hand (jobs/regen.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path

import click

from bench import provenance as prov

_REPO = click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The checkout whose generated functions are read.",
)
_AT = click.option(
    "--worktree",
    is_flag=True,
    help="Read the checkout's working tree, not main "
    "(the default: what landed; the working tree when there is no main).",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON (a list; [] when empty).")


def _index(repo: Path, worktree: bool) -> tuple[list[prov.Entry], list[prov.Finding]]:
    import os

    from jobs.regen import stale_here
    from lanes.base.gitrun import Repo

    r = Repo(repo)
    root = r.toplevel_or_self()
    rev = None if worktree or Repo(root).try_rev("main") is None else "main"
    return stale_here(root, os.environ, rev)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n:
            return f"{seconds / n:.0f}{unit}"
    return f"{seconds:.0f}s"


def _floor(f: Mapping[str, int] | None) -> str:
    return f"{f['cases_passed']}/{f['cases_run']}" if f else "-"


@click.group("provenance")
def provenance() -> None:
    """The generated functions' provenance records as an index: what made each, what is stale.

    Exit codes: 0 done, 1 a record or file cannot be read, 2 usage.
    See docs/provenance.md.
    """


@provenance.command("list")
@_JSON
@_AT
@_REPO
def provenance_list(as_json: bool, worktree: bool, repo: Path) -> int:
    """Every generated function: its spec section, models, corpus key, floor and age."""
    from lanes.base.ui import emit_json

    entries, _ = _index(repo, worktree)
    now = dt.datetime.now(dt.UTC)
    rows = [prov.list_row(e, now) for e in entries]
    if as_json:
        emit_json([r.to_json() for r in rows])
        return 0
    for r in rows:
        key = (r.corpus_key or "-")[:12]
        click.echo(
            f"{r.function}  §{r.section or '?'}  models {','.join(r.models or ['-'])}  "
            f"corpus {key}  floor {_floor(r.floor.to_json() if r.floor else None)}  "
            f"age {_age(r.age_s)}"
            + ("  (incomplete provenance)" if r.provenance == "incomplete" else "")
        )
    if not rows:
        click.echo("no generated function")
    return 0


@provenance.command("stale")
@_JSON
@_AT
@_REPO
def provenance_stale(as_json: bool, worktree: bool, repo: Path) -> int:
    """The functions an input change invalidates, why, and what to do.

    A spec section or an engine definition the prompt showed changed: regenerate. The corpus key
    changed (a browser update): redump (re-dump the ground truth and re-score). A record that
    cannot say (today's format): incomplete provenance. Fresh functions are not listed.
    """
    from lanes.base.ui import emit_json

    _, findings = _index(repo, worktree)
    if as_json:
        emit_json([f.to_json() for f in findings])
        return 0
    for f in findings:
        for r in f.reasons:
            lead = "" if f.action == prov.INCOMPLETE else f"{f.action}: "
            click.echo(f"{f.function}: {lead}{r.text}")
    if not findings:
        click.echo("nothing is stale")
    return 0


@provenance.command("bom")
@_JSON
@_AT
@_REPO
def provenance_bom(as_json: bool, worktree: bool, repo: Path) -> int:
    """The bill of materials as JSON, one object per function (docs/provenance-bom.schema.json):
    every input of every generated function, null where the record does not know it. --json is
    accepted; the output is JSON either way."""
    from lanes.base.ui import emit_json

    entries, _ = _index(repo, worktree)
    emit_json([prov.bom_row(e) for e in entries])
    return 0


@provenance.command("regen")
@click.argument("function", required=False)
@click.option("--again", is_flag=True, help="With FUNCTION: submit even if its change was started "
              "before (its earlier job failed); the record of the earlier job is replaced.")
@_REPO
def provenance_regen(function: str | None, again: bool, repo: Path) -> int:
    """Submit the regeneration job of each stale function (or of FUNCTION only), as the tick does.

    A corpus change is re-dumped and re-scored first (`nev scores` on a build lane, once per
    change); only a function that then no longer holds its floor is regenerated.

    Reads main. At most NEV_REGEN_MAX regeneration jobs run at once; a change already started
    (regen.json in the state folder) is never submitted again. Each job goes to the configured
    lane with the fewest regeneration jobs not yet ended (the Dagu lane alone when there is one
    lane or Dagu runs distributed). Exit 0 done (also: nothing to do),
    1 a submit failed, 2 no such function, 3 no lane answered.
    """
    import os

    from jobs.regen import regen
    from lanes.base.errors import UsageError

    if again and function is None:
        raise UsageError("--again needs FUNCTION: name the one function to submit again")
    return regen(repo, os.environ, function, again=again)
