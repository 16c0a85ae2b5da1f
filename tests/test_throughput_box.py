"""Acceptance on the rig-in-a-box: the sweep through the real gateway and HAProxy finds the knee
at the pool's in-flight limit (HAProxy maxconn), streaming (time to first token) included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rig import throughput as tp
from rig.box.haproxy import clear_counters, server_row
from rig.box.poolctl import pool_control

ROOT = Path(__file__).resolve().parent.parent


def test_throughput_finds_the_knee_at_haproxys_maxconn_within_one_level(box_env, tmp_path, monkeypatch):
    box = box_env
    pool = box.pools["gpu0"]
    assert pool.max_inflight == 8                      # HAProxy's maxconn for the sampling pool
    # A known service rate: 2 s per request (many times the gateway's own latency, which grows
    # to 0.5 s on this loaded machine); the stand-in itself would take 64 at once, so only
    # HAProxy's maxconn holds requests back.
    pool_control(box, "gpu0", delay=2.0, max_inflight=64)
    clear_counters(box.proxy_stats_socket)
    monkeypatch.setenv("NEV_THROUGHPUT_DIR", str(tmp_path / "tp"))
    try:
        r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "throughput", pool.alias,
                            "--inflight", "4,8,16,32", "--requests", "32", "--max-tokens", "64",
                            "--json"],
                           capture_output=True, text=True, cwd=ROOT, timeout=300,
                           env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    finally:
        pool_control(box, "gpu0", reset=True)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    rows = {x["inflight"]: x for x in result["levels"]}
    assert all(x["failed"] == 0 for x in rows.values()), rows
    table = tp.render(tp.Result.from_json(result, "the printed sweep"))
    assert result["knee"] in (4, 8, 16), table   # maxconn 8, within one level
    assert rows[8]["output_tok_s"] > 1.2 * rows[4]["output_tok_s"], table
    assert rows[32]["output_tok_s"] < 1.25 * rows[16]["output_tok_s"], table   # flat past the limit
    # streamed through LiteLLM: the first token comes after the pool's delay, before the end
    assert 1.95 <= rows[4]["ttft_p50_s"] <= rows[4]["latency_p50_s"], table
    assert rows[32]["latency_p50_s"] > 1.8 * rows[4]["latency_p50_s"], table   # waited for a slot
    assert rows[16]["latency_p95_s"] is not None       # 32 answers: enough for a p95
    assert not any(x["tokens_counted_from_text"] for x in rows.values())   # LiteLLM passed the usage on
    # never more than maxconn at the pool; past the alias's limit (8, enforced at the gateway),
    # requests waited for the gateway's slots, and the table says so
    srv = server_row(box.proxy_stats_socket, "be_gpu0", "gpu0")
    assert int(srv["smax"]) == 8
    assert rows[4]["gateway_waits"] == 0 and rows[16]["gateway_waits"] > 0 and rows[32]["gateway_waits"] > 0
    assert "the gateway's in-flight limit for the alias held requests back at" in table
    assert (tmp_path / "tp" / f"{pool.alias}.json").exists()
    assert "throughput: saved to" in r.stderr


def test_throughput_runs_on_a_lane_with_only_what_nev_lane_install_puts_there(box_env):
    """The seed's first sweep died on a lane without `requests` and without python3-venv."""
    import os

    from lanes.base.ssh import Connection, Target

    box = box_env
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    inst = subprocess.run([sys.executable, "-m", "rig.cli", "lane", "install", "--lane", "1"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert inst.returncode == 0, inst.stderr
    key = Path(os.environ["NEV_MODEL_KEY_FILE"]).read_bytes()
    alias = box.pools["gpu0"].alias
    with Connection(Target.parse(box.lanes[1].ssh), box.known_hosts, box.ssh_key, jump=Target.parse(box.jump)) as c:
        assert c.run(["python3", "-c", "import requests"]).exit_status != 0   # the lane's own Python
        c.write_file(".nev-throughput-key", key, mode=0o600)                 # through stdin, never argv
        r = c.run(f"NEV_MODEL_URL={os.environ['NEV_LANE_MODEL_URL']} NEV_MODEL_KEY_FILE=$HOME/.nev-throughput-key "
                  f"NEV_THROUGHPUT_DIR=$HOME/.nev-throughput ~/.local/bin/nev rig throughput {alias} "
                  "--inflight 1,2 --requests 3 --json", timeout=300)
        c.run("rm -rf ~/.nev-throughput-key ~/.nev-throughput")
    assert r.exit_status == 0, r.err
    result = json.loads(r.out)
    assert [x["answered"] for x in result["levels"]] == [3, 3]
    assert key.decode().strip() not in r.out + r.err
