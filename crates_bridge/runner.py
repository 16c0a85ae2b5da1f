"""Committed generated functions, judged: `generated_score_check` runs each one over its corpus's
inputs in the sandbox, and the judge (`crates_bridge/judge.py`) compares its outputs with the
corpus's answers, which never enter that process.

`score_generated` gives one `Score` per generated function (`{"function", "corpus", "cases_run",
"cases_passed", "ns_per_case", "cases"?, "error"?}` in `nev scores --json`), or one carrying the
error when it could not be scored (no corpus, a changed corpus, a runner that misbehaved).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from crates_bridge import judge
from crates_bridge.errors import BridgeError
from crates_bridge.judge import CaseResult, Score
from crates_bridge.workspace import Workspace
from lanes.base import sandbox

__all__ = ["CaseResult", "Score", "SCORE_CHECK", "list_caches", "registry", "score_generated"]

SCORE_CHECK = "generated_score_check"
SELF_PATH = "crates/generation/src/bin/generated_score_check.rs"


def _run(argv: list[str], timeout: float, reads: Sequence[Path] = ()) -> subprocess.CompletedProcess:
    """The engine's own binary (it holds model-written functions) in the sandbox: it reads itself
    and `reads`, writes nothing outside its private /tmp, starts no process, reaches no network."""
    jail = sandbox.Jail(read=(Path(argv[0]), *reads), processes=False,
                        limits=sandbox.Limits.from_settings(cpu_s=int(timeout) + 10))
    out = sandbox.run(argv, jail, timeout=timeout)
    if out.timed_out:
        raise BridgeError(f"{Path(argv[0]).name} ran over {timeout:.0f} s; stopped")
    return subprocess.CompletedProcess(argv, out.returncode, out.stdout, out.stderr)


def discovered(generated_dir: Path) -> list[str]:
    """`<name>` of every `<name>.provenance.json` in the generated folder, sorted."""
    try:
        return sorted(p.name.removesuffix(".provenance.json") for p in generated_dir.iterdir()
                      if p.name.endswith(".provenance.json"))
    except OSError as e:
        raise BridgeError(f"{generated_dir}: cannot list generated functions ({e.strerror})") \
            from None


def score_generated(ws: Workspace, corpus_root: Path, only: str | None = None, cases: bool = False,
                    timeout: float = 1800.0, generated_dir: Path | None = None) -> list[Score]:
    """Judge every generated function of `ws` (or `only` one) against `corpus_root/<corpus>/`.

    Functions are discovered from the provenance records in `generated_dir` (default: the
    workspace's own); each must have an entry in the binary's FUNCTIONS registry. Each runs in a
    process of its own in one sandbox, locked before it calls the function, with the corpus's
    inputs only; the judge, here, compares.
    """
    return score_binary(ws.build().binary(SCORE_CHECK), generated_dir or ws.generated_dir,
                        corpus_root, only, cases, timeout)


def score_binary(binary: Path, gen: Path, corpus_root: Path, only: str | None = None,
                 cases: bool = False, timeout: float = 1800.0) -> list[Score]:
    """`score_generated` of an engine's built `generated_score_check` (a verify's scoring
    service runs it from outside the verify's jail, `bench/oracle/truth_service.py`)."""
    names = discovered(gen)
    reg = registry_of(binary)
    for name in names:
        if name not in reg:
            record = gen / (name + ".provenance.json")
            raise BridgeError(f"{record}: `{name}` has no entry in FUNCTIONS in {SELF_PATH}; "
                              "add one naming its runner and its corpus")
    if only is not None:
        if only not in names:
            raise BridgeError(f"no generated function `{only}` in {gen}")
        names = [only]
    scores: dict[str, Score] = {}
    truths: dict[str, judge.Truth] = {}
    for name in names:
        try:
            truths[name] = judge.load_truth(corpus_root / reg[name], name)
        except BridgeError as e:
            scores[name] = Score(function=name, corpus=reg[name], error=str(e))
    if truths:
        sandbox.check()
        with tempfile.TemporaryDirectory(prefix="nev-judge-") as tmp:
            folder = Path(tmp)
            folder.chmod(0o755)
            lock = folder / "runner.bpf"
            lock.write_bytes(sandbox.filter_bpf("runner"))
            todo = sorted(truths)
            jobs = [sandbox.Job([str(binary), "--run", name, "--inputs",
                                 str(truths[name].write_inputs(folder / f"{name}.inputs.jsonl")),
                                 "--lockdown", str(lock)],
                                keep=truths[name].output_bound()) for name in todo]
            limits = sandbox.Limits.from_settings(cpu_s=int(timeout) + 10)
            jail = sandbox.Jail(read=(binary, folder), processes=False, limits=limits,
                                etc=("ld.so.cache",))
            outs = sandbox.run_many(jobs, jail, parallel=1, timeout_each=timeout)
            for name, out in zip(todo, outs, strict=True):
                verdict = judge.judge_outcome(truths[name], out, limits, timeout, keep_cases=cases)
                scores[name] = judge.to_score(verdict, name, corpus_name=reg[name])
    return [scores[n] for n in names]


def list_caches(ws: Workspace) -> list[str]:
    """The corpora the registry names (`generated_score_check --list-caches`): what to build."""
    cp = _run([str(ws.build().binary(SCORE_CHECK)), "--list-caches"], 120)
    if cp.returncode != 0:
        raise BridgeError(f"{SCORE_CHECK} --list-caches failed: {cp.stderr.strip()[:200]}")
    return [x.strip() for x in cp.stdout.splitlines() if x.strip()]


def registry(ws: Workspace) -> dict[str, str]:
    """function -> corpus, from the FUNCTIONS registry (`generated_score_check --list`)."""
    return registry_of(ws.build().binary(SCORE_CHECK))


def registry_of(binary: Path) -> dict[str, str]:
    """`registry` of a built `generated_score_check`."""
    cp = _run([str(binary), "--list"], 120)
    if cp.returncode != 0:
        raise BridgeError(f"{SCORE_CHECK} --list failed: {cp.stderr.strip()[:200]}")
    return dict(x.split("\t", 1) for x in cp.stdout.splitlines() if "\t" in x)
