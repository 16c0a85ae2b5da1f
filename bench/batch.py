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
module draws and runs the rounds; `nev batch run`'s thin shell is `bench.batch_cmd`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench import ledger, prompt, provenance, runmanifest, sweeps
from bench import plan as plan_mod
from bench import rounds as rounds_mod
from bench.answers import Candidate, code_hash, extract_code
from bench.budget import Budget, BudgetStop, Limit, Meter
from bench.gateway import CallFailed, CallRecord, Gateway, split_draws
from bench.keep import keep
from bench.phases import Phases, own_cpu_s
from bench.rounds import ModelRound, RoundRecord, ShareStatus, now
from bench.shares import Share
from bench.verdicts import Judged, best_versions, failing_cases, judge, pass_at
from crates_bridge.candidates import probe
from crates_bridge.corpus import Manifest, read_manifest
from crates_bridge.errors import BridgeError
from crates_bridge.registry import PROVENANCE_SUFFIX
from crates_bridge.workspace import Workspace
from lanes.base import jsonfile
from lanes.base.errors import ConfigError, NevError
from lanes.base.exitcodes import Exit
from lanes.base.gitrun import Repo
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
    budget: Budget = field(default_factory=Budget)
    #: what the plan is made from (bench.plan): the declared limits, the latest sweeps, earlier
    #: round records of the function (the lane's CPU, tokens per candidate)
    declared: dict[str, plan_mod.Declared] = field(default_factory=dict)
    measured: dict[str, plan_mod.Measured] = field(default_factory=dict)
    history: list[dict[str, object]] = field(default_factory=list)   # plan.latest_records
    #: a job's earlier batches (its ledger lines): tokens and GPU-seconds already spent
    spent_before: tuple[int, float] = (0, 0.0)
    #: the repository root (the spec file's path in the record is relative to it)
    root: Path | None = None
    #: a regeneration: the kept version takes the place of an earlier batch's (its record is
    #: replaced, the old one kept in git history)
    supersede: bool = False
    #: the first round's prompt shows the current version's failing cases
    seed_failures: bool = False
    #: the run's aliases whose sweep is older than the last serving change (bench.sweeps), and
    #: whether they size the plan anyway (--accept-stale-sweeps); else `measured` leaves them out
    stale_sweeps: dict[str, sweeps.Stale] = field(default_factory=dict)
    accept_stale: bool = False
    #: `--manifest FILE`: the run manifest to draw again from (bench.runmanifest); its seeds are
    #: taken, and every input it pins is checked before the first draw
    pinned: runmanifest.RunManifest | None = None
    pinned_path: Path | None = None


@dataclass
class ShareResult:
    share: Share
    texts: list[str] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    error: str | None = None
    draw_s: float = 0.0
    inflight: dict[str, object] = field(default_factory=dict)   # the pacer's meter, as JSON
    budget_stop_at: float | None = None   # when the budget stopped this share's draw (monotonic)
    at_limit_s: float = 0.0               # seconds of this draw at the planned in-flight
    frozen_s: float = 0.0                 # seconds of this draw frozen by 429s
    slot_wait_s: float = 0.0              # seconds of this draw a call waited for a gateway slot


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


def model_round(r: ShareResult, new: Sequence[Candidate], judged: Mapping[str, Judged],
                constraints: dict[str, object] | None = None) -> ModelRound:
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
        gateway_waits=sum(x.gateway_waits for x in r.calls),
        pacer_wait_s=round(sum(x.pacer_wait_s for x in r.calls), 3),
        status=(ShareStatus.FAILED if r.error else ShareStatus.BUDGET if r.budget_stop_at is not None
                else ShareStatus.OK), error=r.error,
        inflight_meter=r.inflight, pass_at=pass_at(len(mine), npass),
        gpu_s=round(sum(x.gpu_s for x in r.calls), 3), constraints=constraints or {})


