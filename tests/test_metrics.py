"""`nev rig metrics` (rig/metrics.py): Prometheus text that the Prometheus parser reads, whose
numbers are what `nev rig status`, `nev job status` and `nev lane list` report for the same
state, written by rename for node_exporter's textfile collector."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from lanes.base import notify
from rig import metrics
from rig.dashboard.sections import LaneRow
from tests.helpers.job_helpers import ROOT, nev
from tests.helpers.local_lane import LocalLane


def _state(tmp: Path) -> dict[str, str]:
    now = dt.datetime.now(dt.UTC)
    snap = {
        "schema": 1,
        "probed_at": (now - dt.timedelta(seconds=40)).isoformat(),
        "aliases": {
            "coder": {"status": "ready", "since": now.isoformat()},
            "big": {"status": "failing", "since": now.isoformat(), "last_error": "HTTP 503"},
            "fresh": {"status": "unknown"},
            "old": {"status": "retired", "retired": "2026-01-01"},
        },
    }
    (tmp / "inventory.json").write_text(json.dumps(snap))
    (tmp / "state").mkdir()
    jobs = {
        n: {"job": n, "sends": 1, "status": s}
        for n, s in (
            ("a", "submitted"),
            ("b", "resent"),
            ("c", "landed"),
            ("d", "failed"),
            ("e", "not-landed"),
            ("f", "submitted"),
        )
    }
    (tmp / "state" / "job-results.json").write_text(json.dumps({"schema": 1, "jobs": jobs}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update(
        {
            "NEV_INVENTORY": str(tmp / "inventory.json"),
            "NEV_STATE_DIR": str(tmp / "state"),
            "NEV_RIG_FILE": str(tmp / "no-rig.json"),
            "PYTHONPATH": str(ROOT),
        }
    )
    for kind, n in ((notify.Kind.LANDED, 2), (notify.Kind.JOB_FAILED, 3)):
        for i in range(n):
            notify.event(kind, f"j{i}", "x", str(i), env)
    return env


def _families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_metrics_parse_and_match_what_status_reports(tmp_path):
    env = _state(tmp_path)
    r = nev(["rig", "metrics", "--skip", "lanes", "--skip", "dagu"], env)
    assert r.returncode == 0, r.stderr
    fam = _families(r.stdout)
    types = {f.name: f.type for f in text_string_to_metric_families(r.stdout)}
    status = json.loads(nev(["rig", "status", "--json"], env).stdout)
    ready = {s.labels["alias"]: s.value for s in fam["nev_alias_ready"]}
    assert ready == {
        a["alias"]: (1.0 if a["status"] == "ready" else 0.0)
        for a in status["aliases"]
        if a["status"] != "retired"
    }
    assert ready == {"coder": 1.0, "big": 0.0, "fresh": 0.0}
    age = fam["nev_inventory_age_seconds"][0].value
    assert abs(age - status["snapshot_age_s"]) < 5 and 35 <= age < 100
    jobs = json.loads(nev(["job", "status", "--json"], env).stdout)
    in_flight = [j for j in jobs if j["status"] not in ("landed", "failed", "not-landed")]
    assert fam["nev_jobs_in_flight"][0].value == len(in_flight) == 3
    assert {s.labels["status"]: s.value for s in fam["nev_jobs"]} == {
        "submitted": 2,
        "resent": 1,
        "landed": 1,
        "failed": 1,
        "not-landed": 1,
    }
    assert fam["nev_landings"][0].value == 2 and types["nev_landings"] == "counter"
    assert fam["nev_job_failures"][0].value == 3 and fam["nev_tick_failures"][0].value == 0
    up = {s.labels["source"]: s.value for s in fam["nev_source_up"]}
    assert up == {"aliases": 1, "jobs": 1, "lanes": 0, "dagu": 0, "counts": 1, "queues": 1}
    # no job has a first stage on record and no ledger holds a draw: no queue figure at all
    assert not [n for n in fam if "queue_wait" in n]
    assert (
        "nev_queue_depth" not in fam and "nev_lane_disk_free_bytes" not in fam
    )  # not read: left out
    for f in text_string_to_metric_families(r.stdout):
        assert (
            f.documentation
            and f.name + ("_total" if f.type == "counter" else "") in metrics.FAMILIES
        )


def test_a_source_that_does_not_read_is_down_not_zero(tmp_path):
    env = _state(tmp_path)
    (tmp_path / "inventory.json").write_text("{not json")
    r = nev(["rig", "metrics", "--skip", "lanes", "--skip", "dagu"], env)
    assert r.returncode == 0
    fam = _families(r.stdout)
    assert "nev_alias_ready" not in fam
    assert {s.labels["source"]: s.value for s in fam["nev_source_up"]}["aliases"] == 0
    assert "metrics: aliases: not read:" in r.stderr and "inventory.json" in r.stderr


def test_out_writes_the_textfile_by_rename_and_json_has_the_same_numbers(tmp_path):
    env = _state(tmp_path)
    out = tmp_path / "textfile" / "nev.prom"
    out.parent.mkdir()
    out.write_text("old\n")
    r = nev(["rig", "metrics", "--skip", "lanes", "--skip", "dagu", "--out", str(out)], env)
    assert r.returncode == 0 and r.stdout == ""
    assert sorted(p.name for p in out.parent.iterdir()) == ["nev.prom"]  # no temporary left
    assert oct(out.stat().st_mode & 0o777) == "0o644"  # node_exporter reads it
    fam = _families(out.read_text())
    js = json.loads(
        nev(["rig", "metrics", "--skip", "lanes", "--skip", "dagu", "--json"], env).stdout
    )
    assert js["nev_jobs_in_flight"][0]["value"] == fam["nev_jobs_in_flight"][0].value == 3
    assert {s["labels"]["alias"]: s["value"] for s in js["nev_alias_ready"]} == {
        s.labels["alias"]: s.value for s in fam["nev_alias_ready"]
    }


def test_the_lanes_are_what_nev_lane_list_reports(tmp_path):
    """Through the same reader as `nev lane list` (`lanes.gate.lane_status`): here a lane that does
    not answer it (its SSH is a stand-in the paramiko status call cannot use) is down, no disk."""
    lane = LocalLane(tmp_path)
    extra = {
        "NEV_STATE_DIR": str(tmp_path / "state"),
        "NEV_INVENTORY": str(tmp_path / "none.json"),
        "NEV_RIG_FILE": str(tmp_path / "no-rig.json"),
    }
    listed = lane.nev(["lane", "list", "--json"], **extra)
    rows = json.loads(listed.stdout)
    r = lane.nev(["rig", "metrics", "--skip", "dagu"], **extra)
    assert r.returncode == 0, r.stderr
    fam = _families(r.stdout)
    assert {s.labels["lane"]: s.value for s in fam["nev_lane_up"]} == {
        str(row["index"]): (1.0 if row["answers"] else 0.0) for row in rows
    }
    assert ("nev_lane_disk_free_bytes" in fam) == any(row["free_gb"] is not None for row in rows)


def test_a_lanes_free_disk_is_its_free_gb_in_bytes():
    rows = [
        {"index": 0, "answers": True, "free_gb": 812.34},
        {"index": 1, "answers": False, "free_gb": None},
    ]
    fam = _families(metrics.render(metrics.State(lanes=[LaneRow.of(r) for r in rows])))
    assert [(s.labels["lane"], s.value) for s in fam["nev_lane_disk_free_bytes"]] == [
        ("0", float(round(812.34 * (1 << 30))))
    ]
    assert {s.labels["lane"]: s.value for s in fam["nev_lane_up"]} == {"0": 1.0, "1": 0.0}


def test_label_values_are_escaped():
    text = metrics.render(
        metrics.State(
            aliases={
                "aliases": [{"alias": 'we"ird\\name\n', "status": "ready"}],
                "snapshot_age_s": None,
            },
            missing={"jobs": "x"},
        )
    )
    fam = _families(text)
    assert fam["nev_alias_ready"][0].labels["alias"] == 'we"ird\\name\n'


def _ago(now: dt.datetime, seconds: float) -> str:
    return (now - dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def test_queue_waits_are_p50_p95_max_of_the_window_and_absent_without_a_sample(tmp_path):
    """Job waits (submitted to first stage, from the records) and draw waits (first byte, from
    the ledgers on the share) as Prometheus summaries with their max; a window with none: absent."""
    env = _state(tmp_path)
    now = dt.datetime.now(dt.UTC)
    recs = json.loads((tmp_path / "state" / "job-results.json").read_text())
    waits = {"a": 3.0, "b": 10.0, "c": 1.0}
    for name, w in waits.items():
        recs["jobs"][name].update(submitted_at=_ago(now, 600 + w), first_stage_at=_ago(now, 600))
    # a job whose first stage was an earlier submission's, and one out of the window: no sample
    recs["jobs"]["d"].update(submitted_at=_ago(now, 60), first_stage_at=_ago(now, 900))
    recs["jobs"]["e"].update(submitted_at=_ago(now, 7300), first_stage_at=_ago(now, 7200))
    (tmp_path / "state" / "job-results.json").write_text(json.dumps(recs))
    share = tmp_path / "share"
    (share / "ledger").mkdir(parents=True)
    draws = [0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0,
             2.1, 2.2, 9.0]
    line = {"batch": "b1", "function": "f", "round": 1, "end": _ago(now, 30), "models": {
        "qwen3.8-27b-fast": {"calls": 20, "first_byte_s": draws},
        "deepseek-v4.1-flash": {"calls": 0, "first_byte_s": []}}}
    old = {"batch": "b0", "function": "f", "round": 1, "end": _ago(now, 7300),
           "models": {"deepseek-v4.1-flash": {"calls": 1, "first_byte_s": [50.0]}}}
    (share / "ledger" / "job-x.jsonl").write_text(json.dumps(old) + "\n" + json.dumps(line) + "\n")
    env = {**env, "NEV_LANE_SHARED": str(share), "NEV_QUEUE_WINDOW": "3600"}
    r = nev(["rig", "metrics", "--skip", "lanes", "--skip", "dagu"], env)
    assert r.returncode == 0, r.stderr
    types = {f.name: f.type for f in text_string_to_metric_families(r.stdout)}
    assert types["nev_job_queue_wait_seconds"] == "summary"
    fam = _families(r.stdout)
    job = {(s.name, s.labels.get("quantile")): s.value for s in fam["nev_job_queue_wait_seconds"]}
    assert job == {("nev_job_queue_wait_seconds", "0.5"): 3.0,
                   ("nev_job_queue_wait_seconds", "0.95"): 10.0,
                   ("nev_job_queue_wait_seconds_sum", None): 14.0,
                   ("nev_job_queue_wait_seconds_count", None): 3.0}
    assert fam["nev_job_queue_wait_max_seconds"][0].value == 10.0
    draw = {(s.name, s.labels.get("quantile")): s.value for s in fam["nev_draw_queue_wait_seconds"]}
    assert {s.labels["alias"] for s in fam["nev_draw_queue_wait_seconds"]} == {"qwen3.8-27b-fast"}
    assert draw[("nev_draw_queue_wait_seconds", "0.5")] == 1.3            # the 10th of 20
    assert draw[("nev_draw_queue_wait_seconds", "0.95")] == 2.2           # the 19th of 20
    assert draw[("nev_draw_queue_wait_seconds_count", None)] == 20.0
    assert [s.value for s in fam["nev_draw_queue_wait_max_seconds"]] == [9.0]
    # the alias whose only draw fell out of the window has no figure, not a zero
    assert "deepseek-v4.1-flash" not in r.stdout
    # the JSON view carries the same numbers
    js = json.loads(nev(["rig", "metrics", "--skip", "lanes", "--skip", "dagu", "--json"], env).stdout)
    assert js["nev_job_queue_wait_max_seconds"] == [{"labels": {}, "value": 10.0}]
    # a window that holds none of them: every queue figure is absent
    env["NEV_QUEUE_WINDOW"] = "10"
    bare = _families(nev(["rig", "metrics", "--skip", "lanes", "--skip", "dagu"], env).stdout)
    assert not [n for n in bare if "queue_wait" in n]
    assert {s.labels["source"]: s.value for s in bare["nev_source_up"]}["queues"] == 1
    env["NEV_QUEUE_WINDOW"] = "soon"
    r = nev(["rig", "metrics", "--skip", "lanes", "--skip", "dagu"], env)
    assert r.returncode == 0 and "metrics: queues: not read: NEV_QUEUE_WINDOW='soon'" in r.stderr
