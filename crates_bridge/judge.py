"""The judge: the only place that compares model-written code's outputs with the ground truth.

A process that runs a candidate (or a committed generated function) gets the corpus's inputs and
nothing else: no expected value, no tolerance, no case id, no nonce (`Truth.write_inputs`). It
writes its outputs on stdout (the format below). This module, in a process that never runs
candidate code, holds the expected geometry read from the corpus, parses the outputs strictly,
compares them with the corpus's tolerance, times the process from outside, and writes the verdict
(`judge`). So a candidate can influence its own outputs and its own time, never its verdict, the
answers or its neighbours' verdicts (docs/sandbox.md, "The judge").

The outputs, as `crates_bridge/engine/.../score.rs` writes them:

    nev-outputs 1 <function> <field>,<field>,...    the header: the values' order
    <k> <v> <v> ...                 case k (0, 1, ... in order): one value per field
    <k> panic <message>             case k panicked (that case fails)

| what the judge reads                    | verdict                                        |
|-----------------------------------------|------------------------------------------------|
| every record, values within tolerance   | passed (NaN never is)                          |
| more bytes than its case count allows   | `wrote N bytes of output, over the M allowed`  |
| no header; wrong format/function/fields | `malformed output: ...`                        |
| a record out of order, repeated, bad    | `malformed output: line L: ...`                |
| fewer records than cases                | how the process ended (`sandbox.explain`), or  |
|                                         | `exited 0 after writing K of N cases' outputs` |
| more records than cases                 | `malformed output: more records than ...`      |
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from crates_bridge import corpus
from crates_bridge.errors import BridgeError, load_json_lines
from lanes.base import sandbox

FORMAT = "nev-outputs 1"
#: Bytes of output allowed per case (a record is ~40-80 bytes; a panic's message is cut at 200
#: characters) and for the header.
BYTES_PER_CASE = 320
HEADER_BYTES = 1024
_NUM = re.compile(r"-?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|inf|NaN)\Z")


@dataclass(frozen=True)
class CaseResult:
    id: str
    passed: bool
    #: field -> (expected, got), for the fields outside the tolerance
    diff: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Score:
    """One function (or one candidate) judged over its corpus."""

    function: str
    cases_run: int = 0
    cases_passed: int = 0
    #: the process's wall time (measured by its supervisor, from outside) per case
    ns_per_case: float | None = None
    corpus: str | None = None
    candidate: str | None = None
    cases: tuple[CaseResult, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Truth:
    """One corpus as the judge holds it: what a candidate gets (the inputs) and what only the
    judge sees (ids, expected values, tolerance)."""

    folder: Path
    function: str
    fields: tuple[str, ...]
    ids: tuple[str, ...]
    inputs: tuple[str, ...]  # one JSON object per case, as the candidate's process reads them
    expected: tuple[tuple[float, ...], ...]  # per case, in `fields` order
    tolerance_px: float

    @property
    def cases(self) -> int:
        return len(self.ids)

    def output_bound(self) -> int:
        """The most bytes of output a process answering this corpus may write."""
        return HEADER_BYTES + BYTES_PER_CASE * max(1, self.cases)

    def write_inputs(self, path: Path) -> Path:
        """The inputs file a candidate's process reads: inputs only, in the corpus's order."""
        path.write_text("".join(x + "\n" for x in self.inputs), encoding="utf-8")
        return path


def _number(v: object, where: str) -> float:
    if isinstance(v, bool):
        raise ValueError(where)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v.endswith("px"):
        try:
            return float(v[:-2])
        except ValueError:
            pass
    raise ValueError(where)


def load_truth(folder: Path, function: str | None = None) -> Truth:
    """Read a corpus folder (its content hash checked first): BridgeError naming the file and what
    to do when it is absent, changed, of another function or malformed."""
    if not (folder / "manifest.json").is_file():
        raise BridgeError(
            f"{folder / 'manifest.json'}: cannot read the corpus manifest; build the "
            f"corpus with `nev oracle build {folder.name}`"
        )
    man = corpus.read_manifest(folder)
    corpus.check_content(folder, man)
    if function is not None and man.function != function:
        raise BridgeError(f"{folder}: holds cases of `{man.function}`, not `{function}`")
    path = folder / "cases.jsonl"
    ids: list[str] = []
    inputs: list[str] = []
    expected: list[tuple[float, ...]] = []
    fields: tuple[str, ...] | None = None
    # nev's one JSON Lines reader: a line that is not JSON, not UTF-8 or too deep is one line
    for n, case in load_json_lines(path, "corpus cases", "rebuild the corpus"):
        try:
            cid, inp, exp = case["id"], case["input"], case["expected"]
            if (
                not isinstance(cid, str)
                or not isinstance(inp, dict)
                or not isinstance(exp, dict)
            ):
                raise TypeError
            keys = tuple(sorted(exp))
            if fields is None:
                fields = keys
            elif keys != fields:
                raise BridgeError(
                    f"{path} line {n}: expected fields {', '.join(keys)} differ from the "
                    f"first case's ({', '.join(fields)}); rebuild the corpus"
                )
            expected.append(tuple(_number(exp[k], k) for k in fields))
        except (KeyError, TypeError):
            raise BridgeError(
                f"{path} line {n}: not a case (id, input, expected); rebuild the corpus"
            ) from None
        except ValueError as e:
            raise BridgeError(
                f"{path} line {n}: expected {e} is not a number; rebuild the corpus"
            ) from None
        ids.append(cid)
        inputs.append(json.dumps(inp, sort_keys=True))
    if man.cases is not None and man.cases != len(ids):
        raise BridgeError(
            f"{folder}: the manifest says {man.cases} cases but cases.jsonl holds {len(ids)}; "
            "rebuild the corpus"
        )
    return Truth(
        folder,
        man.function,
        fields or (),
        tuple(ids),
        tuple(inputs),
        tuple(expected),
        man.tolerance_px,
    )


@dataclass(frozen=True)
class Judged:
    """The judge's verdict on one process's outputs."""

    cases_run: int = 0
    cases_passed: int = 0
    cases: tuple[CaseResult, ...] = ()
    #: why the outputs could not be judged (the candidate's failure, named); None: judged
    error: str | None = None
    #: the process's wall time per case, measured from outside it (`judge_outcome`)
    ns_per_case: float | None = None


def _header(truth: Truth, first: str) -> tuple[int, ...] | str:
    """For each of the truth's fields, its position in a record (from the header line), or why the
    header is not one."""
    head = f"{FORMAT} {truth.function} "
    if not first.startswith(head):
        return (
            f"malformed output: its first line is {first[:60]!r}, "
            f"not the `{FORMAT} {truth.function} "
            "FIELDS` header"
        )
    order = first[len(head) :].split(",")
    if sorted(order) != list(truth.fields) or len(set(order)) != len(order):
        return (
            f"malformed output: the header names the fields {', '.join(order)[:120]}, "
            f"not {', '.join(truth.fields)}"
        )
    return tuple(order.index(f) for f in truth.fields)


def _record(truth: Truth, k: int, line: str, at: tuple[int, ...], keep: bool) -> CaseResult | str:
    """Case k's record judged (a CaseResult), or why it is not a record of case k (a str)."""
    parts = line.split(" ")
    if parts[0] != str(k):
        return f"malformed output: line {k + 2}: expected the record of case {k}, got {line[:40]!r}"
    if len(parts) >= 2 and parts[1] == "panic":
        return CaseResult(truth.ids[k], False, {}, "panicked: " + " ".join(parts[2:])[:200])
    if len(parts) != len(at) + 1 or not all(_NUM.match(p) for p in parts[1:]):
        return f"malformed output: line {k + 2}: not {len(at)} numbers for case {k}"
    got = [float(p) for p in parts[1:]]
    diff: dict[str, tuple[float | None, float | None]] = {}
    ok = True
    for j, name in enumerate(truth.fields):
        g, e = got[at[j]], truth.expected[k][j]
        if not abs(g - e) <= truth.tolerance_px:  # NaN never passes
            ok = False
            if keep:
                diff[name] = (e, g if math.isfinite(g) else None)
    return CaseResult(truth.ids[k], ok, diff)


