"""`nev batch|oracle|floors|scores|ledger`: parse arguments and dispatch to the bench modules."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from bench.floors import Scoring


@click.group("batch")
def batch() -> None:
    """Best-of-N generation batches through the gateway."""


_BUDGET_TOKENS = click.option("--budget-tokens", help="Stop drawing before a call would pass this many tokens "
                              "(prompt + completion; default NEV_BUDGET_TOKENS)")
_ACCEPT_STALE = click.option("--accept-stale-sweeps", "accept_stale", is_flag=True,
                             help="Size the batch with a sweep measured before the last change "
                             "to the serving configuration (the change log); by default such a "
                             "sweep is not used")
_BUDGET_GPU_S = click.option("--budget-gpu-s", help="Stop drawing before a call would pass this many pool GPU-seconds "
                             "(from `nev rig throughput`; default NEV_BUDGET_GPU_S)")


@batch.command("run", context_settings={"ignore_unknown_options": False})
@click.argument("function")
@click.option("--models", help="ALIAS:N:INFLIGHT,... (default NEV_MODELS, else every sampling alias of folknet.json)")
@click.option("--max-batches", type=int, help="Stop after K batches (default NEV_MAX_BATCHES, 4)")
@click.option("--escalate-after", type=int, help="Batches with no pass before escalating (default NEV_ESCALATE_AFTER, 2)")
@click.option("--escalate", help="The capacity-tier share ALIAS:N:INFLIGHT (default NEV_ESCALATE_MODEL, else the "
              "first capacity alias)")
@click.option("--seed", type=int, help="Base of every call's seed (default: from the batch id)")
@click.option("--corpus", type=click.Path(file_okay=False, path_type=Path),
              help="The corpus folder (default NEV_CORPUS_DIR/FUNCTION)")
@_BUDGET_TOKENS
@_BUDGET_GPU_S
@click.option("--supersede", is_flag=True,
              help="A regeneration: the kept version replaces an earlier batch's (its record is "
              "replaced; git keeps the old one)")
@click.option("--seed-failures", is_flag=True,
              help="Score the current version first; the first prompt shows its failing cases")
@_ACCEPT_STALE
@click.option("--manifest", type=click.Path(dir_okay=False, path_type=Path),
              help="Draw again from the inputs a run's manifest pins (target/batch/BATCH/"
              "manifest.json: models, rounds, seeds); refused (exit 14, one line) when one no "
              "longer holds")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=".",
              show_default=True, help="The repository holding the engine (NEV_ENGINE_DIR inside it).")
def batch_run(function: str, models: str | None, max_batches: int | None, escalate_after: int | None,
              escalate: str | None, seed: int | None, corpus: Path | None, budget_tokens: str | None,
              budget_gpu_s: str | None, supersede: bool, seed_failures: bool, accept_stale: bool,
              manifest: Path | None, repo: Path) -> int:
    """Sample, verify and keep a passing version of FUNCTION (on a lane).

    Exits 0 when a version passed and was kept, 1 when none passed (or the kept files
    could not be written), 12 when none passed before the budget bound (the next call would
    have passed it), 3 when no lane answered (nothing ran), 2 on bad arguments, 14 when
    --manifest names an input that no longer holds (nothing drawn). Before the first draw the
    run's manifest (every input pinned) is written to target/batch/BATCH/manifest.json.
    """
    from bench.batch_cmd import command

    argv = ["batch", "run", function]
    for flag, value in (("--models", models), ("--max-batches", max_batches), ("--escalate-after", escalate_after),
                        ("--escalate", escalate), ("--seed", seed), ("--corpus", corpus),
                        ("--budget-tokens", budget_tokens), ("--budget-gpu-s", budget_gpu_s)):
        if value is not None:
            argv += [flag, str(value)]
    argv += ["--supersede"] * supersede + ["--seed-failures"] * seed_failures
    argv += ["--accept-stale-sweeps"] * accept_stale
    argv += ["--manifest", str(manifest)] if manifest is not None else []
    return command(function, repo, models, max_batches, escalate_after, escalate, seed, corpus, argv,
                   echo=click.echo, budget_tokens=budget_tokens, budget_gpu_s=budget_gpu_s,
                   supersede=supersede, seed_failures=seed_failures, accept_stale=accept_stale,
                   manifest=manifest)


@batch.command("plan")
@click.argument("function")
@click.option("--models", help="ALIAS:N:INFLIGHT,... (default NEV_MODELS, else every sampling alias of folknet.json)")
@_BUDGET_TOKENS
@_BUDGET_GPU_S
@_ACCEPT_STALE
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=".",
              show_default=True, help="The repository holding the engine (NEV_ENGINE_DIR inside it).")
def batch_plan(function: str, models: str | None, budget_tokens: str | None, budget_gpu_s: str | None,
               accept_stale: bool, as_json: bool, repo: Path) -> int:
    """The in-flight and batch size per alias of FUNCTION's next batch, and the constraint that binds.

    From folknet.json's limits (max_inflight, rpm, tpm), the latest `nev rig throughput` sweeps
    (NEV_THROUGHPUT_DIR), the function's last round records in target/batch (the lane's CPU,
    tokens per candidate, a 429's cooldown) and the budget left. Reads files only; runs anywhere.
    A sweep older than the last change to the serving configuration (NEV_RIG_NOTES's change log)
    is not used, and a line says which, how old, what changed and how to refresh it.
    """
    from bench.batch_cmd import plan_command

    return plan_command(function, repo, models, budget_tokens, budget_gpu_s, as_json,
                        echo=click.echo,
                        accept_stale=accept_stale)


@click.group("oracle")
def oracle() -> None:
    """The three-browser oracle: cached ground truth from Chromium, Firefox and WebKit."""


@oracle.command("build")
@click.argument("corpora", nargs=-1, required=True)
@click.option("--shard", help="i/n: take seeds i, i+n, ... (written to CORPUS.shard-i-of-n)")
@click.option("--engines", default="chromium,firefox,webkit", show_default=True)
@click.option("--cases", type=int, help="Seeds 0..N-1 (before sharding; default NEV_CORPUS_CASES, 1000).")
@click.option("--json", "as_json", is_flag=True, help="Print the manifests as JSON (one object per corpus).")
def oracle_build(corpora: tuple[str, ...], shard: str | None, engines: str, cases: int | None, as_json: bool) -> int:
    """Generate, render and vote corpora; write each once, keyed by the engine versions.

    Writes NEV_CORPUS_DIR/CORPUS/ (corpus/ of the repository by default) for each CORPUS, starting
    the engines once for all of them; an up-to-date corpus is left as it is. With a corpus store
    (on a lane: the share's corpora/; NEV_CORPUS_STORE) a corpus another copy built is copied, not
    rendered. Exit 0 done, 1 an engine failed, 2 bad arguments, 143 terminated (nothing published).
    """
    from bench.oracle import store_service
    from bench.oracle.build import build_many, summary_lines
    from bench.oracle.cases import Shard
    from bench.oracle.engines import parse_engines
    from bench.oracle.shared import store_root
    from lanes.base import settings
    from lanes.base.gitrun import Repo
    from lanes.base.ui import emit_json

    root = settings.path_under(settings.CORPUS_DIR, Repo(Path.cwd()).toplevel_or_self())
    count = cases if cases is not None else settings.get_int(settings.CORPUS_CASES)
    if store_service.available():
        # in a gate's jail, where the store is read-only: nev's builder outside builds it
        asked = store_service.Asked(corpora, parse_engines(engines), count, shard)
        results = store_service.build(asked, root)
    else:
        results = build_many(corpora, root=root, shard=Shard.parse(shard), engine_names=parse_engines(engines),
                             count=count, store_root=store_root())
    if as_json:
        rows = [{"folder": str(r.folder), "written": r.written, "rendered": r.rendered,
                 "manifest": r.manifest.to_json(),
                 "seconds": round(r.seconds, 2), "rates": r.rates} for r in results]
        emit_json(rows[0] if len(rows) == 1 else rows)
    else:
        for r in results:
            for line in summary_lines(r):
                click.echo(line)
    return 0


@oracle.command("serve-store", hidden=True)
@click.option("--fd", type=int, required=True,
              help="The listening socket the lane agent hands over.")
def oracle_serve_store(fd: int) -> int:
    """nev's store builder for one gate, outside its jail (started by the lane agent)."""
    from bench.oracle.store_service import serve

    return serve(fd)


@oracle.command("render")
@click.argument("pages", nargs=-1, required=True)
@click.option("--engines", default="chromium,firefox,webkit", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: one result per page and engine.")
def oracle_render(pages: tuple[str, ...], engines: str, as_json: bool) -> int:
    """Render pages (files or folders) in the engines; print rects per element id and the vote.

    Elements with data-expected-width/-height/-x/-y are checked in every engine;
    exit 1 when one does not match.
    """
    from bench.oracle.engines import parse_engines
    from bench.oracle.render import collect_pages, format_pages, render_pages
    from bench.oracle.vote import DEFAULT_TOLERANCE
    from lanes.base.ui import emit_json

    results = render_pages(collect_pages(pages), parse_engines(engines), DEFAULT_TOLERANCE)
    if as_json:
        emit_json([r.to_json() for r in results])
    else:
        for line in format_pages(results):
            click.echo(line)
    return 1 if any(r.expectation_failures for r in results) else 0


@oracle.command("engines")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: one object per engine (version, starts).")
def oracle_engines(as_json: bool) -> int:
    """Versions of the three engines found here, and whether each starts (exit 1 if one does
    not)."""
    from bench.oracle.render import engines_report
    from lanes.base.ui import emit_json

    rows = engines_report()
    if as_json:
        emit_json(rows)
    else:
        for r in rows:
            state = f"starts ({r['seconds']} s)" if r["starts"] else f"does not start: {r.get('error')}"
            click.echo(f"{r['engine']:<9} {r['version'] or '-':<18} {state}")
    return 0 if all(r["starts"] for r in rows) else 1


@oracle.command("audio")
@click.option("--engines", default="chromium,firefox,webkit", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: one object per engine.")
def oracle_audio(engines: str, as_json: bool) -> int:
    """Whether a realtime AudioContext runs in each engine here (exit 1 if one does not).

    On a lane it plays into the lane's PulseAudio null sink (docs/lanes.md, the audio sink).
    """
    from bench.audiocheck import check_all, to_json
    from bench.oracle.engines import parse_engines
    from lanes.base.ui import emit_json

    outs = check_all(parse_engines(engines))
    if as_json:
        emit_json(to_json(outs))
    else:
        for o in outs:
            click.echo(o.line())
    return 0 if all(o.ok for o in outs) else 1


@click.group("floors")
def floors() -> None:
    """Per-function score floors that only rise (docs/floors.md)."""


_REPO = click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=".",
                     show_default=True, help="The repository holding the engine (NEV_ENGINE_DIR inside it).")


def _elsewhere(repo: Path, argv: list[str]) -> int | None:
    """Off a lane, run `nev ARGV` on one (as `nev batch run` does: lane-only, exit 3 with none) and
    return its status; on a lane (NEV_ON_LANE) None: score here."""
    from bench import onlane

    if onlane.on_lane():
        return None
    from lanes.base.gitrun import Repo

    return onlane.run_on_lane(Repo(repo).toplevel_or_self(), ["nev", *argv])


def _scoring(repo: Path) -> Scoring:
    from bench.floors import scoring_for
    from lanes.base.gitrun import Repo

    return scoring_for(Repo(repo).toplevel_or_self())


@floors.command("check")
@_REPO
def floors_check(repo: Path) -> int:
    """Score every generated function on fresh three-browser ground truth; fail on a drop, a
    shrunken corpus or zero passes.

    Runs on a build lane (this worktree's copy there; here only when NEV_ON_LANE is set), which
    builds each listed corpus with Chromium, Firefox and WebKit or finds it under the key of their
    versions. Exits 0 when every floor holds, 1 when one is broken (one line naming each), 3 when
    no lane answered (nothing scored), 11 when there is no three-browser ground truth (a corpus
    built with fewer, or a browser missing on the lane: named).
    """
    from bench.floors import check, default_scorer

    there = _elsewhere(repo, ["floors", "check"])
    if there is not None:
        return there
    return check(_scoring(repo), default_scorer(), echo=click.echo)


@floors.command("raise")
@click.option("--print-raises", is_flag=True, help="Print each raised floor (old -> new).")
@_REPO
def floors_raise(print_raises: bool, repo: Path) -> int:
    """Write each floor the fresh score is above and commit only those files.

    Refuses on uncommitted changes or off main; writes nothing when scoring fails,
    no lane answers (exit 3) or there is no three-browser ground truth (exit 11);
    never lowers a number. Scores on a build lane (this worktree's copy there, as the landing's
    raise does), or here when NEV_ON_LANE is set; the floor files are written and committed here.
    """
    from bench import onlane
    from bench.floors import Scorer, default_scorer, raise_floors

    scorer: Scorer = default_scorer()
    if not onlane.on_lane():
        from bench.scores import lane_scorer

        scorer = lane_scorer
    return raise_floors(_scoring(repo), scorer, print_raises=print_raises, echo=click.echo)


@click.command("scores")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (what a lane scorer reads back).")
@_REPO
def scores(as_json: bool, repo: Path) -> int:
    """Every generated function against its corpus: passed/run, floor, batch, status.

    Runs where `nev floors check` runs (a build lane; here only with NEV_ON_LANE), on the same
    fresh ground truth; exits 0, 3 when no lane answered, 11 with no three-browser ground truth.
    """
    from bench.floors import default_scorer
    from bench.scores import show

    there = _elsewhere(repo, ["scores", "--json"] if as_json else ["scores"])
    if there is not None:
        return there
    return show(_scoring(repo), default_scorer(), as_json, echo=click.echo)


def _ledger_name(root: Path) -> str:
    """The ledger a gate of `root` files its batches under: its lane copy's name (the lane agent
    sets NEV_LEDGER to `ledger/<copy>.jsonl`); on a lane, the copy's folder is that name."""
    from lanes import payload
    from lanes.base import settings
    from lanes.base.gitrun import GitError, Repo

    if settings.get(settings.ON_LANE):
        return root.name
    try:
        return payload.copy_name_of(Repo(root))
    except GitError:
        return root.name


@click.group("ledger", invoke_without_command=True)
@click.option("--worktree", help="Whose batches (default: this worktree's lane copy's name)")
@click.option("--list", "list_all", is_flag=True,
              help="The ledgers there are (one per worktree or job): batches, last batch's time.")
@click.option("-n", "--last", type=click.IntRange(min=1), help="Only the last N batches.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the lines as they are stored, `[]` when there are none "
                   "(with --list: one JSON array).")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=".", show_default=True)
@click.pass_context
def ledger(ctx: click.Context, worktree: str | None, list_all: bool, last: int | None,
           as_json: bool, repo: Path) -> int:
    """The batches, as a table: one row per model of each batch (ledger/<worktree>.jsonl on the
    share).

    With --list, the ledgers in the share's ledger folder, the most recent first. `nev ledger
    announce NAME`: a landing's announcement of NAME's batches."""
    import json

    if ctx.invoked_subcommand is not None:
        return 0

    from bench import ledger as ledger_mod
    from bench.batch_cmd import repo_root
    from lanes.base.ui import emit_json

    if list_all:
        if worktree or last:
            raise click.UsageError("--list shows every ledger; leave out --worktree and --last")
        folder = ledger_mod.ledger_dir()
        rows = ledger_mod.ledgers(folder) if folder.is_dir() else []
        if as_json:
            emit_json([r.to_json() for r in rows])
        elif not rows:
            click.echo(f"no ledgers in {folder}")
        else:
            for row in ledger_mod.ledgers_table(rows):
                click.echo(row)
        return 0
    name = worktree or _ledger_name(repo_root(repo))
    path = ledger_mod.ledger_dir() / f"{name}.jsonl"
    if as_json:
        lines = ledger_mod.read(path)
        if not lines:
            click.echo("[]")        # no batches: an empty list, as every --json prints one
            return 0
        for line in lines[-last:] if last else lines:
            click.echo(json.dumps(line.to_json(), sort_keys=True))
        return 0
    return ledger_mod.show(path, echo=click.echo, last=last)


@ledger.command("announce")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True,
              help="The announcement as the webhook's payload carries it.")
@click.option("--format", "fmt", type=click.Choice(["nev", "discord", "slack"]), default=None,
              help="Print the body a webhook of this format is sent (JSON).")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=".",
              show_default=True, help="The repository whose floor files give the floors.")
def announce(name: str, as_json: bool, fmt: str | None, repo: Path) -> int:
    """The announcement a landing of NAME posts, from NAME's ledger (ledger/NAME.jsonl on the
    share: a job's name, or a track's): each batch's start and end, lane CPU-seconds, and per
    model the candidates, compiled count, best score, tokens and draw seconds, with each
    function's floor as this repository holds it now. No host name, address, key or URL."""
    from bench import announce as ann
    from lanes.base import chatformat, notify
    from lanes.base.ui import emit_json

    lines, bad = ann.read([name])
    a = ann.build(name, lines, ann.floors_now(repo, list(ann.functions_in(lines))), unreadable=bad)
    if fmt is not None:
        msg = notify.Notice(kind="landed", state="event", at=notify.now_iso(), rig="",
                            subject=name, detail=a.text(), key=f"landed/{name}",
                            announcement=a.to_json())
        emit_json(chatformat.render(fmt, msg))
    elif as_json:
        emit_json(a.to_json())
    else:
        click.echo(a.render())
    return 0
