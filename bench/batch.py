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
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
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
from bench.gateway import CallFailed, CallRecord, Gateway, split_draws
from bench.phases import Phases, own_cpu_s
from bench.rounds import ModelRound, RoundRecord, ShareStatus
from crates_bridge import rustlex
from crates_bridge.candidates import Verdict, probe
from crates_bridge.corpus import read_manifest
from crates_bridge.errors import BridgeError
from crates_bridge.registry import FLOOR_SUFFIX, PROVENANCE_SUFFIX, Floor, load_floor, write_floor
from crates_bridge.workspace import Workspace
from lanes.base.errors import ConfigError, NevError, UsageError
from lanes.base.exitcodes import Exit
from lanes.base.mask import mask

DEFAULT_N = 8
DEFAULT_ESCALATE_N = 4


# ---- models (pure) ----

@dataclass(frozen=True)
class Share:
    """One model's share of a batch: N candidates at INFLIGHT calls at once."""

    alias: str
    n: int
    inflight: int
    tier: str = "sampling"
    supports_n: bool = True
    #: what folknet.json declares; `inflight` is never above it
    declared_max: int = 0
    note: str | None = None


def parse_models(text: str) -> list[tuple[str, int, int | None]]:
    """`ALIAS:N:INFLIGHT,...` (INFLIGHT optional) -> [(alias, n, inflight)]."""
    out: list[tuple[str, int, int | None]] = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        bits = part.split(":")
        if len(bits) not in (2, 3) or not bits[0]:
            raise UsageError(f"--models entry `{part}` is not ALIAS:N[:INFLIGHT]; e.g. qwen3.8-27b-fast:32:8")
        try:
            n = int(bits[1])
            inflight = int(bits[2]) if len(bits) == 3 else None
        except ValueError:
            raise UsageError(f"--models entry `{part}`: N and INFLIGHT must be whole numbers (ALIAS:N:INFLIGHT)") from None
        if n < 1 or (inflight is not None and inflight < 1):
            raise UsageError(f"--models entry `{part}`: N and INFLIGHT must be at least 1")
        out.append((bits[0], n, inflight))
    if not out:
        raise UsageError("--models is empty; give ALIAS:N:INFLIGHT,...")
    return out


def resolve(entries: Sequence[tuple[str, int, int | None]], net: fk.Folknet) -> list[Share]:
    """Check each alias against folknet.json; cap INFLIGHT at what it declares."""
    shares = []
    for alias, n, inflight in entries:
        a = net.aliases.get(alias)
        if a is None:
            raise UsageError(f"model `{alias}` is not in {net.path}; use one of "
                             f"{', '.join(x.name for x in net.active())}")
        if a.is_retired():
            raise UsageError(f"model `{alias}` was retired on {a.retired} ({net.path}); pick an active alias")
        want = inflight if inflight is not None else a.max_inflight
        note = None
        if want > a.max_inflight:
            note = f"INFLIGHT {want} capped at {a.max_inflight} (folknet.json)"
        shares.append(Share(alias, n, min(want, a.max_inflight), a.tier, a.supports_n, a.max_inflight, note))
    return shares


def default_models(net: fk.Folknet) -> list[Share]:
    return [Share(a.name, DEFAULT_N, a.max_inflight, a.tier, a.supports_n, a.max_inflight)
            for a in net.active() if a.tier == "sampling"]


def default_escalation(net: fk.Folknet) -> Share | None:
    for a in net.active():
        if a.tier == "capacity":
            return Share(a.name, DEFAULT_ESCALATE_N, a.max_inflight, a.tier, a.supports_n, a.max_inflight)
    return None


# ---- candidates (pure) ----

_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


