"""B15: `nev job status` over a growing submission record: time per record at 30,000 jobs against
3,000, in the same run (goal: within 1.5x, i.e. linear; the reading was quadratic before:
3,000 jobs 0.85 s, 30,000 60 s).

Each size is a real `job-results.json` (`jobs.records`, `done` records with a result), read and
printed by the command's own function (`jobs.status.show`, the JSON form, to /dev/null) in this
process, best of `--rounds`. No box: the records are this box's own file.

Run: .venv/bin/python bench/perf/b15_job_status.py [--small 3000] [--large 30000] [--rounds 3]
Appends a JSON line to bench/perf/results.jsonl and prints the ratio last.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.perf.common import (  # noqa: E402
    CHECK,
    CHECK_HELP,
    check_settings,
    own_peak_rss_mb,
    publish,
    run_checked,
)
from jobs import records, status  # noqa: E402
from lanes.base import jsonfile  # noqa: E402


def write_records(state: Path, n: int) -> int:
    env = {"NEV_STATE_DIR": str(state)}
    recs = records.Records(jobs={
        f"job-{k:06d}": records.JobRecord(job=f"job-{k:06d}", status=records.JobStatus.LANDED, sends=1,
                                          result="0" * 40, exit=0, outcome="passed",
                                          submitted_at="2026-12-05T10:00:00Z")
        for k in range(n)})
    p = records.path(env)
    p.parent.mkdir(parents=True, exist_ok=True)
    jsonfile.write_atomic(p, recs.to_json())
    return p.stat().st_size


def time_status(state: Path, rounds: int) -> float:
    env = {**os.environ, "NEV_STATE_DIR": str(state)}
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            status.show(None, None, as_json=True, environ=env)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=3000)
    ap.add_argument("--large", type=int, default=30000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(CHECK, action="store_true", help=CHECK_HELP)
    a = ap.parse_args()
    if a.check:
        return check_settings(box=False, small=a.small, large=a.large, rounds=a.rounds)
    row: dict = {}
    with tempfile.TemporaryDirectory(prefix="b15-") as tmp:
        for label, n in (("small", a.small), ("large", a.large)):
            state = Path(tmp) / label
            size = write_records(state, n)
            secs = time_status(state, a.rounds)
            row[label] = {"jobs": n, "file_bytes": size, "seconds": round(secs, 4),
                          "us_per_record": round(secs * 1e6 / n, 2)}
    row["peak_rss_mb"] = own_peak_rss_mb()
    row["ratio_per_record_large_over_small"] = round(
        row["large"]["us_per_record"] / row["small"]["us_per_record"], 2)
    publish("B15", row)
    return 0


if __name__ == "__main__":
    sys.exit(run_checked(main))
