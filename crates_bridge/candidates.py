"""Candidate crates: write N candidate sources of one function, compile the batch in one go,
run every compiled candidate over the corpus's inputs, have the judge score its outputs, and say
for each what happened.

A candidate is the whole text of `<name>.rs` as it would be committed under
`crates/layout/src/generated/`: it names engine types through
`use super::prelude::*;` and defines `pub fn <name>(input: &In) -> Out`.

Two ways to compile a batch, both without a compiler wrapper:

- `single`: one crate, every candidate a module, one rustc call against the
  engine's prebuilt rlibs. A failed call names its candidates (by the file, or
  by the line of the probe's main file that takes that candidate's function);
  they are dropped and rustc runs again, until the rest compile. A call past the
  compile budget or the memory cap is searched in parts (`compile_budget`).
- `crates`: one crate per candidate, each its own rustc call.

`bench/perf/b04_candidates.py` measures both against building each candidate
crate one after another; `DEFAULT_MODE` is the faster.

Candidate code is untrusted (docs/sandbox.md). Every rustc call on candidate
sources runs in the sandbox (`lanes.base.sandbox`), seeing only the probe's
folder (written) and the toolchain and the engine's prebuilt libraries
(read-only): an `include_str!` of any other path fails to compile, naming it.
Every candidate module is compiled under `#[forbid(unsafe_code, long_running_const_eval)]`,
so none runs code before the runner's own lock. Each compiled candidate then runs in a
sandboxed process of its own with the corpus's inputs only: no network, no home, no store, no
new process, a memory and CPU cap; whatever ends that process early (an exit, an abort, a stack
overflow, the memory cap, a forbidden system call) is its verdict alone, and the verdict is the
judge's (`crates_bridge.judge`), which holds the answers outside every candidate's process.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from crates_bridge import compile_budget, diagnostics, judge
from crates_bridge.errors import BridgeError
from crates_bridge.judge import CaseResult
from crates_bridge.workspace import (
    LAYOUT_CRATE,
    Build,
    Workspace,
    no_wrapper_env,
    tool,
    toolchain_jail,
)
from lanes.base import sandbox

MODES = ("single", "crates")
#: The faster of the two on the B4 measurement (see docs/floors.md, "The candidate probe").
DEFAULT_MODE = "single"
#: Optimisation of candidate code: the probe is compile-bound, not run-bound.
DEFAULT_OPT_LEVEL = 1
MAX_ROUNDS = 12
#: The lints every candidate module is compiled under: no unsafe code (nothing runs before the
#: runner's lock), and no way to let a constant's evaluation run without end.
FORBID = "unsafe_code, long_running_const_eval"
#: Errors that may come from two candidates sharing one crate rather than from either alone.
_CLASH = re.compile(r"is already defined|defined multiple times|multiple definitions|already been defined")


@dataclass
class Verdict:
    """What happened to one candidate of a batch."""

    index: int
    compiled: bool = False
    #: the compiler's first error for this candidate (rendered, paths named `<name>.rs`)
    error: str | None = None
    cases_run: int = 0
    cases_passed: int = 0
    ns_per_case: float | None = None
    cases: tuple[CaseResult, ...] = ()
    #: the candidate compiled but could not be scored (timed out, runner failed)
    run_error: str | None = None

    @property
    def label(self) -> str:
        return cand_id(self.index)

    @property
    def status(self) -> str:
        if not self.compiled:
            return "compile-error"
        if self.run_error:
            return "run-error"
        if self.cases_run and self.cases_passed == self.cases_run:
            return "passed"
        return "failed"


@dataclass
class Batch:
    function: str
    mode: str
    verdicts: list[Verdict]
    compile_s: float = 0.0
    score_s: float = 0.0
    rounds: int = 0
    #: per rustc round of the single crate: the candidates it dropped
    dropped: list[list[int]] = field(default_factory=list)
    binaries: dict[int, Path] = field(default_factory=dict)

    def by_status(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for v in self.verdicts:
            out.setdefault(v.status, []).append(v.index)
        return out


def cand_id(i: int) -> str:
    return f"c{i:03d}"


def _check_function(ws: Workspace, function: str) -> None:
    funcs = ws.crate_dir("generation") / "src" / "functions.rs"
    if f"function_kind!({function}," not in funcs.read_text(encoding="utf-8"):
        raise BridgeError(f"`{function}` is not a function kind of {funcs}; add a function_kind! line for it")


def _alone(path: Path, out_dir: Path, jail: sandbox.Jail, budget: float) -> list[str]:
    """rustc on one candidate file alone: lexing fails before any name is resolved."""
    argv = [_rustc(jail), "--edition", "2021", "--crate-type", "lib", "--emit=metadata", "--error-format=json",
            "--out-dir", str(out_dir), "--crate-name", "alone_" + path.stem, str(path)]
    return sandbox.run(argv, jail, timeout=budget).stderr.splitlines()


def confirm_lexer_errors(files: dict[int, Path], function: str, out_dir: Path,
                         jail: sandbox.Jail, budget: float) -> dict[int, str]:
    """For each suspect, rustc's own first error when it is a lexer error (else the suspect stays in)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    found: dict[int, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(len(files), os.cpu_count() or 1))) as pool:
        done = pool.map(lambda p: _alone(p, out_dir, jail, budget), files.values())
        results = dict(zip(files, done, strict=True))
    for i, lines in results.items():
        err = diagnostics.first_lexer_error(lines, function)
        if err is not None:
            found[i] = err
    return found


