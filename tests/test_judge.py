"""The judge (crates_bridge/judge.py, docs/sandbox.md "The judge"): a candidate's process gets the
inputs only and writes outputs; a separate process holds the answers and writes the verdict. The
red team: candidates that read answers out of memory through a compiler soundness hole, forge a
report or records, flood or garble their output, hang the compiler or blow up its memory."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

from crates_bridge import candidates, corpus, hostile, judge
from crates_bridge.errors import BridgeError
from crates_bridge.samples import GOOD, RIGHT
from crates_bridge.workspace import EXAMPLE_ENGINE, no_wrapper_env

pytestmark = pytest.mark.parts  # bubblewrap and the Rust compiler, here
# fixtures `ws` (the example engine, built) and `block_corpus` (120 cases): tests/conftest.py

N = 120


# ---- the judge's reading of outputs (pure) ----


def _truth(expected, tol=0.5):
    n = len(expected)
    return judge.Truth(
        Path("/c"),
        "f",
        ("a", "b"),
        tuple(f"f-{k}" for k in range(n)),
        ("{}",) * n,
        tuple(expected),
        tol,
    )


HEAD = "nev-outputs 1 f b,a\n"


@pytest.mark.parametrize(
    "out, ended, words",
    [
        (HEAD + "0 2.0 1.0\n1 4.0 3.0\n", None, None),
        (
            HEAD + "1 4.0 3.0\n0 2.0 1.0\n",
            None,
            "malformed output: line 2: expected the record of case 0",
        ),
        (HEAD + "0 2.0 1.0\n0 2.0 1.0\n", None, "malformed output: line 3"),
        (HEAD + "0 2.0 1.0\n", None, "exited 0 after writing 1 of 2 cases' outputs"),
        (HEAD + "0 2.0 1.0\n", "killed: memory cap 2 GiB", "killed: memory cap 2 GiB"),
        (HEAD + "0 2.0 1.0\n1 4.0 3.0\n2 0 0\n", None, "more records than the 2 cases"),
        (HEAD + "0 2.0 1.0\n1 4.0 x\n", None, "line 3: not 2 numbers"),
        (HEAD + "0 2.0 1.0\n1 4.0 3.0 5.0\n", None, "line 3: not 2 numbers"),
        ("nev-outputs 1 f a,a\n0 1 1\n1 3 3\n", None, "the header names the fields a, a"),
        ('{"cases_passed": 2, "cases_run": 2}\n', None, "malformed output: its first line is"),
        ("", None, "exited 0 before writing its outputs"),
        (HEAD + "0 2.0 1.0\n1 4.0 3.0\n", "aborted", "aborted"),
    ],
)
def test_the_judge_reads_outputs_strictly_and_names_what_is_wrong(out, ended, words):
    got = judge.judge(_truth([(1.0, 2.0), (3.0, 4.0)]), out, len(out.encode()), ended)
    if words is None:
        assert got.error is None and (got.cases_run, got.cases_passed) == (2, 2)
    else:
        assert got.error is not None and words in got.error and got.cases_passed == 0


def test_the_judge_compares_with_the_tolerance_and_never_passes_nan():
    t = _truth([(1.0, 2.0), (3.0, 4.0), (5.0, 6.0)], tol=0.25)
    out = HEAD + "0 2.2 0.8\n1 4.0 3.3\n2 NaN 5.0\n"
    got = judge.judge(t, out, len(out), None)
    assert [c.passed for c in got.cases] == [True, False, False]
    assert got.cases[1].diff == {"a": (3.0, 3.3)} and got.cases[2].diff == {"b": (6.0, None)}


def test_the_judge_refuses_more_output_than_its_bound_and_names_a_panicked_case():
    t = _truth([(1.0, 2.0)])
    assert "over the" in (judge.judge(t, HEAD, t.output_bound() + 1, None).error or "")
    got = judge.judge(t, HEAD + "0 panic no room\n", 30, None)
    assert got.error is None and got.cases[0].error == "panicked: no room" and got.cases_passed == 0


def test_a_corpus_of_another_function_or_changed_bytes_is_refused(block_corpus, tmp_path):
    with pytest.raises(BridgeError, match="holds cases of `block_width`, not `abspos_width`"):
        judge.load_truth(block_corpus, "abspos_width")
    t = judge.load_truth(block_corpus, "block_width")
    assert t.cases == N and t.fields == ("margin_left", "margin_right", "width")
    # what a candidate gets holds no expected value
    written = t.write_inputs(tmp_path / "inputs.jsonl").read_text()
    assert (
        "expected" not in written and "tolerance" not in written and "block_width-0" not in written
    )
    assert len(written.splitlines()) == N


# ---- the red team ----


def test_cheating_candidates_fail_and_their_good_neighbours_score_as_alone(
    ws, block_corpus, tmp_path
):
    bad = hostile.cheaters(N)
    good = [GOOD, RIGHT[1]]
    sources = [good[0], *(s for _, s, _ in bad), hostile.READS_ITSELF, good[1]]
    alone = candidates.probe(
        ws, "block_width", good, block_corpus, tmp_path / "alone", timeout_ms=3000
    )
    result = candidates.probe(
        ws, "block_width", sources, block_corpus, tmp_path / "probe", timeout_ms=3000
    )
    for (name, _, words), v in zip(bad, result.verdicts[1:-2], strict=True):
        assert v.compiled, (name, v.error)
        assert v.status != "passed" and v.cases_passed < N, (name, v.status, v.cases_passed)
        said = v.run_error or v.status
        assert words in said, (name, said)
    # the hole is live in the jailed runner: reading its own input through it sees the right bits
    assert result.verdicts[-2].status == "passed", result.verdicts[-2].run_error
    for a, b in ((alone.verdicts[0], result.verdicts[0]), (alone.verdicts[1], result.verdicts[-1])):
        assert a.status == b.status == "passed"
        assert (a.cases_run, a.cases_passed) == (b.cases_run, b.cases_passed) == (N, N)


_LEAKY_MAIN = """
// A runner as it was before the judge: every case's expected values beside its input, in the
// process that calls the candidate. READ_ANSWERS must find them here.
#![allow(dead_code, unused)]
mod generated { pub use layout::prelude; #[forbid(unsafe_code)] pub mod cand; }
use layout::prelude::*;
fn main() {
    let text = std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap();
    let mut cases: Vec<(String, BlockWidthInput, Vec<f64>)> = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(2, '\\t');
        // as the old runner's prepare() built them: with_capacity(fields), then pushed
        let mut exp: Vec<f64> = Vec::with_capacity(3);
        for x in parts.next().unwrap().split(',') { exp.push(x.parse().unwrap()); }
        let v = generation::json::parse(parts.next().unwrap()).unwrap();
        let i = <BlockWidthInput as generation::score::CaseInput>::from_json(&v).unwrap();
        cases.push((format!("case-{}", cases.len()), i, exp));
    }
    let mut hit = 0;
    for (_, i, e) in &cases {
        let o = generated::cand::block_width(i);
        if [o.width, o.margin_left, o.margin_right] == e[..] { hit += 1; }
    }
    println!("{hit}/{}", cases.len());
}
"""


def test_reading_the_answers_through_the_hole_works_against_a_runner_that_holds_them(
    ws, block_corpus, tmp_path
):
    """The control for the red team's `read-answers`: beside answers it finds them all."""
    build = ws.build()
    src = tmp_path / "src"
    (src / "generated").mkdir(parents=True)
    (src / "generated" / "cand.rs").write_text(hostile.READ_ANSWERS)
    (src / "main.rs").write_text(_LEAKY_MAIN)
    t = judge.load_truth(block_corpus, "block_width")
    order = [t.fields.index(f) for f in ("width", "margin_left", "margin_right")]
    (tmp_path / "cases.txt").write_text(
        "".join(
            ",".join(repr(e[k]) for k in order) + "\t" + inp + "\n"
            for e, inp in zip(t.expected, t.inputs, strict=True)
        )
    )
    cp = subprocess.run(
        [
            "rustc",
            "--edition",
            "2021",
            "-C",
            "opt-level=1",
            *candidates._link_args(build),
            "-o",
            str(tmp_path / "leaky"),
            str(src / "main.rs"),
        ],
        capture_output=True,
        text=True,
        env=no_wrapper_env(),
        timeout=300,
    )
    assert cp.returncode == 0, cp.stderr[-2000:]
    out = subprocess.run(
        [str(tmp_path / "leaky"), str(tmp_path / "cases.txt")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == f"{N}/{N}", out.stdout + out.stderr


def _dump_readable_memory(pid: int) -> bytes:
    chunks = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(lo)
                chunks.append(mem.read(hi - lo))
            except (OSError, OverflowError, ValueError):
                continue
    return b"".join(chunks)


def test_the_answers_are_nowhere_in_a_candidates_process(ws, tmp_path):
    """A corpus whose expected values and tolerance are canaries (bit patterns found nowhere else);
    while the candidate spins inside its first call, its whole readable memory is read from outside:
    the input canary is there, no expected canary and not the tolerance."""
    inputs = [corpus.block_width_input(s) for s in range(40)]
    inputs[0]["cb_width"] = 777.123456789
    cases = [
        {
            "id": f"block_width-{k:06d}",
            "seed": k,
            "input": inp,
            "expected": {
                "width": 31337.1 + k / 7,
                "margin_left": 41337.3 + k / 9,
                "margin_right": 51337.7 + k / 11,
            },
        }
        for k, inp in enumerate(inputs)
    ]
    folder = corpus.write_corpus(
        tmp_path / "canary" / "block_width",
        "block_width",
        cases,
        {"test": "1"},
        tolerance_px=0.0123456789,
    )
    spinner = GOOD.replace(
        "    let first = solve(input, input.width);",
        "    if input.cb_width == 777.123456789 { let t = std::time::Instant::now(); "
        "while t.elapsed().as_secs_f64() < 6.0 { std::hint::black_box(0); } }\n"
        "    let first = solve(input, input.width);",
        1,
    )
    found: dict[str, bool] = {}

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not found:
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if (
                    b"--only" in cmd
                    and any(str(tmp_path).encode() in c for c in cmd)
                    and b"--inputs" in cmd
                ):
                    time.sleep(1.0)  # inside its first call by now
                    blob = _dump_readable_memory(int(pid))
                    found["input"] = struct.pack("<d", 777.123456789) in blob
                    found["expected"] = any(
                        struct.pack("<d", v) in blob for c in cases for v in c["expected"].values()
                    )
                    found["tolerance"] = struct.pack("<d", 0.0123456789) in blob
                    found["size"] = len(blob) > 100_000
                    return
            time.sleep(0.05)

    w = threading.Thread(target=watch)
    w.start()
    result = candidates.probe(
        ws, "block_width", [spinner], folder, tmp_path / "probe", timeout_ms=20_000
    )
    w.join()
    assert found, "the candidate's process was never seen"
    assert found["size"] and found["input"], (
        found
    )  # the dump reads the process (its input is there)
    assert not found["expected"] and not found["tolerance"], found
    assert result.verdicts[0].status == "failed" and result.verdicts[0].cases_passed == 0


def test_a_compile_that_hangs_or_blows_up_costs_the_batch_its_budget_not_the_others(
    ws, block_corpus, tmp_path
):
    sources = [f"// {k}\n{GOOD}" for k in range(12)]
    sources[3] = hostile.COMPILE_HANG
    sources[7] = hostile.COMPILE_BLOWUP
    sources[9] = hostile.COMPILE_BIG_STATIC
    budget = 6.0
    b = candidates.compile_single(ws, "block_width", sources, tmp_path / "probe", budget_s=budget)
    candidates.score(b, block_corpus, cases=False)
    v = b.verdicts
    assert v[3].status == "compile-error" and "long_running_const_eval" in (v[3].error or "")
    assert v[7].status == "compile-error" and (
        "compile timed out" in (v[7].error or "")
        or "compiler ran out of memory" in (v[7].error or "")
    ), v[7].error
    assert v[9].status == "compile-error" and "more memory than available" in (v[9].error or ""), v[
        9
    ].error
    assert all(
        v[k].status == "passed" and v[k].cases_passed == N for k in range(12) if k not in (3, 7, 9)
    )
    assert b.mode == "single+search"
    # the budget held: one stop at it (or at the memory cap), then a search bounded by the peers
    assert b.compile_s < 3 * budget, b.compile_s


def test_one_crate_per_candidate_stops_a_hanging_compile_at_the_budget(ws, block_corpus, tmp_path):
    b = candidates.compile_crates(
        ws, "block_width", [GOOD, hostile.COMPILE_BLOWUP], tmp_path, budget_s=3.0
    )
    assert b.verdicts[0].compiled
    assert not b.verdicts[1].compiled
    assert "compile timed out after 3.0 s" in (
        b.verdicts[1].error or ""
    ) or "compiler ran out of memory" in (b.verdicts[1].error or ""), b.verdicts[1].error


def test_the_outputs_format_is_what_the_runner_writes(ws, block_corpus, tmp_path):
    b = candidates.compile_single(ws, "block_width", [GOOD], tmp_path)
    t = judge.load_truth(block_corpus, "block_width")
    inputs = t.write_inputs(tmp_path / "in.jsonl")
    out = subprocess.run(
        [str(b.binaries[0]), "--inputs", str(inputs), "--only", "c000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = out.stdout.splitlines()
    assert lines[0] == "nev-outputs 1 block_width width,margin_left,margin_right"
    assert len(lines) == N + 1 and lines[1].startswith("0 ") and lines[-1].startswith(f"{N - 1} ")
    assert json.dumps(judge.judge(t, out.stdout, len(out.stdout), None).cases_passed) == str(N)


# ---- every path that scores model-written code goes through the judge ----


def _track_job(tmp_path: Path, block_width: str, verify: str, extra: dict[str, str] | None = None):
    """A track whose committed block_width is `block_width` (floor 10/10), run as a job whose
    verify stage is `verify`, on fresh three-browser ground truth (30 seeds): (exit, the stage's
    log, the job's environment, the track's folder)."""
    from tests.helpers.job_helpers import Listener as Gateway
    from tests.helpers.job_helpers import lane_env, nev, write_manifest

    repo = tmp_path / "work"
    eng = repo / "crates_bridge" / "engine"
    shutil.copytree(EXAMPLE_ENGINE, eng, ignore=shutil.ignore_patterns("target"))
    gen = eng / "crates" / "layout" / "src" / "generated"
    (gen / "block_width.rs").write_text(block_width)
    (gen / "block_width.floor.json").write_text(json.dumps({"cases_passed": 10, "cases_run": 10}))
    for name, text in (extra or {}).items():
        (repo / name).write_text(text)
    (repo / ".gitignore").write_text("target/\n/corpus/\n")
    (repo / "README.md").write_text("a track\n")
    git_env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "track"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=git_env)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True).stdout.strip()
    gw = Gateway()
    env = lane_env(tmp_path, gw.port, NEV_CORPUS_CASES="30",
                   NEV_CORPUS_STORE=str(tmp_path / "store"),
                   # the toolchain where this machine has it (the lane's HOME is the test's)
                   RUSTUP_HOME=os.environ.get("RUSTUP_HOME", str(Path.home() / ".rustup")),
                   CARGO_HOME=os.environ.get("CARGO_HOME", str(Path.home() / ".cargo")))
    m = write_manifest(tmp_path / "job.yaml", base,
                       [{"name": "verify", "kind": "verify", "command": verify}])
    state = tmp_path / "state"
    try:
        r = nev(["job", "run", str(m), "--workdir", str(repo), "--state", str(state)], env,
                timeout=900)
    finally:
        gw.close()
    return r.returncode, (state / "logs" / "verify.log").read_text(), env, repo


@pytest.mark.parts
def test_a_jobs_verify_and_a_landings_gate_judge_a_function_that_passes_only_in_process(tmp_path):
    """The committed block_width swapped for READ_ANSWERS (it passes every case in a runner that
    holds the answers, see the control above): a job's verify stage and the landing's gate, both
    running `nev floors check` in the verify jail on fresh three-browser ground truth, refuse it."""
    from jobs import land_gate

    rc, log, env, repo = _track_job(tmp_path, hostile.READ_ANSWERS, "nev floors check")
    assert rc != 0, log
    assert "floors broken: block_width" in log, log[-3000:]
    assert "abspos_width" not in log.split("floors broken")[-1], log[-3000:]
    assert land_gate.run_here("nev floors check", repo, tmp_path / "gate.json", env) == 1


_ZEROS = (
    "use super::prelude::*;\n"
    "pub fn block_width(_input: &BlockWidthInput) -> BlockWidthOutput {\n"
    "    BlockWidthOutput { width: 0.0, margin_left: 0.0, margin_right: 0.0 }\n}\n"
)
_TAMPER = (
    "import hashlib, json, pathlib\n"
    "for m in pathlib.Path('corpus').glob('*/manifest.json'):\n"
    "    cases = m.parent / 'cases.jsonl'\n"
    "    rows = [json.loads(x) for x in cases.read_text().splitlines() if x.strip()]\n"
    "    for r in rows:\n"
    "        r['expected'] = {k: 0.0 for k in r['expected']}\n"
    "    body = ''.join(json.dumps(r, sort_keys=True) + '\\n' for r in rows).encode()\n"
    "    cases.write_bytes(body)\n"
    "    man = json.loads(m.read_text())\n"
    "    man['content_sha256'] = hashlib.sha256(body).hexdigest()\n"
    "    m.write_text(json.dumps(man))\n"
    "print('tampered')\n"
)


@pytest.mark.parts
def test_a_verify_that_rewrites_its_corpus_cannot_make_a_wrong_function_pass(tmp_path):
    """The track's own code runs in the verify's jail beside `nev floors check`: here its verify
    first rewrites the copy's corpus (every expected value 0, the content hash made to match; the
    key kept), then checks the floors of a function that answers 0 everywhere. The judge is
    outside the jail, with the corpora the builder made: the function fails."""
    import hashlib

    # the corpora fetched first (an honest scoring run), then rewritten, then the floors checked
    verify = "nev scores >/dev/null 2>&1; python3 tamper.py && nev floors check"
    rc, log, _env, repo = _track_job(tmp_path, _ZEROS, verify, {"tamper.py": _TAMPER})
    assert "tampered" in log, log[-3000:]
    # the copy's corpus really says 0 everywhere now: an in-jail judge passed it
    cases = repo / "corpus" / "block_width" / "cases.jsonl"
    rows = [json.loads(x) for x in cases.read_text().splitlines()]
    assert rows and all(v == 0.0 for r in rows for v in r["expected"].values())
    man = json.loads((repo / "corpus" / "block_width" / "manifest.json").read_text())
    assert man["content_sha256"] == hashlib.sha256(cases.read_bytes()).hexdigest()
    assert rc != 0 and "floors broken: block_width" in log, log[-3000:]
