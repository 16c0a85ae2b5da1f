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