# ---- writing candidate sources ----

def probe_main(function: str, indices: Sequence[int]) -> tuple[str, dict[int, int]]:
    """main.rs of the single-crate probe, and the line that names each candidate."""
    lines = [
        "// Candidate probe: every candidate is a module; one binary scores them all.",
        "#![allow(dead_code, unused)]",
        "mod generated {",
        f"    pub use {LAYOUT_CRATE}::prelude;",
    ]
    lines += [f"    #[forbid({FORBID})] pub mod {cand_id(i)};" for i in indices]
    lines += ["}", "", "fn main() {",
              f"    generation::functions::{function}::candidates_main(&["]
    where: dict[int, int] = {}
    for i in indices:
        lines.append(f'        ("{cand_id(i)}", generated::{cand_id(i)}::{function}),')
        where[len(lines)] = i
    lines += ["    ]);", "}", ""]
    return "\n".join(lines), where


def write_sources(src_dir: Path, sources: Sequence[str]) -> None:
    gen = src_dir / "generated"
    if gen.exists():
        shutil.rmtree(gen)
    gen.mkdir(parents=True)
    for i, text in enumerate(sources):
        (gen / f"{cand_id(i)}.rs").write_text(text, encoding="utf-8")


# ---- the single crate ----

def compile_jail(build: Build, workdir: Path, sandboxed: bool = True,
                 memory: int | None = None) -> sandbox.Jail:
    """Where rustc compiles candidates: the probe's folder written; the toolchain and the engine's
    prebuilt libraries read; nothing else (no home, no network, no store); rustc's address space
    capped (`NEV_COMPILE_MEMORY_MB`)."""
    if not sandboxed:
        return sandbox.Jail(bare=True, env=no_wrapper_env(), cwd=workdir)
    libs = [build.deps_dir, *(p.parent for p in build.rlibs.values())]
    jail = toolchain_jail(libs, [workdir], cwd=workdir)
    cap = memory if memory is not None else compile_budget.memory_bytes()
    return dataclasses.replace(jail, limits=dataclasses.replace(jail.limits, memory_bytes=cap))


def _rustc(jail: sandbox.Jail) -> str:
    return "rustc" if jail.bare else tool("rustc")


def _link_args(build: Build) -> list[str]:
    return ["-L", f"dependency={build.deps_dir}",
            "--extern", f"layout={build.rlibs['layout']}",
            "--extern", f"generation={build.rlibs['generation']}"]


def _rustc_argv(ws: Workspace, crate: Path, function: str, indices: Sequence[int], opt_level: int,
                jail: sandbox.Jail, tag: str) -> tuple[list[str], dict[int, int], Path]:
    """rustc's command line for one crate of `indices` (its main file `src/main<tag>.rs`), the lines
    of that file naming each candidate, and the binary it writes."""
    text, where = probe_main(function, indices)
    main = crate / "src" / f"main{tag}.rs"
    main.write_text(text, encoding="utf-8")
    out = crate / f"probe{tag}"
    argv = [_rustc(jail), "--edition", "2021", "--crate-type", "bin", "--crate-name", "probe",
            "-C", f"opt-level={opt_level}", "-C", "debuginfo=0", "-C", "codegen-units=16",
            "--error-format=json", *_link_args(ws.build()), "-o", str(out), str(main)]
    return argv, where, out


def _split(members: list[int]) -> list[list[int]]:
    """The parts a stopped compile is tried again in: each candidate alone for up to 8, else about
    the square root of their number of parts (64: 8 parts of 8)."""
    if len(members) <= 8:
        return [[i] for i in members]
    k = math.ceil(math.sqrt(len(members)))
    return [members[j::k] for j in range(k)]


