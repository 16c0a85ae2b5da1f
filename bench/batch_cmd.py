"""`nev batch run` and `nev batch plan`: the thin shell of the generation loop (`bench.batch`).

A run's configuration is read from the settings here (`config_from_settings`: the shares, the
budget, the ledger, what the plan is made from); off a lane, `nev batch run` re-runs itself on
one (`bench.onlane`); on a lane it runs the loop in place.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from bench import folknet as fk
from bench import ledger, provenance, runmanifest
from bench import plan as plan_mod
from bench import sweeps as sweeps_mod
from bench.batch import RunConfig, plan_round, run
from bench.budget import Budget, Meter
from bench.gateway import Gateway
from bench.ledger import spent_in
from bench.shares import default_escalation, default_models, parse_models, resolve
from lanes.base import ui
from lanes.base.errors import UsageError


def repo_root(repo: Path) -> Path:
    from lanes.base.gitrun import Repo

    return Repo(repo).toplevel_or_self()


def config_from_settings(
    function: str,
    repo: Path,
    models: str | None,
    max_batches: int | None,
    escalate_after: int | None,
    escalate: str | None,
    seed: int | None,
    corpus: Path | None = None,
    budget_tokens: str | None = None,
    budget_gpu_s: str | None = None,
    supersede: bool = False,
    seed_failures: bool = False,
    accept_stale: bool = False,
) -> RunConfig:
    from lanes.base import changelog, settings

    if not re.fullmatch(r"[a-z][a-z0-9_]*", function):
        raise UsageError(f"`{function}` is not a function name (lower_snake_case)")
    root = repo_root(repo)
    net = fk.load(fk.default_path())
    models = models or settings.get(settings.MODELS)
    shares = resolve(parse_models(models), net) if models else default_models(net)
    if not shares:
        raise UsageError(
            f"no sampling model: pass --models ALIAS:N:INFLIGHT or declare one in {net.path}"
        )
    esc_text = escalate or settings.get(settings.ESCALATE_MODEL)
    escalation = resolve(parse_models(esc_text), net)[0] if esc_text else default_escalation(net)
    mb = max_batches if max_batches is not None else settings.get_int(settings.MAX_BATCHES)
    ea = escalate_after if escalate_after is not None else settings.get_int(settings.ESCALATE_AFTER)
    if mb < 1 or ea < 0:
        raise UsageError("--max-batches must be at least 1 and --escalate-after at least 0")
    engine = settings.path_under(settings.ENGINE_DIR, root)
    corpus_root = settings.path_under(settings.CORPUS_DIR, root)
    budget = Budget.parse(
        budget_tokens if budget_tokens is not None else settings.get(settings.BUDGET_TOKENS),
        budget_gpu_s if budget_gpu_s is not None else settings.get(settings.BUDGET_GPU_S),
        "--budget-tokens/--budget-gpu-s (NEV_BUDGET_TOKENS, NEV_BUDGET_GPU_S)",
    )
    ledger_path = ledger.ledger_dir() / f"{ledger_name(root)}.jsonl"
    own_specs = settings.path_under(settings.SPECS_DIR, root)
    workdir = root / "target" / "batch"
    # a job's budget is the job's: the batches its ledger already records count as spent
    counted = budget and settings.get(settings.LEDGER_NAME)
    spent = spent_in(ledger.read_for_budget(ledger_path, ui.info)) if counted else (0, 0.0)
    sweeps = plan_mod.read_throughput(settings.path(settings.THROUGHPUT_DIR))
    # a sweep measured before the serving configuration last changed sizes nothing (bench.sweeps)
    changed = sweeps_mod.last_change(changelog.read(settings.path(settings.RIG_NOTES)))
    old = sweeps_mod.stale(sweeps, changed)
    asked = {s.alias for s in shares + ([escalation] if escalation else [])}
    old = {a: st for a, st in old.items() if a in asked}
    if not accept_stale:
        sweeps = {a: sw for a, sw in sweeps.items() if a not in old}
    return RunConfig(
        function=function,
        shares=shares,
        escalation=escalation,
        escalate_after=ea,
        max_batches=mb,
        engine_dir=engine,
        corpus_dir=corpus or corpus_root / function,
        workdir=workdir,
        ledger_path=ledger_path,
        seed=seed,
        budget=budget,
        declared=plan_mod.declared_of(net),
        measured={a: plan_mod.Measured.from_sweep(sw) for a, sw in sweeps.items()},
        history=plan_mod.latest_records(workdir, function),
        spent_before=spent,
        specs_dir=provenance.spec_path(function, root, own_specs).parent,
        root=root,
        supersede=supersede,
        seed_failures=seed_failures,
        stale_sweeps=old,
        accept_stale=accept_stale,
    )


def ledger_name(root: Path, environ: Mapping[str, str] | None = None) -> str:
    """Whose batches these are: NEV_LEDGER_NAME (a job's stages: the job's name), else the worktree's folder."""
    from lanes.base import settings

    name = (settings.get(settings.LEDGER_NAME, environ) or "").strip()
    if "/" in name or name in (".", ".."):
        raise UsageError(
            f"NEV_LEDGER_NAME={name!r} is not a file name; give a plain name such as the job's"
        )
    return name or root.name