def constraints_of(p: plan_mod.AliasPlan, r: ShareResult, draw_end: float) -> dict[str, object]:
    """What bound a share in its round, for how long: its planned in-flight's constraint for the
    seconds it was at that in-flight, `gateway_limit` (also) for the seconds a call waited for a
    gateway slot (its "slots in use" 429s), `cooldown` for the seconds a rate limit's 429s froze it,
    `budget` from the budget's stop to the end of the round's draw (the whole draw when the budget
    sized it)."""
    seconds = {p.inflight_by.value: round(r.at_limit_s, 3)}
    if r.slot_wait_s > 0:
        gw = plan_mod.Bound.GATEWAY.value
        seconds[gw] = round(seconds.get(gw, 0.0) + r.slot_wait_s, 3)
    if r.frozen_s > 0:
        seconds[plan_mod.Bound.COOLDOWN.value] = round(r.frozen_s, 3)
    if r.budget_stop_at is not None:
        seconds[plan_mod.Bound.BUDGET.value] = round(max(0.0, draw_end - r.budget_stop_at), 3)
    elif p.bound is plan_mod.Bound.BUDGET:
        seconds[plan_mod.Bound.BUDGET.value] = round(r.draw_s, 3)
    longest = max(seconds, key=lambda k: seconds[k])
    bound = longest if seconds[longest] > 0 else p.bound.value
    return {"planned": p.bound.value, "why": p.why, "inflight_by": p.inflight_by.value, "seconds": seconds,
            "bound": bound}


def draw_share(gw: Gateway, share: Share, messages: list[dict[str, str]], seed_base: str, rnd: int) -> ShareResult:
    """Draw one share's candidates at its in-flight limit; the first failed call fails the share
    (its reason kept) and no new call of it starts."""
    res = ShareResult(share)
    sizes = split_draws(share.n, share.inflight, share.supports_n)
    stop = threading.Event()
    lock = threading.Lock()
    st = gw.aliases[share.alias]
    st.meter.limit = share.inflight            # at its limit: at the planned in-flight
    at0, frozen0, slot0 = st.meter.at_limit_s, st.pacer.frozen_s, st.slot_wait_s
    t0 = time.monotonic()
    if gw.meter is not None and gw.meter.bound is not None:   # the plan found the budget spent: draw nothing
        res.budget_stop_at = t0
        sizes = []

    def one(i: int, n: int) -> None:
        if stop.is_set():
            return
        try:
            texts, rec = gw.call(share.alias, messages, n, _seed(seed_base, rnd, share.alias, i))
        except BudgetStop:
            stop.set()
            with lock:
                res.budget_stop_at = res.budget_stop_at or time.monotonic()
            return
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
    res.inflight = st.meter.summary()
    res.at_limit_s = st.meter.at_limit_s - at0
    res.frozen_s = st.pacer.frozen_s - frozen0
    res.slot_wait_s = st.slot_wait_s - slot0
    return res


def _meter(cfg: RunConfig, gw: Gateway) -> Meter:
    """Register the run's aliases (paced at a declared requests/min) and meter the run's spend."""
    every = cfg.shares + ([cfg.escalation] if cfg.escalation else [])
    for sh in every:
        if sh.alias not in gw.aliases:
            rpm = cfg.declared[sh.alias].rpm if sh.alias in cfg.declared else None
            gw.add_alias(sh.alias, sh.inflight, sh.declared_max or sh.inflight, sh.supports_n,
                         rate=rpm / 60 if rpm else None)
    rates = {a: m.peak_output_tok_s for a, m in cfg.measured.items() if m.peak_output_tok_s}
    meter = Meter(cfg.budget, rates, answer_tokens=plan_mod.candidate_cost().answer_tokens,
                  spent_tokens=cfg.spent_before[0], spent_gpu_s=cfg.spent_before[1])
    escalates = cfg.escalation is not None and cfg.escalate_after < cfg.max_batches
    meter.check_rates(sh.alias for sh in (every if escalates else cfg.shares))
    gw.meter = meter
    return meter