def _settle(members: list[int], run: compile_budget.Run, where: dict[int, int], out: Path,
            function: str, memory: int,
            batch: Batch) -> tuple[list[list[int]], list[int], list[int]]:
    """What one rustc call of `members` decided: (the parts to compile again, the candidates it
    judged, those nothing can be blamed on). Verdicts and binaries are written into `batch`."""
    verdicts = batch.verdicts
    if run.out.returncode == 0 and not run.stopped:
        for i in members:
            verdicts[i].compiled = True
            batch.binaries[i] = out
        return [], [], []
    firsts, _ = diagnostics.split_errors(run.out.stderr.splitlines(), where, function)
    for i, err in firsts.items():
        verdicts[i].error = err
    rest = [i for i in members if i not in firsts]
    why = compile_budget.why_stopped(run, memory)
    if why is None:
        # refused by its own errors: the rest again;
        # nothing blamed (a link error, a clash): each built alone
        return ([rest] if firsts and rest else []), list(firsts), ([] if firsts else rest)
    if len(rest) == 1 and not firsts:
        verdicts[rest[0]].error = why
        return [], rest, []
    return (_split(rest) if rest else []), list(firsts), []


def _alone_into(batch: Batch, ws: Workspace, sources: Sequence[str], workdir: Path,
                which: list[int], sandboxed: bool, budget: float) -> None:
    """`which` built one crate each; their verdicts and binaries replace the batch's."""
    alone = compile_crates(ws, batch.function, sources, workdir, only=which, sandboxed=sandboxed,
                           budget_s=budget)
    for i in which:
        batch.verdicts[i] = alone.verdicts[i]
        if i in alone.binaries:
            batch.binaries[i] = alone.binaries[i]
    batch.mode = "single+crates"


def compile_single(ws: Workspace, function: str, sources: Sequence[str], workdir: Path,
                   opt_level: int = DEFAULT_OPT_LEVEL, sandboxed: bool = True,
                   budget_s: float | None = None) -> Batch:
    """Every candidate a module of one crate, one rustc call; a candidate whose errors stop it is
    dropped and the rest compiled again. A call that runs past the compile budget, runs out of
    memory or dies without naming a candidate is tried again in parts, side by side, each part
    stopped when it runs far longer than its peers (`crates_bridge.compile_budget`), until the
    culprits stand alone: one candidate costs the batch at most the budget and a short search."""
    budget = budget_s if budget_s is not None else compile_budget.budget_s()
    memory = compile_budget.memory_bytes()
    jail = compile_jail(ws.build(), workdir, sandboxed, memory)
    crate = workdir / "single"
    write_sources(crate / "src", sources)
    verdicts = [Verdict(i) for i in range(len(sources))]
    alive = list(range(len(sources)))
    t0 = time.monotonic()
    rounds = 0
    dropped: list[list[int]] = []
    batch = Batch(function, "single", verdicts, rounds=0, dropped=dropped)
    suspects = {i: crate / "src" / "generated" / f"{cand_id(i)}.rs"
                for i in alive if diagnostics.lex_suspect(sources[i]) is not None}
    if suspects:
        rounds += 1
        lexed = confirm_lexer_errors(suspects, function, workdir / "alone", jail, budget)
        for i, err in lexed.items():
            verdicts[i].error = err
        dropped.append(sorted(lexed))
        alive = [i for i in alive if i not in lexed]
    pending = [alive] if alive else []
    searching = False
    finished: list[float] = []
    fallback: list[int] = []
    while pending:
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise BridgeError(f"the probe of `{function}` still failed after {MAX_ROUNDS} rounds; "
                              "report the batch (its folder is kept) as a bridge bug")
        calls = [_rustc_argv(ws, crate, function, g, opt_level, jail,
                             "" if not searching else f"_r{rounds}_{k}")
                 for k, g in enumerate(pending)]
        try:
            runs = compile_budget.race([c[0] for c in calls], jail, budget, searching, finished)
        except FileNotFoundError:
            raise BridgeError("rustc is not installed; install Rust (rustup) and retry") from None
        nxt: list[list[int]] = []
        round_dropped: list[int] = []
        for members, (_, where, out), run in zip(pending, calls, runs, strict=True):
            again, gone, unblamed = _settle(members, run, where, out, function, memory, batch)
            nxt += again
            round_dropped += gone
            fallback += unblamed
            searching = searching or compile_budget.why_stopped(run, memory) is not None
        if round_dropped:
            dropped.append(sorted(round_dropped))
        pending = nxt
    if fallback:  # nothing blamed on one candidate: each built on its own
        _alone_into(batch, ws, sources, workdir, fallback, sandboxed, budget)
    batch.rounds = rounds
    if searching:
        batch.mode = "single+search"
    # Two candidates can clash only in the shared crate (an exported symbol or macro of the same
    # name): the one blamed is built on its own before its verdict stands.
    clashed = [i for i, v in enumerate(verdicts) if v.error is not None and _CLASH.search(v.error)]
    if clashed:
        _alone_into(batch, ws, sources, workdir, clashed, sandboxed, budget)
    batch.compile_s = time.monotonic() - t0
    return batch


