"""`nev rig capacity`: candidates per hour per pool, power per role, the budget warning."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import folknet
from lanes.base.errors import ConfigError
from lanes.base.inventory_record import Snapshot
from rig import capacity as cap

ROOT = Path(__file__).resolve().parent.parent

DECLARED = {
    "schema": 1,
    "candidate": {"prompt_tokens": 1800, "answer_tokens": 600},
    "roles": {
        "pool": {"eight-card-24g": {"count": 1, "idle_w": 500, "busy_w": 3200},
                 "arm-gb10": {"count": 4, "idle_w": 40, "busy_w": 240}},
        "lane": {"epyc-node": {"count": 10, "idle_w": 200, "busy_w": 600}},
    },
    "power_budget_w": {"total": 9000, "roles": {"pool": 3500}},
}


def write(tmp_path: Path, data: dict, name: str = "capacity.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def sweep(alias: str, peak: float, knee: int | None = 8) -> dict:
    return {"alias": alias, "levels": [{"inflight": 8, "output_tok_s": peak}], "peak_output_tok_s": peak,
            "peak_at": 8, "knee": knee, "measured_at": "2026-11-30T10:00:00Z"}


def test_the_committed_declaration_loads_and_stays_within_its_budget():
    d = cap.load(ROOT / "bench/capacity.json")
    m = cap.model(folknet.load(ROOT / "bench/folknet.json"), None, {}, d)
    assert m.warnings == []
    assert {r.role for r in m.roles} >= {"pool", "lane"}


def test_a_role_over_its_power_budget_warns_with_the_role_and_the_figures(tmp_path):
    d = cap.load(write(tmp_path, DECLARED))
    m = cap.model(folknet.load(ROOT / "bench/folknet.json"), None, {}, d)
    pool_warning = next(w for w in m.warnings if "role pool" in w)
    assert "4160 W" in pool_warning                       # 3200 + 4 x 240
    assert "1 x eight-card-24g at 3200 W" in pool_warning and "4 x arm-gb10 at 240 W" in pool_warning
    assert "budget of 3500 W" in pool_warning and "660 W over" in pool_warning
    total = next(w for w in m.warnings if "the rig draws" in w)
    assert "10160 W" in total and "total of 9000 W" in total


def test_within_budget_no_warning(tmp_path):
    d = cap.load(write(tmp_path, {**DECLARED, "power_budget_w": {"total": 20000, "roles": {"pool": 5000}}}))
    assert cap.model(folknet.load(ROOT / "bench/folknet.json"), None, {}, d).warnings == []


def test_candidates_per_hour_come_from_the_measured_peak_and_the_answer_size(tmp_path):
    d = cap.load(write(tmp_path, DECLARED))
    sweeps = {"qwen3.8-27b-fast": cap.Sweep.of(sweep("qwen3.8-27b-fast", 819.0)),
              "deepseek-v4.1-flash": cap.Sweep.of(sweep("deepseek-v4.1-flash", 120.0, knee=None))}
    snap = Snapshot.from_json({"aliases": {"qwen3.8-27b-fast": {"status": "ready"}}}, "t")
    m = cap.model(folknet.load(ROOT / "bench/folknet.json"), snap, sweeps, d).to_json()
    pools = {p["pool"]: p for p in m["pools"]}
    fast = pools["gpu0"]["aliases"][0]
    assert fast["alias"] == "qwen3.8-27b-fast" and fast["status"] == "ready"
    assert fast["candidates_per_hour"] == round(3600 * 819.0 / 600) == 4914
    gpu1 = {a["alias"]: a for a in pools["gpu1"]["aliases"]}
    assert gpu1["deepseek-v4.1-flash"]["note"] == "sweep not saturated: the peak is a lower bound"
    assert gpu1["qwen3.8-27b-fast-2"]["candidates_per_hour"] is None
    assert "nev rig throughput qwen3.8-27b-fast-2" in gpu1["qwen3.8-27b-fast-2"]["note"]
    assert pools["gpu1"]["candidates_per_hour"] == 720
    assert "glm-5.3-flash" not in json.dumps(m["pools"])       # retired


def test_hosts_that_advertise_a_class_are_counted_from_the_inventory(tmp_path):
    d = cap.load(write(tmp_path, DECLARED))
    up = {"status": "up", "role": "pool", "inventory": {"roles": ["pool"], "hardware_class": "arm-gb10"}}
    snap = {"hosts": {"spark1": up, "spark2": up, "spark3": {**up, "status": "down"},
                      "odd": {"status": "up", "role": "pool", "inventory": {"hardware_class": "mystery"}}}}
    rows, notes = cap.power(d, Snapshot.from_json(snap, "t"))
    pool = next(r for r in rows if r.role == "pool")
    assert pool.source == "inventory" and pool.hosts == 2 and pool.busy_w == 480
    lane = next(r for r in rows if r.role == "lane")
    assert lane.source == "declared" and lane.hosts == 10
    assert any("class mystery has no declared power figures" in n for n in notes)


def test_a_malformed_declaration_names_the_file_and_field(tmp_path):
    bad = json.loads(json.dumps(DECLARED))
    bad["roles"]["pool"]["arm-gb10"]["busy_w"] = "lots"
    with pytest.raises(ConfigError, match=r"capacity.json: field roles.pool.arm-gb10.busy_w must be"):
        cap.load(write(tmp_path, bad))


def test_the_command_warns_on_stderr_and_exits_zero(tmp_path):
    decl = write(tmp_path, DECLARED)
    tpdir = tmp_path / "tp"
    tpdir.mkdir()
    (tpdir / "qwen3.8-27b-fast.json").write_text(json.dumps(sweep("qwen3.8-27b-fast", 300.0)))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "NEV_THROUGHPUT_DIR": str(tpdir), "NEV_INVENTORY": str(tmp_path / "none.json"),
           "NEV_FOLKNET_FILE": str(ROOT / "bench/folknet.json")}
    r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "capacity", "--declared", str(decl)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "1800" in r.stdout and "1800 cand" not in r.stdout
    assert "qwen3.8-27b-fast" in r.stdout and "300.0" in r.stdout
    assert "warning: power budget exceeded: role pool draws up to 4160 W" in r.stdout
    assert "capacity: warning: power budget exceeded: role pool" in r.stderr
    # --capacity-file is the name; --declared (its old name) is still taken, hidden
    j = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "capacity", "--capacity-file",
                        str(decl), "--json"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    data = json.loads(j.stdout)
    assert data["power"]["busy_w"] == 10160 and len(data["warnings"]) == 2
