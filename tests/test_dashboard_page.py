"""The dashboard's pieces without a rig: collectors' markers, the page, the SVG plots."""

from __future__ import annotations

import re
import time

from lanes.base.mask import register_secret
from rig.dashboard import collect, page, plot
from rig.dashboard.sections import (
    AliasesSection,
    BatchesSection,
    Collection,
    FloorRow,
    JobRow,
    LaneRow,
    Missing,
)

LEDGER = [
    {"batch": "b1", "function": "block_width", "start": "2026-11-30T08:00:00Z", "end": "2026-11-30T08:04:00Z",
     "cases_run": 100, "models": {"qwen3.8-27b-fast": {"candidates": 32, "compiled": 8, "best": 74},
                                  "deepseek-v4.1-flash": {"candidates": 8, "compiled": 4, "best": 60}}},
    {"batch": "b2", "function": "block_width", "start": "2026-11-30T09:00:00Z", "end": "2026-11-30T09:04:00Z",
     "cases_run": 100, "models": {"qwen3.8-27b-fast": {"candidates": 32, "compiled": 16, "best": 82}}},
]


def data(**over: object) -> Collection:
    base = {
        "lanes": [LaneRow.of({"index": 0, "name": "", "answers": True, "free_gb": 41.5, "copies": ["engine-main"],
                              "running": ["gate-1"]}),
                  LaneRow.of({"index": 1, "name": "", "answers": False, "free_gb": None, "copies": None,
                              "running": None, "error": "lane 1: no answer"})],
        "dagu": collect.unavailable("NEV_DAGU_LANE is not set: no lane runs Dagu"),
        "aliases": AliasesSection([{"alias": "qwen3.8-27b-fast", "status": "ready", "held_for_s": 620.0,
                              "last_answer_ago_s": 12.0, "max_inflight": 8, "pool": "gpu0", "retired": None,
                              "last_error": None},
                             {"alias": "deepseek-v4.1-flash", "status": "failing", "held_for_s": 30.0,
                              "last_answer_ago_s": 400.0, "max_inflight": 2, "pool": "gpu1", "retired": None,
                              "last_error": "HTTP 503: down"}],
                                  "/tmp/inv.json", 5.0, 7, 7),
        "jobs": [JobRow("gen-abspos", "running", {"gen": "passed", "probe": "running"}, 1, "2026-11-30T10:00:00Z")],
        "batches": BatchesSection("/srv/lane-shared/ledger", LEDGER, collect.batch_points(LEDGER), 0),
        "floors": [FloorRow("block_width", "example", 500, 500, 500, 500)],
        "collected_at": time.time(), "took_s": 0.4,
    }
    base.update(over)
    return Collection(**base)


def test_the_page_shows_every_lane_and_alias_with_its_status():
    html = page.render(data(), 15)
    assert re.findall(r'data-lane="(\d)" data-answers="(\w+)"', html) == [("0", "yes"), ("1", "no")]
    assert re.findall(r'data-alias="([^"]+)" data-status="(\w+)"', html) == [
        ("qwen3.8-27b-fast", "ready"), ("deepseek-v4.1-flash", "failing")]
    assert "41.5 GiB" in html and "engine-main" in html and "gate-1" in html
    assert "10 min" in html and "12 s ago" in html            # held for, last answer
    assert "<td>8</td>" in html and "<td>2</td>" in html        # in-flight limits
    assert 'data-job="gen-abspos"' in html and "probe" in html
    assert 'data-function="block_width"' in html and "500/500" in html


def test_a_missing_source_shows_as_unavailable_and_the_rest_still_renders():
    html = page.render(data(jobs=collect.unavailable("no job state folder at /x"), floors=collect.unavailable("boom")), 15)
    assert "unavailable: no job state folder at /x" in html
    assert "unavailable: NEV_DAGU_LANE is not set" in html
    assert 'data-alias="qwen3.8-27b-fast"' in html


def test_the_page_refreshes_itself_and_loads_nothing_from_elsewhere():
    html = page.render(data(), 7)
    assert '<meta http-equiv="refresh" content="7">' in html
    assert "<script" not in html
    assert not re.search(r'(src|href)\s*=\s*"', html)            # no external (or any) resource
    assert "<svg" in html