# ---- one crate per candidate ----

_PROFILE = """
[profile.release]
opt-level = 2
debug = false
incremental = false
codegen-units = 16
"""


def _crate_manifest(ws: Workspace, i: int) -> str:
    return (f'[package]\nname = "cand_{cand_id(i)}"\nversion = "0.1.0"\nedition = "2021"\n\n'
            f'[dependencies]\nlayout = {{ path = "{ws.crate_dir("layout")}" }}\n'
            f'generation = {{ path = "{ws.crate_dir("generation")}" }}\n')


def _crate_main(function: str, i: int) -> str:
    return ("#![allow(dead_code, unused)]\nmod generated {\n    pub use layout::prelude;\n"
            f"    #[forbid({FORBID})] pub mod {function};\n}}\n\nfn main() {{\n"
            f'    generation::functions::{function}::candidates_main(&[("{cand_id(i)}", generated::{function}::{function})]);\n}}\n')


def write_crates(ws: Workspace, function: str, sources: Sequence[str], root: Path,
                 only: Sequence[int] | None = None) -> list[int]:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    indices = list(only) if only is not None else list(range(len(sources)))
    members = []
    for i in indices:
        d = root / cand_id(i)
        (d / "src" / "generated").mkdir(parents=True)
        (d / "Cargo.toml").write_text(_crate_manifest(ws, i), encoding="utf-8")
        (d / "src" / "main.rs").write_text(_crate_main(function, i), encoding="utf-8")
        (d / "src" / "generated" / f"{function}.rs").write_text(sources[i], encoding="utf-8")
        members.append(cand_id(i))
    (root / "Cargo.toml").write_text(
        "[workspace]\nresolver = \"2\"\nmembers = [" + ", ".join(f'"{m}"' for m in members) + "]\n" + _PROFILE,
        encoding="utf-8")
    return indices


def compile_crates(ws: Workspace, function: str, sources: Sequence[str], workdir: Path,
                   only: Sequence[int] | None = None, opt_level: int = DEFAULT_OPT_LEVEL,
                   sandboxed: bool = True, budget_s: float | None = None) -> Batch:
    """One crate per candidate, each compiled by its own rustc call against the engine's prebuilt
    libraries (in the sandbox: never cargo, which would write the engine's target folder), as many
    at once as there are CPUs, each under the compile budget and the memory cap."""
    root = workdir / "crates"
    indices = write_crates(ws, function, sources, root, only)
    build = ws.build()
    budget = budget_s if budget_s is not None else compile_budget.budget_s()
    memory = compile_budget.memory_bytes()
    jail = compile_jail(build, workdir, sandboxed, memory)
    verdicts = [Verdict(i) for i in range(len(sources))]
    t0 = time.monotonic()
    batch = Batch(function, "crates", verdicts, rounds=1)

    def one(i: int) -> tuple[compile_budget.Run, Path]:
        d = root / cand_id(i)
        out = d / "probe"
        argv = [_rustc(jail), "--edition", "2021", "--crate-type", "bin", "--crate-name", f"cand_{cand_id(i)}",
                "-C", f"opt-level={opt_level}", "-C", "debuginfo=0", "-C", "codegen-units=16",
                "--error-format=json", *_link_args(build), "-o", str(out), str(d / "src" / "main.rs")]
        [run] = compile_budget.race([argv], jail, budget, False, [])
        return run, out

    with ThreadPoolExecutor(max_workers=max(1, min(len(indices), os.cpu_count() or 1))) as pool:
        results = dict(zip(indices, pool.map(one, indices), strict=True))
    for i, (run, out) in results.items():
        if run.out.returncode == 0 and not run.stopped and out.is_file():
            verdicts[i].compiled = True
            batch.binaries[i] = out
            continue
        first = diagnostics.first_error(run.out.stderr.splitlines(), function, f"{function}.rs")
        stderr = run.out.stderr.strip().splitlines() or ["(no message)"]
        why = compile_budget.why_stopped(run, memory)
        verdicts[i].error = first or why or ("did not build: " + stderr[-1])
    batch.compile_s = time.monotonic() - t0
    return batch


# ---- scoring: the candidate's process answers, the judge decides ----