def plan_round(cfg: RunConfig, shares: Sequence[Share], meter: Meter, prompt_chars: int | None,
               records: Sequence[Mapping[str, object]],
               last: Mapping[str, object] | None) -> list[plan_mod.AliasPlan]:
    """The round's plan (bench.plan) from the run's inputs, the budget left and the round before
    (a 429 that froze an alias there: cooldown). A budget that pays for no candidate at all stops
    the run here (the round draws nothing and says so)."""
    b = cfg.budget
    left = Budget(None if b.tokens is None else max(0, b.tokens - meter.spent_tokens),
                  None if b.gpu_s is None else max(0.0, b.gpu_s - meter.spent_gpu_s))
    cost = plan_mod.cost_of(records, prompt_chars, plan_mod.candidate_cost())
    cool = plan_mod.cooldowns(last)
    plans = plan_mod.plan([plan_mod.Ask(s.alias, s.n, s.inflight, s.supports_n) for s in shares], cfg.declared,
                          cfg.measured, plan_mod.lane_of(records), left, cost, cool)
    if b.tokens is not None and all(pl.n == 0 for pl in plans):
        meter.stop(Limit.TOKENS, f"the plan: {plans[0].why}")
    return plans


def read_cases(corpus_dir: Path) -> dict[str, dict]:
    out = {}
    p = corpus_dir / "cases.jsonl"
    for n, c in jsonfile.load_lines(p, "corpus cases file", f"rebuild the corpus ({corpus_dir.name})"):
        if not isinstance(c, dict) or not isinstance(c.get("id"), str):
            raise ConfigError(f"{p}: line {n}: field id is missing or not a string; rebuild the corpus")
        out[c["id"]] = c
    return out


def signature_of(ws: Workspace, function: str) -> str:
    prov = ws.generated_dir / f"{function}{PROVENANCE_SUFFIX}"
    if prov.is_file():
        rec = jsonfile.load(prov, "provenance record")
        sig = rec.get("signature") if isinstance(rec, dict) else None
        if isinstance(sig, str):
            return sig
    funcs = (ws.crate_dir("generation") / "src" / "functions.rs").read_text()
    m = re.search(rf"function_kind!\({function},\s*(\w+),\s*(\w+)", funcs)
    if not m:
        raise ConfigError(f"`{function}` is not a function kind of the engine at {ws.root}; "
                          f"add a function_kind! line for it")
    return f"pub fn {function}(input: &{m.group(1)}) -> {m.group(2)}"


def corpus_manifest(cfg: RunConfig) -> Manifest:
    """The corpus's manifest; ConfigError when it is missing or of another function."""
    try:
        manifest = read_manifest(cfg.corpus_dir)
    except BridgeError as e:
        raise ConfigError(str(e)) from None
    if manifest.function != cfg.function:
        raise ConfigError(f"{cfg.corpus_dir}: a corpus of `{manifest.function}`, not `{cfg.function}`; "
                          f"pass the corpus of {cfg.function}")
    return manifest