def test_no_secret_reaches_the_page():
    secret = "sk-dash-" + "q9x8w7v6u5t4s3r2"
    register_secret(secret)
    d = data()
    assert isinstance(d.aliases, AliasesSection) and isinstance(d.lanes, list)
    d.aliases.rows[1]["last_error"] = f"HTTP 401: bad key {secret}"
    d.lanes[1] = LaneRow.of({**d.lanes[1].doc, "error": f"token={secret}"})
    html = page.render(d, 15)
    assert secret not in html
    assert "***" in html


def test_batch_points_give_best_and_compiled_shares_per_model():
    pts = collect.batch_points(LEDGER)
    by = {(p.batch, p.model): p for p in pts}
    assert by[("b1", "qwen3.8-27b-fast")].best_share == 0.74
    assert by[("b1", "qwen3.8-27b-fast")].compiled_share == 0.25
    assert by[("b2", "qwen3.8-27b-fast")].compiled_share == 0.5
    s = plot.series((p.model, p.time, p.best_share) for p in pts)
    assert [v for _t, v in s["qwen3.8-27b-fast"]] == [0.74, 0.82]
    assert len(s["deepseek-v4.1-flash"]) == 1


def test_the_plot_draws_one_line_per_model_and_says_when_there_is_nothing():
    pts = collect.batch_points(LEDGER)
    svg = plot.svg("best", plot.series((p.model, p.time, p.best_share) for p in pts))
    assert svg.count("<polyline") == 1                          # qwen has two points, deepseek one
    assert svg.count("<circle") == 3
    assert "qwen3.8-27b-fast" in svg and "deepseek-v4.1-flash" in svg
    assert "no batches yet" in plot.svg("best", {})


def test_gather_turns_a_failing_or_slow_source_into_its_marker():
    def slow() -> list:
        time.sleep(5)
        return []

    def broken() -> list:
        raise RuntimeError("disk gone")

    def absent() -> list:
        raise collect.Unavailable("not configured")

    t0 = time.monotonic()
    out = collect.run_all({"ok": lambda: [1], "slow": slow, "broken": broken, "absent": absent}, timeout=1.0)
    assert time.monotonic() - t0 < 3
    assert out["ok"] == [1]
    assert out["slow"] == Missing("no answer within 1 s")
    assert out["broken"] == Missing("RuntimeError: disk gone")
    assert out["absent"] == Missing("not configured")
    got = collect.gather({"lanes": broken, "jobs": lambda: []}, timeout=5.0)
    assert got.to_json()["lanes"] == {"unavailable": "RuntimeError: disk gone"}
    assert got.jobs == [] and got.missing() == ["lanes"] and got.floors is None


def test_jobs_and_ledger_collectors_read_their_files(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("NEV_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NEV_LANE_SHARED", str(tmp_path / "share"))
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "none.json"))
    out = collect.gather({"jobs": collect.jobs, "batches": collect.batches}, timeout=10)
    assert out.jobs == []  # no job has run here yet: empty, not unavailable
    assert isinstance(out.batches, Missing) and "no ledger folder at" in out.batches.reason
    job = tmp_path / "state/jobs/j1"
    job.mkdir(parents=True)
    (job / "state.json").write_text(json.dumps({"job": "j1", "status": "running", "attempts": [{}],
                                                "stages": {"gen": {"status": "passed"}, "score": {"status": "pending"}}}))
    led = tmp_path / "share/ledger"
    led.mkdir(parents=True)
    (led / "wt-a.jsonl").write_text("\n".join(json.dumps(x) for x in LEDGER) + "\nnot json\n")
    out = collect.gather({"jobs": collect.jobs, "batches": collect.batches}, timeout=10)
    assert out.to_json()["jobs"] == [{"job": "j1", "status": "running", "attempts": 1, "last_event": None,
                                      "stages": {"gen": "passed", "score": "pending"}}]
    assert isinstance(out.batches, BatchesSection)
    assert len(out.batches.lines) == 2 and out.batches.unreadable_lines == 1


