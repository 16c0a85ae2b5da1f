"""`nev rig throughput`: the decisions (percentiles, knee, rows) and a sweep against a stand-in pool."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench import gateway
from bench.gateway_http import Endpoint
from lanes.base.errors import NevError, UsageError
from rig import throughput as tp
from tests.helpers.standin_pool import ROOT, control, standin_pool


def row(level: int, tok_s: float) -> tp.Level:
    return tp.Level(level, 0, 0, 0, None, 0, False, tok_s, None, None, None, None, None, {}, None)


def test_the_knee_is_the_last_level_before_throughput_stops_growing():
    rows = [row(1, 100), row(2, 198), row(4, 390), row(8, 760), row(16, 790), row(32, 770)]
    assert tp.knee(rows) == 8


def test_no_knee_while_throughput_still_grows_at_the_last_level():
    rows = [row(1, 100), row(2, 200), row(4, 400)]
    assert tp.knee(rows) is None
    assert "not saturated" in tp.verdict(rows, None)


def test_a_percentile_needs_enough_observations():
    assert tp.percentile([1.0, 2.0, 3.0], 95, tp.MIN_FOR_P95) is None
    values = [float(i) for i in range(1, 21)]
    assert tp.percentile(values, 95, tp.MIN_FOR_P95) == 19.0
    assert tp.percentile(values, 50, tp.MIN_FOR_P50) == 10.0


def test_failed_requests_count_as_failed_never_in_the_rates():
    samples = [tp.Sample(True, 1.0, 0.2, 100)] * 5 + [tp.Sample(False, 0.01, error="HTTP 503: down")] * 3
    r = tp.summarize(4, samples, 2.0)
    assert (r.answered, r.failed) == (5, 3)
    assert r.output_tok_s == 250.0 and r.req_s == 2.5
    assert r.latency_p50_s == 1.0 and r.latency_p95_s is None
    assert r.errors == {"HTTP 503: down": 3}
    assert r.note and "p95 needs 20" in r.note


def test_levels_must_be_increasing_positive_integers():
    assert tp.parse_levels("1,2,4") == [1, 2, 4]
    for bad in ("", "0,1", "4,2", "1,x", "2,2"):
        with pytest.raises(UsageError):
            tp.parse_levels(bad)


@pytest.mark.parts  # a stand-in pool server
def test_a_sweep_finds_the_knee_at_the_pools_in_flight_limit():
    with standin_pool(max_inflight=4) as url:
        control(url, delay=0.25)
        target = Endpoint(url=url, key="not-checked-by-the-pool")
        result = tp.sweep(lambda: tp.one_request(target, "stand-alias", 64, 30), "stand-alias",
                          [1, 2, 4, 8, 16], 16)
    assert result.knee in (4, 8), result          # within one level of the limit
    rows = {r["inflight"]: r for r in result.to_json()["levels"]}
    assert all(r["failed"] == 0 for r in rows.values())
    assert rows[4]["output_tok_s"] > 2.5 * rows[1]["output_tok_s"]
    assert rows[16]["output_tok_s"] < 1.3 * rows[4]["output_tok_s"]
    assert 0.2 <= rows[1]["ttft_p50_s"] < 0.6
    assert rows[16]["latency_p50_s"] > 1.5 * rows[1]["latency_p50_s"]   # waiting behind the limit
    assert not any(r["tokens_counted_from_text"] for r in rows.values())   # usage came with the stream
    text = tp.render(result)
    assert "stops growing at" in text and "ttft p50" in text


@pytest.mark.parts  # a stand-in pool server
def test_an_alias_that_does_not_answer_is_one_clear_error_and_nothing_measured():
    with standin_pool() as url:
        control(url, fail="503")
        target = Endpoint(url=url, key="k")
        with pytest.raises(NevError, match="did not answer through the gateway.*HTTP 503"):
            tp.sweep(lambda: tp.one_request(target, "stand-alias", 16, 10), "stand-alias", [1, 2], 2)


@pytest.mark.parts  # a stand-in pool server
def test_the_sweep_runs_with_the_standard_library_alone(tmp_path):
    """A lane may have no `requests`, no venv: python -S (no site-packages) must do."""
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]);"
        "from rig import throughput as tp; from bench.gateway_http import Endpoint;"
        "t = Endpoint(url=sys.argv[2], key='k');"
        "r = tp.sweep(lambda: tp.one_request(t, 'stand-alias', 16, 10), 'stand-alias', [1, 2], 3);"
        "print(json.dumps({'rows': len(r.levels), 'mods': sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('requests', 'click', 'rich', 'paramiko', 'yaml', 'urllib3'))}))")
    with standin_pool() as url:
        out = subprocess.run(["/usr/bin/python3", "-S", "-E", "-c", code, str(ROOT), url],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"rows": 2, "mods": []}


@pytest.mark.parts  # a stand-in pool server
def test_the_command_prints_a_table_and_json_and_saves_the_sweep(tmp_path):
    key = tmp_path / "key"
    key.write_text("k\n")
    key.chmod(0o600)
    with standin_pool() as url:
        env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "NEV_MODEL_URL": url,
               "NEV_MODEL_KEY_FILE": str(key), "NEV_THROUGHPUT_DIR": str(tmp_path / "tp"), "HOME": str(tmp_path)}
        table = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "throughput", "stand-alias",
                                "--inflight", "1,2", "--requests", "3"], capture_output=True, text=True,
                               env=env, cwd=ROOT, timeout=120)
        js = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "throughput", "stand-alias",
                             "--inflight", "1,2", "--requests", "3", "--json"], capture_output=True, text=True,
                            env=env, cwd=ROOT, timeout=120)
        bad = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "throughput", "stand-alias",
                              "--inflight", "4,2"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert table.returncode == 0, table.stderr
    assert "in flight" in table.stdout and "out tok/s" in table.stdout
    data = json.loads(js.stdout)
    assert [r["inflight"] for r in data["levels"]] == [1, 2]
    saved = json.loads((tmp_path / "tp" / "stand-alias.json").read_text())
    assert saved["alias"] == "stand-alias" and len(saved["levels"]) == 2
    assert saved["client"]["cpu_s"] > 0 and 5 < saved["client"]["peak_rss_mib"] < 500
    assert "this client:" in table.stdout
    assert bad.returncode == 2 and "increasing positive integers" in bad.stderr
    assert "k\n" not in table.stdout + table.stderr


def test_the_gateway_url_is_picked_as_the_generation_loop_picks_it(monkeypatch, tmp_path):
    key = tmp_path / "k"
    key.write_text("secret-key-value\n")
    key.chmod(0o600)
    monkeypatch.setenv("NEV_MODEL_KEY_FILE", str(key))
    monkeypatch.setenv("NEV_MODEL_URL", "http://dev-view:4000/")
    monkeypatch.setenv("NEV_LANE_MODEL_URL", "http://lane-view:4000")
    monkeypatch.delenv("NEV_ON_LANE", raising=False)
    assert gateway.endpoint_from_settings() == Endpoint("http://dev-view:4000", "secret-key-value")
    monkeypatch.setenv("HOME", str(tmp_path))  # a lane without ~/.lane-model-env: the environment's
    monkeypatch.setenv("NEV_ON_LANE", "1")
    assert gateway.endpoint_from_settings().url == "http://lane-view:4000"
    monkeypatch.delenv("NEV_MODEL_URL")
    monkeypatch.delenv("NEV_LANE_MODEL_URL")
    with pytest.raises(NevError, match="no gateway URL"):
        gateway.endpoint_from_settings()


def test_the_clients_peak_memory_is_its_own_not_the_size_of_the_process_that_started_it():
    """Linux carries getrusage's ru_maxrss across exec: a client exec'd by a 300 MiB process would
    report 300 MiB. The figure is the program's own (VmHWM)."""
    code = ("import os, sys\n"
            "big = bytearray(300 * 1024 * 1024)\n"
            "for i in range(0, len(big), 4096): big[i] = 1\n"
            "os.execv(sys.executable, [sys.executable, '-c', 'import sys; sys.path.insert(0, sys.argv[1]); "
            "from rig.throughput import own_use; print(own_use()[\"peak_rss_mib\"])', sys.argv[1]])\n")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 1 < float(out.stdout) < 150, out.stdout
