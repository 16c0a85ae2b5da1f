"""Acceptance on the rig-in-a-box: the dashboard in headless Chromium (Playwright) shows every
lane and alias of the box with the right status, reloads by itself, and serves loopback only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from rig.box.poolctl import pool_control
from tests.helpers.standin_pool import free_port

ROOT = Path(__file__).resolve().parent.parent
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
CHROMIUM = "/usr/lib/chromium/chromium"
SCREENSHOT = ROOT / "target" / "dashboard.png"   # copied to docs/dashboard.png by hand when it changes

LEDGER = [
    {"batch": f"b{i}", "function": "abspos_width", "round": 1, "start": f"2026-11-30T0{i}:00:00Z",
     "end": f"2026-11-30T0{i}:04:00Z", "cases_run": 108,
     "models": {"qwen3.8-27b-fast": {"candidates": 32, "compiled": c, "best": b},
                "deepseek-v4.1-flash": {"candidates": 8, "compiled": d, "best": e}}}
    for i, (c, b, d, e) in enumerate([(2, 74, 1, 40), (8, 82, 3, 61), (14, 90, 4, 77), (19, 97, 6, 80)], start=1)
]


def job_state(folder: Path, name: str, stages: dict[str, str]) -> None:
    """A job's state folder as `nev job run` keeps it (jobs.state: events, then state.json)."""
    from jobs.state import JobState

    js = JobState.open(folder)
    try:
        js.record("run-started", job=name, run_id="r1", stages=list(stages))
        for stage, st in stages.items():
            if st in ("running", "passed"):
                js.record("stage-started", stage=stage)
            if st == "passed":
                js.record("stage-passed", stage=stage)
    finally:
        js.close()


