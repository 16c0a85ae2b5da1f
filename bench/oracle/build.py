"""`nev oracle build`: generate cases from seeds, render them twice in every engine, vote, store.

Each case is rendered twice (the second pass in reverse order within its batch); a case
whose answer changed in any engine is quarantined: kept in votes.jsonl, never ground truth.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from bench.oracle import engines as eng
from bench.oracle import shared, store
from bench.oracle.cases import WHOLE, Case, CaseInput, Generator, Shard, generator_for
from bench.oracle.engines import Engine, EngineError, Measure
from bench.oracle.fleet import Fleet, LazyFleet
from bench.oracle.vote import DEFAULT_TOLERANCE, flatten, tally, vote
from lanes.base.ui import Counter, info

BATCH = 100


@dataclass
class BuildResult:
    folder: Path
    written: bool
    manifest: store.StoreManifest
    seconds: float = 0.0
    rates: dict[str, float] = field(default_factory=dict)
    superseded: Path | None = None
    bytes_per_case: float = 0.0
    rendered: bool = True            # False: copied from the shared store, nothing rendered
    shared: Path | None = None       # the store's folder of this key, when there is a store


def probe_versions(names: Sequence[str]) -> dict[str, str]:
    found = {n: eng.probe_version(n) for n in names}
    missing = [n for n, v in found.items() if v is None]
    if missing:
        raise EngineError(eng.absent(missing))
    return {n: str(v) for n, v in found.items()}


def _same_version(running: str, probed: str) -> bool:
    return probed == running or probed.startswith(running)


@dataclass(frozen=True)
class VoteRow:
    """One case judged (a votes.jsonl row, docs/dump-format.md): each engine's expected answer and
    measured rects, the agreement, whether it is quarantined (its answer changed between the two
    renders: `changed` names the engines), and the agreed answer (`expected`) when it is ground
    truth (then also a cases.jsonl row, `case_row`)."""

    id: str
    seed: int
    input: CaseInput
    agreement: str
    quarantined: bool
    engines: dict[str, tuple[dict[str, float], Measure]]
    changed: list[str] = field(default_factory=list)
    expected: dict[str, float] | None = None

    def to_json(self) -> dict[str, object]:
        row: dict[str, object] = {
            "id": self.id, "seed": self.seed, "input": self.input, "agreement": self.agreement,
            "quarantined": self.quarantined,
            "engines": {n: {"expected": e, "rects": m} for n, (e, m) in self.engines.items()}}
        if self.changed:
            row["changed"] = self.changed
        if self.expected is not None:
            row["expected"] = self.expected
        return row

    def case_row(self) -> dict[str, object]:
        """Its cases.jsonl row (the ground truth): only for a row with `expected`."""
        return {"id": self.id, "seed": self.seed, "input": self.input, "expected": self.expected}


def judge(gen: Generator, case: Case, first: dict[str, Measure], second: dict[str, Measure],
          tol: float) -> VoteRow:
    """One votes.jsonl row from two renders of a case in every engine (pure)."""
    per_engine: dict[str, tuple[dict[str, float], Measure]] = {}
    answers: dict[str, dict[str, float] | None] = {}
    changed = sorted(n for n in first if first[n] != second[n])
    for n in sorted(first):
        m = first[n]
        try:
            exp = gen.expected(case, m)
            answers[n] = flatten(exp, m, gen.voted_rects)
        except (KeyError, IndexError):
            exp = {}
            answers[n] = None
        per_engine[n] = (exp, m)
    v = vote(answers, tol)
    expected = None
    if v.agreed and not changed and v.value is not None:
        expected = {k.removeprefix("expected."): x for k, x in v.value.items()
                    if k.startswith("expected.")}
    return VoteRow(case.id, case.seed, case.input, v.agreement, bool(changed), per_engine, changed,
                   expected)


def build(corpus: str, *, root: Path, shard: Shard = WHOLE, engine_names: Sequence[str] = eng.ENGINES,
          count: int = 1000, start: int = 0, tolerance: float = DEFAULT_TOLERANCE, batch: int = BATCH,
          extra_generators: dict[str, Callable[[], Generator]] | None = None,
          make_engine: Callable[[str], Engine] = eng.make, quiet: bool = False,
          fleet: Fleet | LazyFleet | None = None, store_root: Path | None = None,
          probe: Callable[[Sequence[str]], dict[str, str]] = probe_versions) -> BuildResult:
    """Build (or find up to date) one corpus in `root`. `fleet`: engines already running, or
    started on first need (kept running). `store_root`: the shared store (bench.oracle.shared),
    where the corpus is rendered once for every copy and copied from."""
    if count < 1:
        raise EngineError(f"--cases {count}: need at least 1 case", 2)
    gen = generator_for(corpus, extra_generators)
    versions = probe(engine_names)
    seeds_spec = {"start": start, "count": count, "shard": str(shard)}
    generator = {"name": gen.name, "version": gen.version}
    key = store.corpus_key(gen.function, generator, versions, tolerance, seeds_spec)
    folder = root / store.folder_name(corpus, shard.index, shard.count)
    store.clean_stale_tmp(root)
    if store.up_to_date(folder, key):
        man = store.read_manifest(folder) or store.StoreManifest({})
        return BuildResult(folder, False, man)
    tampered(folder, key)
    if fleet is not None and sorted(fleet.names) != sorted(engine_names):
        raise EngineError(f"the running engines {fleet.names} are not the ones asked for {list(engine_names)}")
    if isinstance(fleet, LazyFleet):
        engines: AbstractContextManager[LazyFleet] = nullcontext(fleet)
    else:
        engines = LazyFleet(engine_names, make_engine, fleet)
    job = _Job(gen, list(shard.seeds(start, count)), versions, tolerance, batch, quiet,
               {"format": store.FORMAT, "function": gen.function, "generator": generator,
                "engines": versions, "tolerance_px": tolerance, "seeds": seeds_spec, "key": key})
    with engines as lazy:
        if store_root is None:
            result = _render(job, store.Writer(root, folder.name), lazy, folder.name)
            result.folder = folder
        else:
            name = shared.entry(gen.function, key)
            digests = shared.Digests.for_store(store_root)
            with shared.locked(store_root, name, None if quiet else info):
                found = shared.find(store_root, name, key)
                if found is not None and digests is not None and not digests.vouches(found):
                    info(f"{found} has no digest nev vouches for in {digests.folder} (rendered or "
                         "changed in a gate); building it anew")
                    found = None
                if found is None:
                    tampered(store_root / name, key)
                    result = _render(job, store.Writer(store_root, name), lazy, folder.name)
                    found = result.folder
                    if digests is not None:
                        digests.record(found, info)
                else:
                    shared.touch(found)
                    man = store.read_manifest(found) or store.StoreManifest({})
                    result = BuildResult(found, True, man, rendered=False)
                result.superseded = shared.copy_in(found, root, folder.name)
                result.shared, result.folder = found, folder
    if not quiet and result.superseded is not None:
        info(f"older corpus with other engine versions moved to {result.superseded}")
    return result


def tampered(folder: Path, key: str) -> bool:
    """Say so when a corpus of this very key is there but its bytes no longer match its manifest's
    content hashes (changed after it was published): it is not ground truth and is built anew."""
    man = store.read_manifest(folder)
    if man is None or man.key != key:
        return False
    why = store.verify(folder)
    if why is None:
        return False
    info(f"{folder} is not ground truth: its bytes no longer match the content hashes its manifest carries "
         f"({why.removeprefix(str(folder) + ': ')}); building it anew")
    return True


@dataclass
class _Job:
    """What one render needs besides the engines."""
    gen: Generator
    seeds: list[int]
    versions: dict[str, str]
    tolerance: float
    batch: int
    quiet: bool
    manifest: dict[str, object]   # the fields known before the render (written by `finish`)


def _render(job: _Job, writer: store.Writer, lazy: LazyFleet, label: str) -> BuildResult:
    """Render every case twice in every engine, vote, stream to `writer` and publish it."""
    gen, seeds = job.gen, job.seeds
    t0 = time.monotonic()
    try:
        agreement: list[str] = []
        agreed = quarantined = 0
        starting = lazy.fleet is None
        if not job.quiet and starting:
            info(f"starting {', '.join(lazy.names)} ...")
        t_start = time.monotonic()
        fleet = lazy.get()
        since = fleet.mark()   # this corpus's rates, not those of the builds before it
        running = fleet.versions()
        if not job.quiet and starting:
            info(f"engines up in {time.monotonic() - t_start:.1f} s: "
                 + ", ".join(f"{n} {v}" for n, v in running.items()))
        for n, v in running.items():
            if not _same_version(v, job.versions[n]):
                raise EngineError(f"{n} reports version {v} but its binary says {job.versions[n]}; "
                                  "an update is half-installed, finish it and build again")
        bar = Counter(label, len(seeds)) if not job.quiet else None
        for i in range(0, len(seeds), job.batch):
            chunk = [gen.case(s) for s in seeds[i:i + job.batch]]
            docs = [c.html for c in chunk]
            first = fleet.render(docs)
            second = {n: list(reversed(ms)) for n, ms in fleet.render(docs[::-1]).items()}
            rows = [judge(gen, case, {n: first[n][j] for n in first},
                          {n: second[n][j] for n in second}, job.tolerance) for j, case in enumerate(chunk)]
            good = [r.case_row() for r in rows if r.expected is not None]
            writer.append("cases.jsonl", good)
            writer.append("votes.jsonl", [r.to_json() for r in rows])
            agreed += len(good)
            quarantined += sum(1 for r in rows if r.quarantined)
            agreement += [r.agreement for r in rows]
            if bar is not None:
                bar.advance(len(chunk), " ".join(f"{n} {r:.0f}/s" for n, r in fleet.rates(since).items()))
        if bar is not None:
            bar.close()
        rates = fleet.rates(since)
        manifest = writer.finish(dict(job.manifest, cases=agreed, generated=len(agreement),
                                      agreement=tally(agreement), quarantined=quarantined))
        moved = writer.publish()
    except BaseException:
        writer.discard()
        raise
    secs = time.monotonic() - t0
    size = sum(p.stat().st_size for p in writer.final.iterdir())
    return BuildResult(writer.final, True, manifest, secs, rates, moved, size / max(1, len(agreement)))


def build_many(corpora: Sequence[str], *, root: Path, engine_names: Sequence[str] = eng.ENGINES,
               make_engine: Callable[[str], Engine] = eng.make, shard: Shard = WHOLE,
               count: int = 1000, quiet: bool = False, store_root: Path | None = None,
               extra_generators: dict[str, Callable[[], Generator]] | None = None,
               probe: Callable[[Sequence[str]], dict[str, str]] = probe_versions,
               ) -> list[BuildResult]:
    """Several corpora with one start of the engines, and none when every corpus is found. Every
    name is checked before anything is built."""
    for c in corpora:
        generator_for(c, extra_generators)
    with LazyFleet(engine_names, make_engine) as lazy:
        return [build(c, root=root, shard=shard, engine_names=engine_names, count=count,
                      extra_generators=extra_generators, quiet=quiet, fleet=lazy,
                      store_root=store_root, probe=probe) for c in corpora]


def summary_lines(r: BuildResult) -> list[str]:
    m = r.manifest
    if not r.written:
        return [f"{r.folder}: up to date (key {str(m.key)[:12]}, {m.cases} agreed cases); "
                "nothing written"]
    if not r.rendered:
        return [f"{r.folder}: copied from the corpus store {r.shared} (key {str(m.key)[:12]}, "
                f"{m.cases} agreed cases); nothing rendered"]
    engines = ", ".join(f"{n} {v}" for n, v in (m.engines or {}).items())
    agree = ", ".join(f"{k}: {v}" for k, v in m.agreement.items())
    rates = ", ".join(f"{n} {v:.0f} cases/s" for n, v in r.rates.items())
    return [
        f"{r.folder}: {m.cases} agreed of {m.generated} generated "
        f"({m.quarantined} quarantined) in {r.seconds:.1f} s",
        f"agreement: {agree}",
        f"engines: {engines}",
        f"rendering (each case twice): {rates}",
        f"store: {r.bytes_per_case:.0f} bytes per case, key {str(m.key)[:12]}",
    ] + ([f"shared: {r.shared} (every lane copy asking for this key copies it)"] if r.shared else [])