def extract_code(answer: str, function: str) -> str | None:
    """The code block of an answer that defines `function` (a rust block first); None if none."""
    blocks = [(lang.lower(), body) for lang, body in _BLOCK.findall(answer)]
    if not blocks and re.search(rf"\bfn\s+{re.escape(function)}\b", answer):
        blocks = [("", answer)]
    defining = [(lang, b) for lang, b in blocks if re.search(rf"\bfn\s+{re.escape(function)}\b", b)]
    pick = [b for lang, b in defining if lang in ("rust", "rs")] or [b for _, b in defining]
    if not pick:
        return None
    code = pick[0].strip() + "\n"
    if "use super::prelude::*;" not in code:
        code = "use super::prelude::*;\n\n" + code
    return code


def normalise(code: str) -> str:
    """Code with comments and whitespace runs removed (literals kept): what dedupe compares."""
    out: list[str] = []
    literals: list[str] = []
    for t in rustlex.scan(code):
        piece = code[t.start:t.end]
        if t.kind is rustlex.Kind.CODE:
            out.append(piece)
        elif t.kind is rustlex.Kind.COMMENT:
            out.append(" ")
        else:
            literals.append(piece)
            out.append(f" \x00{len(literals) - 1}\x00 ")
    text = "".join(out)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r" ?([{}()\[\];,:<>=+\-*/&|!.]) ?", r"\1", text).strip()
    return re.sub(r" ?\x00(\d+)\x00 ?", lambda m: literals[int(m.group(1))], text)


def code_hash(code: str) -> str:
    return hashlib.sha256(normalise(code).encode()).hexdigest()[:16]


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021); None when k > n."""
    if k > n or n <= 0:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at(n: int, c: int, ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    return {f"pass@{k}": round(v, 4) for k in ks if (v := pass_at_k(n, c, k)) is not None}


@dataclass
class Candidate:
    alias: str
    round: int
    source: str
    hash: str
    #: index into the run's unique candidates
    unique: int = -1


@dataclass
class Judged:
    """A unique candidate's verdict (shared by its duplicates)."""

    hash: str
    source: str
    status: str
    cases_passed: int
    cases_run: int
    error: str | None
    diffs: tuple[tuple[str, dict[str, tuple[float | None, float | None]]], ...]
    failed_ids: tuple[str, ...]


def judge(v: Verdict, source: str, h: str) -> Judged:
    failed = [c for c in v.cases if not c.passed]
    diffs = tuple((c.id, dict(c.diff)) for c in sorted(failed, key=lambda c: c.id) if c.diff)
    return Judged(h, source, v.status, v.cases_passed, v.cases_run, v.error or v.run_error, diffs,
                  tuple(sorted(c.id for c in failed)))


def failing_cases(judged: Sequence[Judged], corpus: dict[str, dict], limit: int = prompt.MAX_CASES
                  ) -> list[prompt.FailingCase]:
    """The cases the compiled candidates fail most often (bounded), with the best failing try's diff."""
    compiled = [j for j in judged if j.cases_run]
    count: dict[str, int] = {}
    for j in compiled:
        for cid in j.failed_ids:
            count[cid] = count.get(cid, 0) + 1
    order = sorted(count, key=lambda cid: (-count[cid], cid))[:limit]
    best = sorted(compiled, key=lambda j: -j.cases_passed)
    out = []
    for cid in order:
        diff: dict[str, tuple[float | None, float | None]] = {}
        for j in best:
            d = dict(j.diffs).get(cid)
            if d:
                diff = d
                break
        case = corpus.get(cid, {})
        out.append(prompt.FailingCase(cid, case.get("input", {}), case.get("expected", {}), diff, count[cid]))
    return out


def best_versions(judged: Sequence[Judged], limit: int = prompt.MAX_VERSIONS) -> list[prompt.FailingVersion]:
    failing = [j for j in judged if j.cases_run and j.status == "failed"]
    failing.sort(key=lambda j: (-j.cases_passed, j.hash))
    return [prompt.FailingVersion(j.source, j.cases_passed, j.cases_run, j.diffs) for j in failing[:limit]]