def wait_health(url: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"dashboard exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with OPENER.open(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("dashboard did not answer")


def test_the_dashboard_shows_every_lane_and_alias_of_the_box_with_the_right_status(box_env, tmp_path):
    from playwright.sync_api import sync_playwright

    box = box_env
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NEV_INVENTORY": str(tmp_path / "inventory.json"),
           "NEV_STATE_DIR": str(tmp_path / "state"), "NEV_LANE_SHARED": str(tmp_path / "share"),
           "HOME": str(tmp_path)}
    from bench import ledger

    for x in LEDGER:   # written as the generation loop writes them
        record = {**x, "escalated": False, "lane_cpu_s": 12.5, "candidates": 40, "unique": 38, "compiled": 0,
                  "best": None, "passed": None}
        ledger.append(tmp_path / "share/ledger/wt-abspos.jsonl", ledger.line_for(record))
    job_state(tmp_path / "state/jobs/gen-abspos", "gen-abspos", {"gen": "passed", "probe": "running", "land": "pending"})
    # one alias answers, the other's pool answers 503: one probe round gives ready and failing
    pool_control(box, "gpu1", fail="503")
    try:
        pr = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "probe"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    finally:
        pool_control(box, "gpu1", reset=True)
    assert pr.returncode == 0, pr.stderr
    expected_alias = {**{p.alias: "ready" for p in box.pools.values()}, box.pools["gpu1"].alias: "failing"}
    # Dagu on lane 0 with one run in progress
    denv = {**env, "NEV_DAGU_BINARY": "/opt/nev/dagu-1.30.2/dagu", "NEV_DAGU_LANE": "0"}
    up = subprocess.run([sys.executable, "-m", "rig.cli", "dagu", "up"], env=denv, cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    run = subprocess.run([sys.executable, "-m", "rig.cli", "dagu", "run", "queued", "--param", "SECONDS=60",
                          "--detach"], env=denv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    run_id = run.stdout.split()[0]
    env = denv

    # a gate running on lane 0: its copy and its lock show in the lane's row
    wt = tmp_path / "dash-demo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(wt)], check=True)
    (wt / "a.txt").write_text("x\n")
    subprocess.run(["git", "-C", str(wt), "add", "."], check=True)
    subprocess.run(["git", "-C", str(wt), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"],
                   check=True)
    from tests.helpers.lane_helpers import copy_name

    copy = copy_name(wt)     # the lane copy's name: the folder's, keyed by its repository
    gate = subprocess.Popen([sys.executable, "-m", "rig.cli", "lane", "run", "--lane", "0", str(wt), "sleep", "15"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    port = free_port()
    dash = subprocess.Popen([sys.executable, "-m", "rig.cli", "rig", "dashboard", "--port", str(port),
                             "--refresh", "2"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_health(url, dash)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM,
                                        args=["--no-sandbox", "--disable-gpu", "--headless"])
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url + "/")
                lanes = page.eval_on_selector_all(
                    "tr.lane", "rs => rs.map(r => [r.dataset.lane, r.dataset.answers])")
                aliases = page.eval_on_selector_all(
                    "tr.alias", "rs => rs.map(r => [r.dataset.alias, r.dataset.status])")
                assert sorted(lanes) == [[str(i), "yes"] for i in range(len(box.lanes))]
                page.wait_for_function(
                    "() => [...document.querySelectorAll(\"tr.lane[data-lane='0'] td\")]"
                    f".some(td => td.textContent === '{copy}')", timeout=30000)
                gates = page.eval_on_selector_all("tr.lane", "rs => rs.map(r => [r.dataset.lane, r.cells[4].textContent])")
                assert dict(gates) == {"0": copy, "1": "none"}   # the gate running on lane 0
                lane_cells = page.eval_on_selector_all("tr.lane", "rs => rs.map(r => [r.cells[2].textContent,"
                                                       " r.cells[3].textContent, r.cells[4].textContent])")
                for free, copies, gates in lane_cells:     # from the gate's lane status, per lane
                    assert free.endswith(" GiB") and float(free[:-4]) > 0
                    assert copies.split(":")[0].isdigit() and gates in ("none",) + tuple(gates.split(", "))
                assert dict(aliases) == expected_alias
                limits = page.eval_on_selector_all(
                    "tr.alias", "rs => rs.map(r => [r.dataset.alias, r.cells[4].textContent])")
                assert dict(limits) == {p.alias: str(p.max_inflight) for p in box.pools.values()}
                assert page.locator("tr.job[data-job='gen-abspos']").count() == 1
                assert page.locator("#batches svg.plot").count() == 2
                assert page.locator("#batches svg.plot polyline").count() == 4   # 2 models x 2 plots
                assert page.locator("tr.floor").count() >= 1
                page.wait_for_selector("tr.dagu-run[data-workflow='queued']", timeout=20000)
                runs = page.eval_on_selector_all("tr.dagu-run", "rs => rs.map(r => [r.cells[1].textContent,"
                                                 " r.dataset.status])")
                assert [run_id, "running"] in runs or [run_id, "queued"] in runs, runs
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOT), full_page=True)
                text = page.content()
                for k in box.keys.values():
                    assert Path(k).read_text().strip() not in text
                # it reloads by itself: a new job appears without navigating
                job_state(tmp_path / "state/jobs/gen-block", "gen-block", {"gen": "running"})
                page.wait_for_selector("tr.job[data-job='gen-block']", timeout=20000)
            finally:
                browser.close()
        # loopback only, read-only
        req = urllib.request.Request(url + "/", data=b"x", method="POST")
        try:
            OPENER.open(req, timeout=5)
            raise AssertionError("POST accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 405
        listening = Path("/proc/net/tcp").read_text()
        assert f"0100007F:{port:04X}" in listening and f"00000000:{port:04X}" not in listening
    finally:
        dash.send_signal(signal.SIGTERM)
        out, err = dash.communicate(timeout=30)
        subprocess.run([sys.executable, "-m", "rig.cli", "dagu", "stop-run", run_id], env=env, cwd=ROOT,
                       capture_output=True, timeout=120)
        subprocess.run([sys.executable, "-m", "rig.cli", "dagu", "stop"], env=env, cwd=ROOT,
                       capture_output=True, timeout=120)
        gate_out, gate_err = gate.communicate(timeout=120)
    assert gate.returncode == 0, gate_err
    assert dash.returncode == 0, err
    assert "dashboard: stopped" in err