def run_limits(timeout_ms: int) -> sandbox.Limits:
    """The caps of one candidate's run: memory from NEV_SANDBOX_MEMORY_MB, CPU twice the time limit
    (and the inputs' load) so that threads a candidate starts cannot outlast it."""
    return sandbox.Limits.from_settings(cpu_s=max(10, 2 * timeout_ms // 1000 + 10))


def _argv(binary: Path, index: int, inputs: Path, lock: Path | None) -> list[str]:
    argv = [str(binary), "--inputs", str(inputs), "--only", cand_id(index)]
    if lock is not None:
        argv += ["--lockdown", str(lock)]
    return argv


def score(batch: Batch, corpus_dir: Path, cases: bool = True, timeout_ms: int = 10_000,
          sandboxed: bool = True, truth: judge.Truth | None = None) -> Batch:
    """Run every compiled candidate over the corpus's inputs, each in a process of its own, as many
    at once as there are CPUs, in one sandbox (`sandbox.run_many`; each runner locks itself before
    calling its candidate) unless `sandboxed` is False; then judge each one's outputs here
    (`crates_bridge.judge`): the answers never enter a candidate's process."""
    t0 = time.monotonic()
    truth = truth or judge.load_truth(corpus_dir, batch.function)
    limits = run_limits(timeout_ms)
    todo = sorted(batch.binaries)
    folders = sorted({batch.binaries[i].parent for i in todo})
    locks: dict[Path, Path] = {}     # per folder of binaries: the runner's filter beside them
    inputs: dict[Path, Path] = {}    # and the corpus's inputs (inputs only)
    if sandboxed and todo:
        sandbox.check()
        bpf = sandbox.filter_bpf("runner")
        for folder in folders:
            locks[folder] = folder / "runner.bpf"
            locks[folder].write_bytes(bpf)
    for folder in folders:
        inputs[folder] = truth.write_inputs(folder / "inputs.jsonl")
    keep = truth.output_bound() + 1
    jobs = [sandbox.Job(_argv(batch.binaries[i], i, inputs[batch.binaries[i].parent],
                              locks.get(batch.binaries[i].parent)), keep=keep) for i in todo]
    reads = (*sorted({batch.binaries[i] for i in todo}), *inputs.values(), *locks.values())
    jail = sandbox.Jail(read=reads, processes=False, limits=limits, bare=not sandboxed, etc=("ld.so.cache",))
    outs = sandbox.run_many(jobs, jail, parallel=max(1, min(len(todo), os.cpu_count() or 1)),
                            timeout_each=timeout_ms / 1000 + 5)
    for i, out in zip(todo, outs, strict=True):
        v = batch.verdicts[i]
        got = judge.judge_outcome(truth, out, limits, timeout_ms / 1000, keep_cases=cases)
        if got.error:
            v.run_error = got.error
            continue
        v.cases_run, v.cases_passed, v.cases = got.cases_run, got.cases_passed, got.cases
        v.ns_per_case = got.ns_per_case
    batch.score_s = time.monotonic() - t0
    return batch


def probe(ws: Workspace, function: str, sources: Sequence[str], corpus_dir: Path, workdir: Path,
          mode: str = DEFAULT_MODE, opt_level: int = DEFAULT_OPT_LEVEL, cases: bool = True,
          timeout_ms: int = 10_000, sandboxed: bool = True, budget_s: float | None = None) -> Batch:
    """Compile a batch of candidate sources of `function` and score each over `corpus_dir`, in the
    sandbox unless `sandboxed` is False (`--no-sandbox`: a trusted local run, warned about)."""
    if sandboxed:
        sandbox.check()
    else:
        sandbox.warn_bare("the candidate probe")
    if mode not in MODES:
        raise BridgeError(f"unknown probe mode `{mode}`; use one of {', '.join(MODES)}")
    if not sources:
        raise BridgeError("no candidates to probe")
    if not (corpus_dir / "manifest.json").is_file():
        raise BridgeError(f"{corpus_dir}: no corpus here; build it with `nev oracle build {corpus_dir.name}`")
    _check_function(ws, function)
    truth = judge.load_truth(corpus_dir, function)
    workdir.mkdir(parents=True, exist_ok=True)
    if mode == "single":
        batch = compile_single(ws, function, sources, workdir, opt_level, sandboxed=sandboxed,
                               budget_s=budget_s)
    else:
        batch = compile_crates(ws, function, sources, workdir, opt_level=opt_level, sandboxed=sandboxed,
                               budget_s=budget_s)
    return score(batch, corpus_dir, cases=cases, timeout_ms=timeout_ms, sandboxed=sandboxed,
                 truth=truth)