def kept_source(spec: prompt.Spec, source: str, batch_id: str) -> str:
    """The kept version as committed: a header naming the spec and batch, the steps as comments."""
    head = [f"// Generated: {spec.heading}.", f"// Source: {spec.source}",
            f"// Provenance: {spec.function}{PROVENANCE_SUFFIX} beside this file (batch {batch_id}).",
            "// Spec steps:"]
    head += [f"//   {i}. {s}" for i, s in enumerate(spec.steps, 1)]
    return "\n".join(head) + "\n" + source.lstrip()


def is_placeholder(record: dict) -> bool:
    b = record.get("batch")
    return not (isinstance(b, dict) and b.get("models"))


# ---- the run ----

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


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        start, cpu0 = _now(), own_cpu_s()
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
            start=start, end=_now(), lane_cpu_s=round(own_cpu_s() - cpu0, 2),
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
            kept = _keep(cfg, ws, spec, signature, batch_id, judged[passing[0].hash], all_cands, judged, rounds,
                         manifest.cases, run_dir)
            return RunResult(batch_id, True, rounds, kept, f"{cfg.function}: kept a passing version from "
                             f"{passing[0].alias} (round {rnd}) in {kept}", 0)
        failing = failing_cases(list(judged.values()), corpus)
    why = "; ".join(f"{a}: {e}" for a, e in failed_aliases.items())
    msg = (f"{cfg.function}: no version passed in {len(rounds)} batch(es)"
           + (f" (failed models: {why})" if why else "") + "; nothing kept")
    return RunResult(batch_id, False, rounds, None, mask(msg), Exit.FAILED)


def _keep(cfg: RunConfig, ws: Workspace, spec: prompt.Spec, signature: str, batch_id: str, win: Judged,
          cands: list[Candidate], judged: dict[str, Judged], rounds: list[RoundRecord], cases_run: int | None,
          run_dir: Path) -> Path:
    gen = ws.generated_dir
    src_path = gen / f"{cfg.function}.rs"
    prov_path = gen / f"{cfg.function}{PROVENANCE_SUFFIX}"
    floor_path = gen / f"{cfg.function}{FLOOR_SUFFIX}"
    text = kept_source(spec, win.source, batch_id)
    models: dict[str, dict[str, Any]] = {}
    for c in cands:
        m = models.setdefault(c.alias, {"alias": c.alias, "candidates": 0, "compiled": 0, "best": None})
        j = judged[c.hash]
        m["candidates"] += 1
        m["compiled"] += j.status != "compile-error"
        if j.cases_run:
            m["best"] = max(m["best"] or 0, j.cases_passed)
    n_pass = sum(1 for c in cands if judged[c.hash].status == "passed")
    record = {
        "format": 1, "function": cfg.function,
        "spec": {"document": spec.document, "section": spec.section, "title": spec.title, "source": spec.source},
        "signature": signature,
        "batch": {"id": batch_id, "models": list(models.values()), "rounds": len(rounds),
                  "escalated": any(r.escalated for r in rounds), "candidates": len(cands),
                  "unique": len({c.hash for c in cands}),
                  "compiled": sum(1 for c in cands if judged[c.hash].status != "compile-error"),
                  "best": win.cases_passed, **pass_at(len(cands), n_pass), "date": _now()},
        "verification": {"corpus": cfg.corpus_dir.name, "cases_passed": win.cases_passed,
                         "cases_run": win.cases_run},
    }
    if prov_path.is_file():
        old = json.loads(prov_path.read_text(encoding="utf-8"))
        if not is_placeholder(old):
            (run_dir / f"{cfg.function}.rs").write_text(text, encoding="utf-8")
            (run_dir / f"{cfg.function}{PROVENANCE_SUFFIX}").write_text(json.dumps(record, indent=2) + "\n")
            raise NevError(f"{prov_path} records batch {old['batch'].get('id')} and is never rewritten; the passing "
                           f"version is in {run_dir}; retire the old function by hand to take it", 1)
    src_path.write_text(text, encoding="utf-8")
    prov_path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    old_floor = load_floor(floor_path)
    new = Floor(win.cases_passed, win.cases_run)
    if old_floor is None or old_floor.cases_passed <= new.cases_passed:
        write_floor(floor_path, new)
    return src_path


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