def judge(
    truth: Truth, stdout: str, stdout_bytes: int, ended: str | None, keep_cases: bool = True
) -> Judged:
    """Compare one process's `stdout` (it wrote `stdout_bytes` in all) with `truth`. `ended` is why
    the process ended abnormally (`sandbox.explain`, or the time limit), None when it exited 0."""
    bound = truth.output_bound()
    if stdout_bytes > bound:
        return Judged(
            error=f"wrote {stdout_bytes} bytes of output, over the {bound} allowed for "
            f"{truth.cases} cases"
        )
    lines = stdout.split("\n")
    if lines[-1] == "":
        lines.pop()
    at = _header(truth, lines[0]) if lines else "exited 0 before writing its outputs"
    if isinstance(at, str):
        return Judged(error=ended or at)
    n = truth.cases
    if len(lines) - 1 > n:
        return Judged(error=f"malformed output: more records than the {n} cases")
    results: list[CaseResult] = []
    for k, line in enumerate(lines[1:]):
        r = _record(truth, k, line, at, keep_cases)
        if isinstance(r, str):
            return Judged(error=ended or r)
        results.append(r)
    if ended or len(results) < n:
        return Judged(error=ended or f"exited 0 after writing {len(results)} of {n} cases' outputs")
    return Judged(
        cases_run=n,
        cases_passed=sum(r.passed for r in results),
        cases=tuple(results) if keep_cases else (),
    )


def ended(out: sandbox.Outcome, limits: sandbox.Limits, timeout_s: float) -> str | None:
    """Why a process ended abnormally (None: it exited 0 in time): what `judge` gets as `ended`."""
    if out.timed_out:
        return f"timed out after {round(timeout_s * 1000)} ms"
    if out.returncode == 0:
        return None
    return sandbox.explain(out, limits, reported=False)


def judge_outcome(
    truth: Truth,
    out: sandbox.Outcome,
    limits: sandbox.Limits,
    timeout_s: float,
    keep_cases: bool = True,
) -> Judged:
    """`judge` of one jailed process's outcome (its output, how it ended), with its time per case
    as its supervisor measured the whole process from outside."""
    got = judge(
        truth,
        out.stdout,
        max(out.stdout_bytes, len(out.stdout.encode())),
        ended(out, limits, timeout_s),
        keep_cases,
    )
    if out.elapsed_s is None or not got.cases_run:
        return got
    return dataclasses.replace(got, ns_per_case=round(out.elapsed_s * 1e9 / got.cases_run, 1))


def to_score(judged: Judged, function: str, corpus_name: str | None = None) -> Score:
    """A `Score` (the form floors, scores and batches read) from the judge's verdict."""
    return Score(
        function=function,
        cases_run=judged.cases_run,
        cases_passed=judged.cases_passed,
        ns_per_case=judged.ns_per_case,
        corpus=corpus_name,
        cases=judged.cases,
        error=judged.error,
    )
