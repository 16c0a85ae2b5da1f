"""B4: candidate verification.

Figures: time per case per candidate in the runner; the wall time to compile
and score a batch of 64 candidates (one crate with every candidate as a
module, one rustc round per compiler phase; and one crate per candidate with
`cargo build --keep-going`). Baseline, in the same run: `cargo build` of each
candidate crate one after another, then each binary over the corpus.
Reference: the seed, under 1 ms per page; a 32-64 crate probe in 1.4-1.6 s on 96 threads.

B4s, the sandbox (docs/sandbox.md): the same single-crate batch compiled and scored with the
sandbox (every run, the default) and without it (`sandboxed=False`), in the same run, alternating
`--repeat` times; goal: wall time within 1.25x and the time per case unchanged. `--sandbox-only`
measures just that pair.

Run: .venv/bin/python bench/perf/b04_candidates.py [--cases 1000] [--candidates 64]
Each phase runs in its own child process so that its peak RSS (the largest
process it started, from getrusage) is its own. Appends a JSON line to
bench/perf/results.jsonl and prints the ratio last.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.perf.common import CHECK, CHECK_HELP, check_settings, publish, run_checked  # noqa: E402
from crates_bridge import candidates, corpus, hostile, judge  # noqa: E402
from crates_bridge.samples import batch_of  # noqa: E402
from crates_bridge.workspace import EXAMPLE_ENGINE, Workspace  # noqa: E402

FUNCTION = "block_width"


def _rss_mb(who: int) -> float | None:
    kb = resource.getrusage(who).ru_maxrss
    return round(kb / 1024, 1) if kb else None


def _phase(fn: Any, args: tuple, q: Any) -> None:
    out = fn(*args)
    out["peak_rss_mb"] = {"largest_child": _rss_mb(resource.RUSAGE_CHILDREN),
                          "phase_process": _rss_mb(resource.RUSAGE_SELF)}
    q.put(out)


def in_child(fn: Any, *args: Any) -> dict:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_phase, args=(fn, args, q))
    p.start()
    out = q.get()
    p.join()
    return out


def warm(target: Path, work: Path, sources: list[str], corpus_dir: Path) -> dict:
    """Build the engine libraries for a target dir (not timed)."""
    ws = Workspace(EXAMPLE_ENGINE, target_dir=target)
    ws.build()
    candidates.compile_crates(ws, FUNCTION, sources[:1], work)
    return {}


def probe(mode: str, target: Path, work: Path, sources: list[str], corpus_dir: Path,
          sandboxed: bool = True, budget_s: float | None = None) -> dict:
    ws = Workspace(EXAMPLE_ENGINE, target_dir=target)
    ws.build()
    t0 = time.monotonic()
    b = candidates.probe(ws, FUNCTION, sources, corpus_dir, work, mode=mode, cases=False, sandboxed=sandboxed,
                         budget_s=budget_s)
    wall = time.monotonic() - t0
    ns = [v.ns_per_case for v in b.verdicts if v.ns_per_case is not None]
    return {"wall_s": round(wall, 3), "compile_s": round(b.compile_s, 3), "score_s": round(b.score_s, 3),
            "rounds": b.rounds, "statuses": {k: len(v) for k, v in b.by_status().items()},
            "ns_per_case_median": round(statistics.median(ns), 1) if ns else None,
            "ns_per_case_max": round(max(ns), 1) if ns else None, "mode": b.mode,
            "verdicts": [v.status for v in b.verdicts]}


def one_after_another(target: Path, work: Path, sources: list[str], corpus_dir: Path) -> dict:
    """The baseline: `cargo build` of each candidate crate in turn, then each binary over the corpus."""
    ws = Workspace(EXAMPLE_ENGINE, target_dir=target)
    ws.build()
    root = work / "crates"
    indices = candidates.write_crates(ws, FUNCTION, sources, root)
    t0 = time.monotonic()
    bins: dict[int, Path] = {}
    for i in indices:
        cp = ws.cargo("build", "--release", "-p", f"cand_{candidates.cand_id(i)}", "--message-format=json",
                      "--target-dir", str(target), cwd=root)
        for line in cp.stdout.splitlines():
            if line.startswith("{"):
                msg = json.loads(line)
                if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
                    bins[i] = Path(msg["executable"])
    compile_s = time.monotonic() - t0
    t1 = time.monotonic()
    passed = 0
    truth = judge.load_truth(corpus_dir, FUNCTION)
    inputs = truth.write_inputs(work / "inputs.jsonl")
    for i, b in sorted(bins.items()):
        cp2 = subprocess.run([str(b), "--inputs", str(inputs), "--only", candidates.cand_id(i)],
                             capture_output=True, text=True)
        got = judge.judge(truth, cp2.stdout, len(cp2.stdout.encode()), None if cp2.returncode == 0 else "failed",
                          keep_cases=False)
        passed += got.error is None and got.cases_run == got.cases_passed
    wall = time.monotonic() - t0
    return {"wall_s": round(wall, 3), "compile_s": round(compile_s, 3), "score_s": round(time.monotonic() - t1, 3),
            "compiled": len(bins), "passed": passed}


def sandbox_pair(target: Path, t: Path, sources: list[str], cdir: Path, repeat: int) -> dict:
    """B4s: the single-crate batch with and without the sandbox, alternating, same run."""
    runs: dict[str, list[dict]] = {"sandboxed": [], "bare": []}
    for k in range(repeat):
        for name in ("sandboxed", "bare") if k % 2 == 0 else ("bare", "sandboxed"):
            runs[name].append(in_child(probe, "single", target, t / f"b4s-{name}-{k}", sources, cdir,
                                       name == "sandboxed"))

    def med(name: str, key: str) -> float:
        return round(statistics.median(r[key] for r in runs[name]), 3)

    out: dict[str, Any] = {name: {key: med(name, key) for key in ("wall_s", "compile_s", "score_s",
                                                                  "ns_per_case_median")} for name in runs}
    out["statuses_same"] = all(r["statuses"] == runs["bare"][0]["statuses"] for rs in runs.values() for r in rs)
    out["ratio_wall_sandboxed_over_bare"] = round(out["sandboxed"]["wall_s"] / out["bare"]["wall_s"], 2)
    out["ratio_ns_per_case_sandboxed_over_bare"] = round(
        out["sandboxed"]["ns_per_case_median"] / out["bare"]["ns_per_case_median"], 2)
    return out


def hostile_pair(target: Path, t: Path, sources: list[str], cdir: Path, budget: float) -> dict:
    """B4h: the batch with one compile-time hang and one compile-time memory blow-up in place of two
    of its passing candidates, against the same batch without them, same run (sandbox on); and the
    hang alone (it holds the batch's compile for the whole budget: the worst case)."""
    hang, bomb = 1, 2
    both = list(sources)
    both[hang], both[bomb] = hostile.COMPILE_HANG, hostile.COMPILE_BLOWUP
    alone = list(sources)
    alone[hang] = hostile.COMPILE_HANG
    clean = in_child(probe, "single", target, t / "b4h-clean", sources, cdir, True, budget)
    hurt = in_child(probe, "single", target, t / "b4h-hostile", both, cdir, True, budget)
    hang_only = in_child(probe, "single", target, t / "b4h-hang", alone, cdir, True, budget)
    limit = budget + 2 * clean["wall_s"]

    def unchanged(run: dict, culprits: tuple[int, ...]) -> bool:
        return all(clean["verdicts"][k] == run["verdicts"][k] for k in range(len(sources)) if k not in culprits)

    return {
        "budget_s": budget, "clean": clean, "hostile": hurt, "hang_only": hang_only,
        "culprits": [hurt["verdicts"][hang], hurt["verdicts"][bomb]],
        "others_unchanged": unchanged(hurt, (hang, bomb)) and unchanged(hang_only, (hang,)),
        "goal_s": round(limit, 3),
        "within_goal": hurt["wall_s"] <= limit and hang_only["wall_s"] <= limit,
        "ratio_hostile_over_goal": round(hurt["wall_s"] / limit, 2),
        "ratio_hang_only_over_goal": round(hang_only["wall_s"] / limit, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="sandboxed/bare pairs for B4s (medians)")
    ap.add_argument("--sandbox-only", action="store_true", help="measure B4s only (no crates mode, no baseline)")
    ap.add_argument("--hostile-only", action="store_true", help="measure B4h only")
    ap.add_argument("--budget", type=float, default=None, help="the compile budget for B4h (NEV_COMPILE_BUDGET_S)")
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    a = ap.parse_args()
    if a.check:
        return check_settings(box=False, cases=a.cases, candidates=a.candidates)
    ws = Workspace(EXAMPLE_ENGINE)
    ws.build()
    # 64 candidates that all return (the never-returning sample is left out of timing runs).
    sources = [s for _, s, _ in batch_of(a.candidates + 1)[:-1]]
    with tempfile.TemporaryDirectory(prefix="b04-") as tmp:
        t = Path(tmp)
        cdir = corpus.write_reference_corpus(ws, FUNCTION, t / "corpus" / FUNCTION, a.cases)
        budget = a.budget if a.budget is not None else candidates.compile_budget.budget_s()
        if a.hostile_only:
            b4h = hostile_pair(Path(str(ws.target_dir)), t, sources, cdir, budget)
            publish("B4h", {"candidates": len(sources), "cases": a.cases, "cpus": mp.cpu_count(), **b4h})
            return 0
        b4s = sandbox_pair(Path(str(ws.target_dir)), t, sources, cdir, a.repeat)
        if a.sandbox_only:
            publish("B4s", {"candidates": len(sources), "cases": a.cases, "cpus": mp.cpu_count(), **b4s})
            return 0
        for name in ("crates", "base"):
            in_child(warm, t / f"target-{name}", t / f"warm-{name}", sources, cdir)
        single = in_child(probe, "single", ws.target_dir, t / "single", sources, cdir)
        crates = in_child(probe, "crates", t / "target-crates", t / "crates", sources, cdir)
        base = in_child(one_after_another, t / "target-base", t / "base", sources, cdir)
        b4h = hostile_pair(Path(str(ws.target_dir)), t, sources, cdir, budget)
    fastest = min(("single", single["wall_s"]), ("crates", crates["wall_s"]), key=lambda x: x[1])
    row = {
        "candidates": len(sources), "cases": a.cases, "cpus": mp.cpu_count(),
        "ns_per_case_per_candidate_median": single["ns_per_case_median"],
        "ns_per_case_per_candidate_max": single["ns_per_case_max"],
        "single_crate": single, "crate_per_candidate_keep_going": crates, "baseline_one_after_another": base,
        "faster_mode": fastest[0],
        "ratio_baseline_over_single": round(base["wall_s"] / single["wall_s"], 2),
        "ratio_crates_over_single": round(crates["wall_s"] / single["wall_s"], 2),
        "B4s": b4s,
        "B4h": b4h,
    }
    publish("B4", row)
    return 0


if __name__ == "__main__":
    sys.exit(run_checked(main))
