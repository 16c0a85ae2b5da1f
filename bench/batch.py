"""The generation loop: best-of-N sampling through the gateway, verify, keep or sample again,
escalate.

One run of `nev batch run FUNCTION` is a sequence of batches (rounds):

1. draw: every model share of the round draws its N candidates through the gateway
   (`bench.gateway`), all shares at once, each at its in-flight limit;
2. extract the code block of each answer; dedupe by a normalised hash (comments and
   whitespace do not count), also against the candidates of earlier rounds;
3. compile and score the new unique candidates in one probe (`crates_bridge.candidates.probe`);
4. a passing version is kept: `generated/<name>.rs` with the spec steps as comments, its
   provenance record (never rewritten) and its floor; otherwise the next round's prompt
   carries the new failing cases, and after K rounds with no pass the capacity-tier model
   gets the best failing versions with their exact per-box geometry differences.

Nothing is accepted on a model's word: escalated output goes through the same probe. Each
batch appends one line to the ledger and its full record (every call metered) to the run's
folder.

The shares are `bench.shares`, answers become candidates in `bench.answers`, verdicts and what
the next prompt carries are `bench.verdicts`, a kept version is written by `bench.keep`; this
module draws, runs the rounds, and is `nev batch run`'s thin shell.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import folknet as fk
from bench import ledger, prompt
from bench import rounds as rounds_mod
from bench.answers import Candidate, code_hash, extract_code
from bench.gateway import CallFailed, CallRecord, Gateway, split_draws
from bench.keep import keep
from bench.phases import Phases, own_cpu_s
from bench.rounds import ModelRound, RoundRecord, ShareStatus, now
from bench.shares import Share, default_escalation, default_models, parse_models, resolve
from bench.verdicts import Judged, best_versions, failing_cases, judge, pass_at
from crates_bridge.candidates import probe
from crates_bridge.corpus import read_manifest
from crates_bridge.errors import BridgeError
from crates_bridge.registry import PROVENANCE_SUFFIX
from crates_bridge.workspace import Workspace
from lanes.base.errors import ConfigError, NevError, UsageError
from lanes.base.exitcodes import Exit
from lanes.base.mask import mask


@dataclass
class RunConfig:
    function: str
    shares: list[Share]
    escalation: Share | None
    escalate_after: int
    max_batches: int
    engine_dir: Path
    corpus_dir: Path
    workdir: Path
    ledger_path: Path
    specs_dir: Path = prompt.SPECS_DIR
    seed: int | None = None
    batch_id: str | None = None


@dataclass
class ShareResult:
    share: Share
    texts: list[str] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    error: str | None = None
    draw_s: float = 0.0
    inflight: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    batch_id: str
    passed: bool
    rounds: list[RoundRecord]
    kept: Path | None = None
    message: str = ""
    exit_code: int = 0


def _seed(base: str, *parts: object) -> int:
    return int(hashlib.sha256("|".join([base, *map(str, parts)]).encode()).hexdigest()[:8], 16)


def model_round(r: ShareResult, new: Sequence[Candidate], judged: Mapping[str, Judged]) -> ModelRound:
    """One model's share of a round, from its draw and the verdicts of its candidates."""
    mine = [c for c in new if c.alias == r.share.alias]
    scored = [judged[c.hash] for c in mine if judged[c.hash].cases_run]
    compiled = [c for c in mine if judged[c.hash].status != "compile-error"]
    npass = sum(1 for c in mine if judged[c.hash].status == "passed")
    return ModelRound(
        tier=r.share.tier, n=r.share.n, inflight=r.share.inflight, note=r.share.note,
        candidates=len(mine), answers=len(r.texts), compiled=len(compiled),
        passed=npass, best=max((j.cases_passed for j in scored), default=None),
        tokens_in=sum(x.prompt_tokens for x in r.calls), tokens_out=sum(x.completion_tokens for x in r.calls),
        cached_tokens=sum(x.cached_tokens for x in r.calls),
        draw_s=round(r.draw_s, 3), calls=len(r.calls),
        retries=sum(x.retries for x in r.calls), rate_limited=sum(x.rate_limited for x in r.calls),
        pacer_wait_s=round(sum(x.pacer_wait_s for x in r.calls), 3),
        status=ShareStatus.FAILED if r.error else ShareStatus.OK, error=r.error,
        inflight_meter=r.inflight, pass_at=pass_at(len(mine), npass))


