"""A sweep measured before the last change to the serving configuration is not used to size a
batch (bench/sweeps.py): `nev batch plan` says which sweep, how old, what changed since and how to
refresh it; `--accept-stale-sweeps` uses it anyway."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path

from bench import sweeps
from lanes.base.changelog import entries
from tests.helpers.job_helpers import nev

ROOT = Path(__file__).resolve().parent.parent
A = "qwen3.8-27b-fast"


def _sweep(measured_at: str | None) -> dict:
    levels = [
        {"inflight": lv, "latency_p50_s": 1.0, "output_tok_s": 40.0 * min(lv, 2), "req_s": 1.0}
        for lv in (1, 2, 4)
    ]
    out = {"alias": A, "levels": levels, "knee": 2, "peak_output_tok_s": 80.0, "peak_at": 2}
    if measured_at:
        out["measured_at"] = measured_at
    return out


LOG = """## 2026-12-05T09:00:00Z snapshot before
- who: op@dev
- roles: gateway (1 host)
- files: 3
## 2026-12-05T10:00:00Z snapshot after
- who: op@dev
- roles: gateway (1 host)
- changed since before: owners/outputs only
## 2026-12-05T11:00:00Z land abspos-width
- who: op@dev
## 2026-12-05T12:00:00Z log worked
- who: op@dev
- what: wrote a note
## 2026-12-05T13:00:00Z drain gpu/0
- who: op@dev
- result: done
## 2026-12-05T14:00:00Z land block-width
- who: op@dev
"""


def test_only_changes_to_the_serving_configuration_count_and_the_latest_wins():
    es = entries(LOG)
    assert [sweeps.serving_change(e) is not None for e in es] == [
        False,
        False,
        False,
        False,
        True,
        False,
    ]
    last = sweeps.last_change(es)
    assert (
        last is not None
        and last.what == "drain gpu/0"
        and sweeps.iso(last.at) == "2026-12-05T13:00:00Z"
    )
    more = entries(
        LOG + "## 2026-12-05T15:00:00Z snapshot later\n- who: op@dev\n"
        "- changed since after: gateway gw:/etc/litellm/config.yaml\n"
        "## 2026-12-05T16:00:00Z log failed\n- who: ann@dev\n- what: raised max_seq_len\n"
        "- role: gpu\n"
    )
    snap = sweeps.last_change(more[:-1])
    assert snap is not None and snap.what.endswith("gateway gw:/etc/litellm/config.yaml")
    person = sweeps.last_change(more)
    assert person is not None and "raised max_seq_len" in person.what and "ann@dev" in person.what
    assert sweeps.last_change(entries(LOG.split("## 2026-12-05T13")[0])) is None


def test_a_sweep_is_stale_at_or_before_the_change_and_fresh_after_it():
    change = sweeps.last_change(entries(LOG))
    at = {
        "old": "2026-12-05T12:59:59Z",
        "same": "2026-12-05T13:00:00Z",
        "new": "2026-12-05T13:00:01Z",
    }
    got = sweeps.stale({k: _sweep(v) for k, v in at.items()} | {"untimed": _sweep(None)}, change)
    assert sorted(got) == ["old", "same", "untimed"] and got["untimed"].measured_at is None
    assert sweeps.stale({"old": _sweep(at["old"])}, None) == {}  # nothing changed on record
    now = dt.datetime(2026, 12, 5, 15, 0, 0, tzinfo=dt.UTC)
    line = got["old"].line(now)
    assert line.startswith(
        f"the sweep of old measured {at['old']} (2 h 0 min old) is older than the serving "
        "change of 2026-12-05T13:00:00Z (drain gpu/0): not used"
    )
    assert "`nev rig throughput old`" in line and "--accept-stale-sweeps" in line


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "NEV_THROUGHPUT_DIR": str(tmp / "tp"),
            "NEV_RIG_NOTES": str(tmp / "notes"),
            "NEV_FOLKNET_FILE": str(ROOT / "bench" / "folknet.json"),
            "NEV_CAPACITY_FILE": str(ROOT / "bench" / "capacity.json"),
            "NEV_LANE_SHARED": str(tmp / "share"),
            "NEV_STATE_DIR": str(tmp / "state"),
        }
    )
    return env


def _nev(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return nev(list(args), env, cwd, timeout=120)


def _plan(env: dict[str, str], cwd: Path, *extra: str) -> tuple[str, str]:
    r = _nev(env, cwd, "batch", "plan", "abspos_width", "--models", f"{A}:8:8", *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout, r.stderr


def test_batch_plan_refuses_a_sweep_older_than_a_serving_change_and_accepts_it_when_asked(tmp_path):
    env = _env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "tp").mkdir()
    measured = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    (tmp_path / "tp" / f"{A}.json").write_text(json.dumps(_sweep(measured)))
    fresh = json.loads(_plan(env, work, "--json")[0])
    assert fresh["stale_sweeps"] == [] and fresh["plans"][0]["bound"] == "pool_knee"
    assert fresh["plans"][0]["inflight"] == 2
    # a person logs a change to the pool's role by hand (the real `nev rig log`)
    r = _nev(env, work, "rig", "log", "raised max_num_seqs to 64", "--worked", "--role", "gpu")
    assert r.returncode == 0, r.stderr
    out, _ = _plan(env, work)
    line = next(ln for ln in out.splitlines() if ln.startswith("the sweep of "))
    assert (
        f"the sweep of {A} measured {measured} (30 min old) is older than the serving change of "
        in line
    )
    assert "(log worked by " in line and "role: gpu" in line and "raised max_num_seqs to 64" in line
    assert f"refresh it with `nev rig throughput {A}`" in line and "--accept-stale-sweeps" in line
    plan = json.loads(_plan(env, work, "--json")[0])
    (st,) = plan["stale_sweeps"]
    assert st["alias"] == A and st["measured_at"] == measured and st["used"] is False
    assert 1700 <= st["age_s"] <= 2000 and "raised max_num_seqs" in st["changed"]["what"]
    # not used: the knee is not among the limits, the declared in-flight (8) binds instead
    assert "knee" not in plan["plans"][0]["limits"] and plan["plans"][0]["inflight"] == 8
    accepted = json.loads(_plan(env, work, "--json", "--accept-stale-sweeps")[0])
    assert (
        accepted["plans"][0]["bound"] == "pool_knee" and accepted["stale_sweeps"][0]["used"] is True
    )
    # a sweep measured after the change is fresh again
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    (tmp_path / "tp" / f"{A}.json").write_text(json.dumps(_sweep(later)))
    again = json.loads(_plan(env, work, "--json")[0])
    assert again["stale_sweeps"] == [] and again["plans"][0]["bound"] == "pool_knee"