def test_the_batches_section_shows_each_jobs_spend_against_its_budget(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("NEV_LANE_SHARED", str(tmp_path / "share"))
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "none.json"))
    led = tmp_path / "share/ledger"
    led.mkdir(parents=True)
    bound = {**LEDGER[1], "models": {"qwen3.8-27b-fast": {"tokens_in": 700, "tokens_out": 300, "gpu_s": 2.5}},
             "budget": {"tokens": 1200, "gpu_s": None, "spent_tokens": 1000, "bound": "tokens"}}
    (led / "job-a.jsonl").write_text(json.dumps(bound) + "\n")
    (led / "wt-b.jsonl").write_text(json.dumps({**LEDGER[0], "models": {"m": {"tokens_in": 5, "tokens_out": 6}}}) + "\n")
    section = collect.batches()
    spend = section.to_json()["spend"]
    assert isinstance(spend, dict)
    assert spend["job-a"] == {"tokens": 1000, "gpu_s": 2.5, "budget_tokens": 1200, "budget_gpu_s": None,
                              "bound": "tokens"}
    assert section.spend["wt-b"].tokens == 11 and section.spend["wt-b"].bound is None
    html = page.batches_html(section)
    row = re.search(r'<tr class="spend" data-job="job-a" data-bound="tokens">(.*?)</tr>', html)
    assert row and "<td>1000</td><td>1200</td><td>2.5</td>" in row.group(1) and "bound (tokens)" in row.group(1)
    assert re.search(r'<tr class="spend" data-job="wt-b" data-bound="">', html)


def test_every_source_is_loaded_before_the_collectors_threads_start(tmp_path):
    """A module imported first from two threads at once can be seen half-initialised by one (the
    first page once read `partially initialized module 'paramiko'`): in a fresh process, every
    module a collector imports is loaded before the first collector thread starts."""
    import subprocess
    import sys

    from tests.helpers.standin_pool import ROOT

    probe = (
        "import sys, threading\n"
        "seen = []\n"
        "start = threading.Thread.start\n"
        "def first(self):\n"
        "    if not seen and self.name.startswith('dashboard-'): seen.append(set(sys.modules))\n"
        "    start(self)\n"
        "threading.Thread.start = first\n"
        "from rig.dashboard import collect\n"
        "collect.gather(timeout=20)\n"
        "need = ['paramiko', 'lanes.gate', 'jobs.lanestate', 'dagu.service', 'bench.ledger',\n"
        "        'rig.inventory.status']\n"
        "print(' '.join(m for m in need if m not in seen[0]) or 'all-loaded')\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "NEV_LANES_FILE": str(tmp_path / "lanes.json"), "NEV_STATE_DIR": str(tmp_path / "state"),
           "NEV_INVENTORY": str(tmp_path / "inv.json")}
    r = subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.strip().splitlines()[-1] == "all-loaded", r.stdout + r.stderr


def test_the_queues_section_shows_each_queues_figures_and_a_dash_where_there_is_no_sample():
    from jobs.records import JobRecord
    from rig import queues

    q = queues.summary([JobRecord(job="j", submitted_at="2026-12-05T10:00:00Z",
                                  first_stage_at="2026-12-05T10:00:04Z")],
                       [{"end": "2026-12-05T10:01:00Z",
                         "models": {"qwen3.8-27b-fast": {"first_byte_s": [0.5, 1.5, 2.5]}}}],
                       3600, queues.parse_time("2026-12-05T10:30:00Z"))  # type: ignore[arg-type]
    html = page.render(data(queues=q), 15)
    rows = re.findall(r'data-queue="(\w+)" data-alias="([^"]*)" data-count="(\d+)"><td>\w+</td><td>[^<]*</td>'
                      r"<td>\d+</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>", html)
    assert rows == [("job", "", "1", "4.00 s", "4.00 s", "4.00 s"),
                    ("draw", "qwen3.8-27b-fast", "3", "1.50 s", "2.50 s", "2.50 s")]
    none = queues.summary([], [], 3600, queues.parse_time("2026-12-05T10:30:00Z"))  # type: ignore[arg-type]
    assert none.to_json()["jobs"] == {"count": 0, "sum_s": 0.0, "p50_s": None, "p95_s": None, "max_s": None}
    html = page.render(data(queues=none), 15)
    assert re.search(r'data-queue="job" data-alias="" data-count="0"><td>job</td><td>-</td><td>0</td>'
                     r"<td>-</td><td>-</td><td>-</td>", html)
    assert "over the last 1 h" in html or "over the last 60 min" in html
    assert 'id="queues"' not in page.render(data(), 15)        # not collected: no section
