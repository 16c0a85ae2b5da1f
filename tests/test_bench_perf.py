"""The benchmarks' shared result: one line appended to results.jsonl, the same figures printed, ratios last."""

from __future__ import annotations

import json

from bench.perf import common


def test_a_result_is_printed_figure_by_figure_nested_ones_dotted_and_the_ratios_last():
    row = {"bench": "B0", "ratio_a_over_b": 2.5, "runs": 3,
           "per_lane": {"lane0": {"s": 1.0}, "lane1": {"s": 2.0}}, "ratio_by_engine": {"x": 1.5}, "none": {}}
    assert common.report(row) == ["bench: B0", "runs: 3", "per_lane.lane0.s: 1.0", "per_lane.lane1.s: 2.0",
                                  "none: {}", "ratio_a_over_b: 2.5", "ratio_by_engine.x: 1.5"]


def test_publish_appends_one_line_with_the_bench_its_commit_and_date(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results.jsonl"
    results.write_text('{"bench": "B1"}\n')
    monkeypatch.setattr(common, "RESULTS", results)
    row = common.publish("B7", {"rounds": 2, "ratio_x": 3.0})
    lines = results.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0]) == {"bench": "B1"}
    written = json.loads(lines[1])
    assert written == row and written["bench"] == "B7" and written["rounds"] == 2
    assert written["commit"] == common.commit() and written["commit"] and written["date"].startswith("20")
    assert capsys.readouterr().out.splitlines()[-1] == "ratio_x: 3.0"


def test_every_benchmark_starts_with_its_defaults_in_its_check_mode():
    """Each bench/perf/bNN_*.py parses its arguments and checks every setting its run would use
    (the box's name and net among them) with --check, with its own defaults: a default the box
    refuses (B11's 7-character `beleven`) fails here, not at the first real run. Nothing runs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    scripts = sorted((root / "bench" / "perf").glob("b[0-9][0-9]_*.py"))
    assert len(scripts) >= 12
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_BOX", "GENERA_BOX", "B3_"))}
    env["PYTHONPATH"] = str(root)
    for script in scripts:
        r = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, env=env,
                           cwd=root, timeout=120)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (script.name, r.stdout, r.stderr)
        assert r.stdout.strip().splitlines()[-1].startswith("settings ok"), (script.name, r.stdout)


def test_a_refused_setting_is_one_line_and_exit_1():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "NEV_BOX_NAME": "beleven"}
    r = subprocess.run([sys.executable, str(root / "bench/perf/b11_demo.py"), "--check"], capture_output=True,
                       text=True, env=env, cwd=root, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("b11_demo.py: NEV_BOX_NAME='beleven' is not a box name; use 1 to 6 lower-case "
                                "letters or digits starting with a letter (it prefixes interface names)")