def draw_share(gw: Gateway, share: Share, messages: list[dict[str, str]], seed_base: str, rnd: int) -> ShareResult:
    """Draw one share's candidates at its in-flight limit; the first failed call fails the share
    (its reason kept) and no new call of it starts."""
    res = ShareResult(share)
    sizes = split_draws(share.n, share.inflight, share.supports_n)
    stop = threading.Event()
    lock = threading.Lock()
    t0 = time.monotonic()

    def one(i: int, n: int) -> None:
        if stop.is_set():
            return
        try:
            texts, rec = gw.call(share.alias, messages, n, _seed(seed_base, rnd, share.alias, i))
        except CallFailed as e:
            stop.set()
            with lock:
                res.calls.append(e.record)
                res.error = res.error or e.record.error
            return
        with lock:
            res.texts.extend(texts)
            res.calls.append(rec)

    with ThreadPoolExecutor(max_workers=share.inflight) as ex:
        list(ex.map(lambda a: one(*a), list(enumerate(sizes))))
    res.draw_s = time.monotonic() - t0
    res.inflight = gw.aliases[share.alias].meter.summary()
    return res


def read_cases(corpus_dir: Path) -> dict[str, dict]:
    out = {}
    for line in (corpus_dir / "cases.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            c = json.loads(line)
            out[c["id"]] = c
    return out


def signature_of(ws: Workspace, function: str) -> str:
    prov = ws.generated_dir / f"{function}{PROVENANCE_SUFFIX}"
    if prov.is_file():
        sig = json.loads(prov.read_text()).get("signature")
        if isinstance(sig, str):
            return sig
    funcs = (ws.crate_dir("generation") / "src" / "functions.rs").read_text()
    m = re.search(rf"function_kind!\({function},\s*(\w+),\s*(\w+)", funcs)
    if not m:
        raise ConfigError(f"`{function}` is not a function kind of the engine at {ws.root}; "
                          f"add a function_kind! line for it")
    return f"pub fn {function}(input: &{m.group(1)}) -> {m.group(2)}"


def run(cfg: RunConfig, gw: Gateway, echo: Callable[[str], None] = print) -> RunResult:
    spec = prompt.load_spec(cfg.function, cfg.specs_dir)
    ws = Workspace(cfg.engine_dir)
    signature = signature_of(ws, cfg.function)
    iface = prompt.interfaces((ws.crate_dir("layout") / "src" / "css.rs").read_text(encoding="utf-8"), signature)
    try:
        manifest = read_manifest(cfg.corpus_dir)
    except BridgeError as e:
        raise ConfigError(str(e)) from None
    if manifest.function != cfg.function:
        raise ConfigError(f"{cfg.corpus_dir}: a corpus of `{manifest.function}`, not `{cfg.function}`; "
                          f"pass the corpus of {cfg.function}")
    corpus = read_cases(cfg.corpus_dir)
    batch_id = cfg.batch_id or f"{cfg.function}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:4]}"
    seed_base = str(cfg.seed) if cfg.seed is not None else batch_id
    for sh in cfg.shares + ([cfg.escalation] if cfg.escalation else []):
        if sh.alias not in gw.aliases:
            gw.add_alias(sh.alias, sh.inflight, sh.declared_max or sh.inflight, sh.supports_n)
    run_dir = cfg.workdir / batch_id
    run_dir.mkdir(parents=True, exist_ok=True)

    judged: dict[str, Judged] = {}
    all_cands: list[Candidate] = []
    rounds: list[RoundRecord] = []
    failing: list[prompt.FailingCase] = []
    failed_aliases: dict[str, str] = {}
    for rnd in range(1, cfg.max_batches + 1):
        escalated = rnd > cfg.escalate_after and cfg.escalation is not None
        shares = [cfg.escalation] if escalated and cfg.escalation else cfg.shares
        shares = [s for s in shares if s.alias not in failed_aliases]
        if not shares:
            break
        versions = best_versions(list(judged.values())) if escalated else []
        p = prompt.build(spec, signature, iface, failing, versions, cases_run=manifest.cases)
        (run_dir / f"prompt-r{rnd}.txt").write_text(p.text, encoding="utf-8")
        ph = Phases()
        start, cpu0 = now(), own_cpu_s()
        echo(f"batch {batch_id} round {rnd}{' (escalated)' if escalated else ''}: "
             + ", ".join(f"{s.alias} {s.n} at {s.inflight}" for s in shares))
        with ph.phase("draw"), ThreadPoolExecutor(max_workers=len(shares)) as ex:
            results = list(ex.map(draw_share, [gw] * len(shares), shares, [p.messages] * len(shares),
                                  [seed_base] * len(shares), [rnd] * len(shares)))
        new: list[Candidate] = []
        extracted: dict[str, int] = {}
        for r in results:
            if r.error:
                failed_aliases[r.share.alias] = r.error
                echo(f"  {r.share.alias}: share failed: {r.error}")
            for t in r.texts:
                code = extract_code(t, cfg.function)
                if code is None:
                    continue
                extracted[r.share.alias] = extracted.get(r.share.alias, 0) + 1
                new.append(Candidate(r.share.alias, rnd, code, code_hash(code)))
        fresh: dict[str, str] = {}
        for c in new:
            if c.hash not in judged and c.hash not in fresh:
                fresh[c.hash] = c.source
        order = list(fresh)
        compile_s = score_s = 0.0
        if order:
            try:
                with ph.phase("compile+score"):
                    b = probe(ws, cfg.function, [fresh[h] for h in order], cfg.corpus_dir, run_dir / f"probe-r{rnd}")
            except BridgeError as e:
                raise NevError(f"the candidate probe failed: {e}", 1) from None
            compile_s, score_s = b.compile_s, b.score_s
            for h, v in zip(order, b.verdicts, strict=True):
                judged[h] = judge(v, fresh[h], h)
        ph.phases["compile"] = {"s": round(compile_s, 3), "cpus_busy": ph.phases.get("compile+score", {}).get("cpus_busy")}
        ph.phases["score"] = {"s": round(score_s, 3), "cpus_busy": ph.phases.get("compile+score", {}).get("cpus_busy")}
        all_cands.extend(new)
        passing = [c for c in new if judged[c.hash].status == "passed"]
        compiled_n = sum(1 for c in new if judged[c.hash].status != "compile-error")
        best = max((judged[c.hash].cases_passed for c in new if judged[c.hash].cases_run), default=None)
        record = RoundRecord(
            batch=batch_id, function=cfg.function, round=rnd, escalated=escalated,
            start=start, end=now(), lane_cpu_s=round(own_cpu_s() - cpu0, 2),
            candidates=len(new), unique=len({c.hash for c in new}), new_unique=len(order),
            duplicates=len(new) - len({c.hash for c in new}),
            compiled=compiled_n, best=best, cases_run=manifest.cases,
            passed=bool(passing), prompt_prefix_chars=p.prefix_chars, prompt_chars=len(p.text),
            failing_cases_shown=len(failing), versions_shown=len(versions),
            phases=ph.to_json(), models={r.share.alias: model_round(r, new, judged) for r in results},
            pass_at=pass_at(len(new), len(passing)), calls=[x.to_json() for r in results for x in r.calls])
        rounds.append(record)
        rounds_mod.write(run_dir, record)
        ledger.append(cfg.ledger_path, ledger.line_for(record.to_json()))
        echo(f"  {len(new)} candidates, {record.unique} unique ({len(order)} new), {compiled_n} compiled, "
             f"best {best if best is not None else '-'}/{manifest.cases}, "
             f"pass@1 {record.pass_at_1:.2f}, draw {ph.phases['draw']['s']:.1f} s")
        if passing:
            kept = keep(ws, spec, signature, batch_id, judged[passing[0].hash], all_cands, judged, rounds,
                        cfg.corpus_dir, run_dir)
            return RunResult(batch_id, True, rounds, kept, f"{cfg.function}: kept a passing version from "
                             f"{passing[0].alias} (round {rnd}) in {kept}", 0)
        failing = failing_cases(list(judged.values()), corpus)
    why = "; ".join(f"{a}: {e}" for a, e in failed_aliases.items())
    msg = (f"{cfg.function}: no version passed in {len(rounds)} batch(es)"
           + (f" (failed models: {why})" if why else "") + "; nothing kept")
    return RunResult(batch_id, False, rounds, None, mask(msg), Exit.FAILED)


# ---- the command (thin shell) ----

def repo_root(repo: Path) -> Path:
    from lanes.base.gitrun import Repo

    return Repo(repo).toplevel_or_self()


def config_from_settings(function: str, repo: Path, models: str | None, max_batches: int | None,
                         escalate_after: int | None, escalate: str | None, seed: int | None,
                         corpus: Path | None = None) -> RunConfig:
    from lanes.base import settings

    if not re.fullmatch(r"[a-z][a-z0-9_]*", function):
        raise UsageError(f"`{function}` is not a function name (lower_snake_case)")
    root = repo_root(repo)
    net = fk.load(fk.default_path())
    models = models or settings.get(settings.MODELS)
    shares = resolve(parse_models(models), net) if models else default_models(net)
    if not shares:
        raise UsageError(f"no sampling model: pass --models ALIAS:N:INFLIGHT or declare one in {net.path}")
    esc_text = escalate or settings.get(settings.ESCALATE_MODEL)
    escalation = resolve(parse_models(esc_text), net)[0] if esc_text else default_escalation(net)
    mb = max_batches if max_batches is not None else settings.get_int(settings.MAX_BATCHES)
    ea = escalate_after if escalate_after is not None else settings.get_int(settings.ESCALATE_AFTER)
    if mb < 1 or ea < 0:
        raise UsageError("--max-batches must be at least 1 and --escalate-after at least 0")
    engine = settings.path_under(settings.ENGINE_DIR, root)
    corpus_root = settings.path_under(settings.CORPUS_DIR, root)
    return RunConfig(function=function, shares=shares, escalation=escalation, escalate_after=ea,
                     max_batches=mb, engine_dir=engine, corpus_dir=corpus or corpus_root / function,
                     workdir=root / "target" / "batch", ledger_path=ledger.ledger_dir() / f"{ledger_name(root)}.jsonl",
                     seed=seed)


def ledger_name(root: Path, environ: Mapping[str, str] | None = None) -> str:
    """Whose batches these are: NEV_LEDGER_NAME (a job's stages: the job's name), else the worktree's folder."""
    from lanes.base import settings

    name = (settings.get(settings.LEDGER_NAME, environ) or "").strip()
    if "/" in name or name in (".", ".."):
        raise UsageError(f"NEV_LEDGER_NAME={name!r} is not a file name; give a plain name such as the job's")
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


def command(function: str, repo: Path, models: str | None, max_batches: int | None, escalate_after: int | None,
            escalate: str | None, seed: int | None, corpus: Path | None, argv: Sequence[str],
            echo: Callable[[str], None] = print) -> int:
    """`nev batch run`: on a lane, run here; else re-run on a lane (exit 3 with none)."""
    from bench import onlane
    from bench.gateway import url_from_settings

    if not onlane.on_lane():
        from lanes.base import settings

        root = repo_root(repo)
        engine = Path(settings.value(settings.ENGINE_DIR))
        pull = ["target/batch"] + ([str(engine / "crates/layout/src/generated")] if not engine.is_absolute() else [])
        return onlane.run_on_lane(root, ["nev", *argv], pull=pull)
    cfg = config_from_settings(function, repo, models, max_batches, escalate_after, escalate, seed, corpus)
    for s in cfg.shares + ([cfg.escalation] if cfg.escalation else []):
        if s.note:
            echo(f"{s.alias}: {s.note}")
    gw = Gateway(url_from_settings(), gateway_key(repo_root(repo)))
    res = run(cfg, gw, echo=echo)
    echo(res.message)
    return res.exit_code