def run(cfg: RunConfig, gw: Gateway, echo: Callable[[str], None] = print) -> RunResult:
    spec = prompt.load_spec(cfg.function, cfg.specs_dir)
    ws = Workspace(cfg.engine_dir)
    signature = signature_of(ws, cfg.function)
    css = (ws.crate_dir("layout") / "src" / "css.rs").read_text(encoding="utf-8")
    iface = prompt.interfaces(css, signature)
    manifest = corpus_manifest(cfg)
    corpus = read_cases(cfg.corpus_dir)
    batch_id = cfg.batch_id or f"{cfg.function}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:4]}"
    meter = _meter(cfg, gw)
    seed_base, pinned = pin(cfg, spec, signature, iface, manifest, batch_id, gw)
    run_dir = cfg.workdir / batch_id
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest_sha = runmanifest.write(run_dir / runmanifest.NAME, pinned)
    echo(f"run manifest {run_dir / runmanifest.NAME} (sha256 {manifest_sha})")

    judged: dict[str, Judged] = {}
    all_cands: list[Candidate] = []
    rounds: list[RoundRecord] = []
    calls: list[CallRecord] = []
    failing: list[prompt.FailingCase] = []
    if cfg.seed_failures:
        failing = current_failures(ws, cfg, corpus, run_dir, echo)
    failed_aliases: dict[str, str] = {}
    prompt_hashes: list[str] = []
    for rnd in range(1, cfg.max_batches + 1):
        escalated = rnd > cfg.escalate_after and cfg.escalation is not None
        shares = [cfg.escalation] if escalated and cfg.escalation else cfg.shares
        shares = [s for s in shares if s.alias not in failed_aliases]
        if not shares:
            break
        versions = best_versions(list(judged.values())) if escalated else []
        p = prompt.build(spec, signature, iface, failing, versions, cases_run=manifest.cases)
        (run_dir / f"prompt-r{rnd}.txt").write_text(p.text, encoding="utf-8")
        prompt_hashes.append(provenance.sha256(p.text))
        plans = plan_round(cfg, shares, meter, len(p.text),
                           [*cfg.history, *(r.to_json() for r in rounds)], rounds[-1].to_json() if rounds else None)
        for pl in plans:
            echo("  " + pl.line())
        shares = [replace(s, n=pl.n, inflight=pl.inflight) for s, pl in zip(shares, plans, strict=True)]
        ph = Phases()
        start, cpu0 = now(), own_cpu_s()
        echo(f"batch {batch_id} round {rnd}{' (escalated)' if escalated else ''}: "
             + ", ".join(f"{s.alias} {s.n} at {s.inflight}" for s in shares))
        with ph.phase("draw"), ThreadPoolExecutor(max_workers=len(shares)) as ex:
            results = list(ex.map(draw_share, [gw] * len(shares), shares, [p.messages] * len(shares),
                                  [seed_base] * len(shares), [rnd] * len(shares)))
        draw_end = time.monotonic()
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
        both = ph.phases.get("compile+score")
        busy = both["cpus_busy"] if both is not None else None
        ph.phases["compile"] = {"s": round(compile_s, 3), "cpus_busy": busy}
        ph.phases["score"] = {"s": round(score_s, 3), "cpus_busy": busy}
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
            phases=ph.to_json(),
            models={r.share.alias: model_round(r, new, judged, constraints_of(pl, r, draw_end))
                    for r, pl in zip(results, plans, strict=True)},
            pass_at=pass_at(len(new), len(passing)), calls=[x.to_json() for r in results for x in r.calls],
            budget=meter.to_json() if cfg.budget else {})
        rounds.append(record)
        calls.extend(x for r in results for x in r.calls)
        rounds_mod.write(run_dir, record)
        ledger.append(cfg.ledger_path, ledger.line_for(record.to_json()))
        echo(f"  {len(new)} candidates, {record.unique} unique ({len(order)} new), {compiled_n} compiled, "
             f"best {best if best is not None else '-'}/{manifest.cases}, "
             f"pass@1 {record.pass_at_1:.2f}, draw {ph.phases['draw']['s']:.1f} s")
        if passing:
            inputs = provenance_inputs(cfg, spec, signature, css, iface, manifest, prompt_hashes,
                                       seed_base, calls)
            inputs["manifest"] = {"sha256": manifest_sha,
                                  "file": f"target/batch/{batch_id}/{runmanifest.NAME}"}
            kept = keep(ws, spec, signature, batch_id, judged[passing[0].hash], all_cands, judged, rounds,
                        cfg.corpus_dir, run_dir, inputs=inputs, supersede=cfg.supersede)
            return RunResult(batch_id, True, rounds, kept, f"{cfg.function}: kept a passing version from "
                             f"{passing[0].alias} (round {rnd}) in {kept}", 0)
        if meter.bound is not None:
            echo(f"  the budget bound: {meter.why}")
            break
        failing = failing_cases(list(judged.values()), corpus)
    if meter.bound is not None:
        return RunResult(batch_id, False, rounds, None, mask(
            f"{cfg.function}: no version passed before the budget bound after {len(rounds)} batch(es) "
            f"({meter.why}); nothing kept"), Exit.BUDGET)
    why = "; ".join(f"{a}: {e}" for a, e in failed_aliases.items())
    msg = (f"{cfg.function}: no version passed in {len(rounds)} batch(es)"
           + (f" (failed models: {why})" if why else "") + "; nothing kept")
    return RunResult(batch_id, False, rounds, None, mask(msg), Exit.FAILED)


def pin(cfg: RunConfig, spec: prompt.Spec, signature: str, iface: str, corpus_man: Manifest,
        batch_id: str, gw: Gateway) -> tuple[str, runmanifest.RunManifest]:
    """The run's seed base and its manifest, before the first draw. Drawing again from a manifest
    (`cfg.pinned`): its seeds, and refused (MANIFEST_CHANGED, one line) when an input no longer
    holds."""
    seed_base = (cfg.pinned.seed_base if cfg.pinned is not None
                 else str(cfg.seed) if cfg.seed is not None else batch_id)
    now = run_manifest(cfg, spec, signature, iface, corpus_man, seed_base, gw)
    if cfg.pinned is not None:
        why = runmanifest.difference(cfg.pinned, now)
        if why:
            raise NevError(f"run manifest {cfg.pinned_path}: {why}; nothing drawn (run without "
                           "--manifest to pin the inputs as they are now)", Exit.MANIFEST_CHANGED)
    return seed_base, now


