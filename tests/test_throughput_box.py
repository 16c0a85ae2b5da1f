"""Acceptance on the rig-in-a-box: the sweep through the real gateway and HAProxy finds the knee
at the pool's in-flight limit (HAProxy maxconn), streaming (time to first token) included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rig.box.haproxy import clear_counters, server_row

ROOT = Path(__file__).resolve().parent.parent


def test_throughput_finds_the_knee_at_haproxys_maxconn_within_one_level(box_env, tmp_path, monkeypatch):
    box = box_env
    pool = box.pools["gpu0"]
    assert pool.max_inflight == 8                      # HAProxy's maxconn for the sampling pool
    # A known service rate: 1 s per request (several times the gateway's own latency); the
    # stand-in itself would take 64 at once, so only HAProxy's maxconn holds requests back.
    box.pool_control("gpu0", delay=1.0, max_inflight=64)
    clear_counters(box.proxy_stats_socket)
    monkeypatch.setenv("NEV_THROUGHPUT_DIR", str(tmp_path / "tp"))
    try:
        r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "throughput", pool.alias,
                            "--inflight", "4,8,16,32", "--max-tokens", "64", "--json"],
                           capture_output=True, text=True, cwd=ROOT, timeout=300,
                           env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    finally:
        box.pool_control("gpu0", reset=True)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    rows = {x["inflight"]: x for x in result["levels"]}
    assert all(x["failed"] == 0 for x in rows.values()), rows
    assert result["knee"] in (4, 8, 16), rows            # maxconn 8, within one level
    assert rows[8]["output_tok_s"] > 1.5 * rows[4]["output_tok_s"]
    assert rows[32]["output_tok_s"] < 1.25 * rows[16]["output_tok_s"]   # flat past the limit
    # streamed through LiteLLM: the first token comes after the pool's delay, before the end
    assert 0.95 <= rows[4]["ttft_p50_s"] <= rows[4]["latency_p50_s"]
    assert rows[32]["latency_p50_s"] > 2.5 * rows[4]["latency_p50_s"]   # queued in HAProxy
    assert rows[16]["latency_p95_s"] is not None       # 64 answers: enough for a p95
    # never more than maxconn at the pool; past it, requests waited in HAProxy's queue
    srv = server_row(box.proxy_stats_socket, "be_gpu0", "gpu0")
    backend = server_row(box.proxy_stats_socket, "be_gpu0", "BACKEND")
    assert int(srv["smax"]) == 8
    assert int(backend["qmax"]) + int(srv["qmax"]) >= 4
    assert (tmp_path / "tp" / f"{pool.alias}.json").exists()
    assert "throughput: saved to" in r.stderr
