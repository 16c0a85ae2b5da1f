"""The runner protocol: run `generated_score_check` (or a candidate probe) and read its JSON lines.

Each line is one function (or one candidate) scored over its corpus:
`{"function", "corpus"?, "candidate"?, "cases_run", "cases_passed", "ns_per_case",
"cases"?: [{"id", "passed", "diff"?: {field: {"expected", "got"}}, "error"?}]}`
or `{"function", "error"}` when it could not be scored.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crates_bridge.errors import BridgeError
from crates_bridge.workspace import Workspace
from lanes.base import sandbox

SCORE_CHECK = "generated_score_check"


@dataclass(frozen=True)
class CaseResult:
    id: str
    passed: bool
    #: field -> (expected, got), for the fields outside the tolerance
    diff: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Score:
    function: str
    cases_run: int = 0
    cases_passed: int = 0
    ns_per_case: float | None = None
    corpus: str | None = None
    candidate: str | None = None
    cases: tuple[CaseResult, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def parse_line(line: str) -> Score:
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        raise BridgeError(f"the runner printed a line that is not JSON ({e.msg}): {line[:120]!r}") from None
    cases = tuple(
        CaseResult(c["id"], bool(c["passed"]),
                   {k: (v.get("expected"), v.get("got")) for k, v in (c.get("diff") or {}).items()},
                   c.get("error"))
        for c in d.get("cases", ())
    )
    return Score(function=d.get("function", "?"), cases_run=int(d.get("cases_run", 0)),
                 cases_passed=int(d.get("cases_passed", 0)), ns_per_case=d.get("ns_per_case"),
                 corpus=d.get("corpus"), candidate=d.get("candidate"), cases=cases, error=d.get("error"))


def parse_lines(lines: Iterable[str]) -> list[Score]:
    return [parse_line(x) for x in lines if x.strip().startswith("{")]


def _run(argv: list[str], timeout: float, reads: Sequence[Path] = ()) -> subprocess.CompletedProcess:
    """The engine's own binary (it holds model-written functions) in the sandbox: it reads itself
    and `reads`, writes nothing outside its private /tmp, starts no process, reaches no network."""
    jail = sandbox.Jail(read=(Path(argv[0]), *reads), processes=False,
                        limits=sandbox.Limits.from_settings(cpu_s=int(timeout) + 10))
    out = sandbox.run(argv, jail, timeout=timeout)
    if out.timed_out:
        raise BridgeError(f"{Path(argv[0]).name} ran over {timeout:.0f} s; stopped")
    return subprocess.CompletedProcess(argv, out.returncode, out.stdout, out.stderr)


def score_generated(ws: Workspace, corpus_root: Path, only: str | None = None, cases: bool = False,
                    timeout: float = 1800.0, generated_dir: Path | None = None) -> list[Score]:
    """Score every generated function of `ws` (or `only` one) against `corpus_root/<corpus>/`.

    Functions are discovered from the provenance records in `generated_dir`
    (default: the workspace's own).
    """
    binary = ws.build().binary(SCORE_CHECK)
    gen = generated_dir or ws.generated_dir
    argv = [str(binary), "--generated-dir", str(gen), "--corpus-root", str(corpus_root)]
    if only:
        argv += ["--only", only]
    if cases:
        argv.append("--cases")
    cp = _run(argv, timeout, (gen, corpus_root))
    if cp.returncode not in (0, 1):
        msg = cp.stderr.strip().splitlines()
        raise BridgeError(msg[-1].removeprefix(f"{SCORE_CHECK}: ") if msg else f"{SCORE_CHECK} exited {cp.returncode}")
    return parse_lines(cp.stdout.splitlines())


def list_caches(ws: Workspace) -> list[str]:
    """The corpora the registry names (`generated_score_check --list-caches`): what to build."""
    cp = _run([str(ws.build().binary(SCORE_CHECK)), "--list-caches"], 120)
    if cp.returncode != 0:
        raise BridgeError(f"{SCORE_CHECK} --list-caches failed: {cp.stderr.strip()[:200]}")
    return [x.strip() for x in cp.stdout.splitlines() if x.strip()]


def registry(ws: Workspace) -> dict[str, str]:
    """function -> corpus, from the FUNCTIONS registry (`generated_score_check --list`)."""
    cp = _run([str(ws.build().binary(SCORE_CHECK)), "--list"], 120)
    if cp.returncode != 0:
        raise BridgeError(f"{SCORE_CHECK} --list failed: {cp.stderr.strip()[:200]}")
    return dict(x.split("\t", 1) for x in cp.stdout.splitlines() if "\t" in x)