def gateway_key(root: Path) -> str:
    """The run's key: NEV_MODEL_KEY_FILE; on a lane, the worktree's .env (NEV_MODEL_API_KEY) the gate copied."""
    from bench.gateway import read_key
    from lanes import dotenv
    from lanes.base import settings
    from lanes.base.mask import register_secret

    path = settings.get_path(settings.MODEL_KEY_FILE)
    if path is not None and path.exists():
        return read_key(path)
    key = dotenv.first(dotenv.read(root / ".env"), *settings.MODEL_API_KEY.names)
    if key:
        register_secret(key)
        return key
    return read_key(path)


def command(
    function: str,
    repo: Path,
    models: str | None,
    max_batches: int | None,
    escalate_after: int | None,
    escalate: str | None,
    seed: int | None,
    corpus: Path | None,
    argv: Sequence[str],
    echo: Callable[[str], None] = print,
    budget_tokens: str | None = None,
    budget_gpu_s: str | None = None,
    supersede: bool = False,
    seed_failures: bool = False,
    accept_stale: bool = False,
    manifest: Path | None = None,
) -> int:
    """`nev batch run`: on a lane, run here; else re-run on a lane (exit 3 with none). With
    `manifest`, draw again from the inputs a run manifest pins (bench.runmanifest)."""
    from bench import onlane
    from bench.gateway import url_from_settings

    if manifest is not None:
        given = [
            flag
            for flag, v in (
                ("--models", models),
                ("--max-batches", max_batches),
                ("--escalate-after", escalate_after),
                ("--escalate", escalate),
                ("--seed", seed),
            )
            if v is not None
        ]
        if given:
            raise UsageError(
                f"--manifest pins the models, the rounds and the seeds; leave out "
                f"{', '.join(given)}"
            )
    if not onlane.on_lane():
        from lanes.base import settings

        root = repo_root(repo)
        engine = Path(settings.value(settings.ENGINE_DIR))
        pull = ["target/batch"] + (
            [str(engine / "crates/layout/src/generated")] if not engine.is_absolute() else []
        )
        return onlane.run_on_lane(root, ["nev", *argv], pull=pull)
    pinned = None
    if manifest is not None:
        pinned = runmanifest.load(manifest)
        if pinned.function != function:
            raise UsageError(
                f"{manifest} is a run manifest of {pinned.function}, not {function}"
            )
        models, escalate = pinned.run.models, pinned.run.escalate
        max_batches, escalate_after = pinned.run.max_batches, pinned.run.escalate_after
    cfg = config_from_settings(
        function,
        repo,
        models,
        max_batches,
        escalate_after,
        escalate,
        seed,
        corpus,
        budget_tokens,
        budget_gpu_s,
        supersede,
        seed_failures,
        accept_stale,
    )
    if pinned is not None:
        cfg = replace(
            cfg,
            pinned=pinned,
            pinned_path=manifest,
            escalation=cfg.escalation if pinned.run.escalate else None,
        )
    for line in stale_lines(cfg):
        echo(line)
    for s in cfg.shares + ([cfg.escalation] if cfg.escalation else []):
        if s.note:
            echo(f"{s.alias}: {s.note}")
    gw = Gateway(url_from_settings(), gateway_key(repo_root(repo)))
    res = run(cfg, gw, echo=echo)
    echo(res.message)
    return res.exit_code


def stale_lines(cfg: RunConfig, now: dt.datetime | None = None) -> list[str]:
    """One line per stale sweep of the run's aliases: which, how old, what changed, what to do."""
    at = now or dt.datetime.now(dt.UTC)
    return [st.line(at, cfg.accept_stale) for st in cfg.stale_sweeps.values()]


def plan_command(
    function: str,
    repo: Path,
    models: str | None,
    budget_tokens: str | None,
    budget_gpu_s: str | None,
    as_json: bool,
    echo: Callable[[str], None] = print,
    accept_stale: bool = False,
) -> int:
    """`nev batch plan`: the first round's plan from what is declared and measured here (reads files only)."""
    from lanes.base.ui import emit_json

    cfg = config_from_settings(
        function,
        repo,
        models,
        None,
        None,
        None,
        None,
        None,
        budget_tokens,
        budget_gpu_s,
        accept_stale=accept_stale,
    )
    meter = Meter(cfg.budget, spent_tokens=cfg.spent_before[0], spent_gpu_s=cfg.spent_before[1])
    plans = plan_round(
        cfg, cfg.shares, meter, None, cfg.history, cfg.history[-1] if cfg.history else None
    )
    if as_json:
        now = dt.datetime.now(dt.UTC)
        emit_json(
            {
                "function": function,
                "budget": meter.to_json(),
                "plans": [p.to_json() for p in plans],
                "stale_sweeps": [st.to_json(now, accept_stale) for st in cfg.stale_sweeps.values()],
            }
        )
        return 0
    for line in stale_lines(cfg):
        echo(line)
    for row in plan_mod.render(plans):
        echo(row)
    if meter.bound is not None:
        echo(f"the budget bound: {meter.why}")
    return 0