def run_manifest(cfg: RunConfig, spec: prompt.Spec, signature: str, iface: str, corpus_man: Manifest,
                 seed_base: str, gw: Gateway) -> runmanifest.RunManifest:
    """The run's inputs as they are now, the aliases' model ids probed (bench.runmanifest)."""
    root = cfg.root or cfg.engine_dir
    escalates = cfg.escalation is not None and cfg.escalate_after < cfg.max_batches
    every = [("share", s) for s in cfg.shares] + ([("escalation", cfg.escalation)]
                                                  if escalates and cfg.escalation else [])

    def shares(ss: Sequence[Share]) -> str:
        return ",".join(f"{s.alias}:{s.n}:{s.inflight}" for s in ss)

    return runmanifest.build(
        function=cfg.function,
        spec=provenance.spec_block(spec, provenance.spec_path(cfg.function, root, cfg.specs_dir),
                                   root),
        prefix_sha256=provenance.sha256(prompt.SYSTEM + prompt.prefix(spec, signature, iface)),
        aliases=[runmanifest.PinnedAlias(s.alias, role, s.n, s.inflight) for role, s in every],
        served=runmanifest.probe(gw.endpoint, [s.alias for _, s in every]),
        corpus=provenance.corpus_block(cfg.corpus_dir.name, corpus_man), seed_base=seed_base,
        run=runmanifest.RunOptions(shares(cfg.shares),
                                   shares([cfg.escalation]) if cfg.escalation else None,
                                   cfg.max_batches, cfg.escalate_after),
        engine_commit=Repo(root).try_rev("HEAD"), nev=runmanifest.nev_version())


def provenance_inputs(cfg: RunConfig, spec: prompt.Spec, signature: str, css: str, iface: str,
                      manifest: Manifest, prompt_hashes: Sequence[str], seed_base: str,
                      calls: Sequence[CallRecord]) -> dict[str, object]:
    """What the kept version's record names of its inputs (bench.provenance, format 2): a JSON
    document, merged into the record `keep` writes."""
    spec_file = provenance.spec_path(cfg.function, cfg.root or cfg.engine_dir, cfg.specs_dir)
    aliases = list(dict.fromkeys(c.alias for c in calls))
    shared = prompt.prefix(spec, signature, iface)
    return {
        "spec": provenance.spec_block(spec, spec_file, cfg.root or cfg.engine_dir).to_json(),
        "definitions": provenance.definitions(css, signature),
        "prompt": {"prefix_sha256": provenance.sha256(prompt.SYSTEM + shared),
                   "rounds": list(prompt_hashes)},
        "models": [provenance.serving(a, ((c.served_model, c.fingerprint) for c in calls
                                          if c.alias == a)) for a in aliases],
        "seeds": {"base": seed_base,
                  "calls": {a: [c.seed for c in calls if c.alias == a] for a in aliases}},
        "corpus": provenance.corpus_block(cfg.corpus_dir.name, manifest).to_json(),
    }


def current_failures(ws: Workspace, cfg: RunConfig, corpus: dict[str, dict], run_dir: Path,
                     echo: Callable[[str], None]) -> list[prompt.FailingCase]:
    """The failing cases of the version kept now (a regeneration starts from them); none when
    there is no version or it passes every case."""
    path = ws.generated_dir / f"{cfg.function}.rs"
    if not path.is_file():
        return []
    source = path.read_text(encoding="utf-8")
    try:
        b = probe(ws, cfg.function, [source], cfg.corpus_dir, run_dir / "probe-current")
    except BridgeError as e:
        raise NevError(f"scoring the current version of {cfg.function} failed: {e}", 1) from None
    j = judge(b.verdicts[0], source, code_hash(source))
    echo(f"  the current version: {j.status}, {j.cases_passed}/{j.cases_run} cases")
    return failing_cases([j], corpus)
