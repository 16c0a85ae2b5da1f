"""`nev rig drain|stop|start|restart` on the rig-in-a-box: the real HAProxy's runtime API (reached
over SSH through the jump host, as the snapshot path reaches roles), the real LiteLLM gateway,
and the stand-in replicas' unit scripts. gpu2 serves qwen3.8-flash-next from two replicas (r0,
r1); gpu1 is a tensor-parallel pair (one unit for both halves); gpu0 has one replica.

What reached a replica is counted at the stand-in itself: each replica appends a line per call
arriving and answered to its journal, which outlives the process a drain stops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench import gateway_http
from bench.gateway_http import Endpoint, Unreachable
from rig import rigfile
from rig.box.haproxy import server_row
from rig.box.netns import run_in
from rig.box.poolctl import pool_control
from rig.serving.actions import run_verb

ROOT = Path(__file__).resolve().parent.parent
ALIAS = "qwen3.8-flash-next"
FAST = "qwen3.8-27b-fast"


def nev(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env, "PYTHONPATH": str(ROOT)})


@pytest.fixture
def serving(box_env, tmp_path, monkeypatch):
    """The box's environment with private rig notes; every replica running, ready and reset after."""
    box = box_env
    monkeypatch.setenv("NEV_RIG_NOTES", str(tmp_path / "notes"))
    env = {**box.env, "NEV_RIG_NOTES": str(tmp_path / "notes")}
    yield box, env
    for spec in ("gpu2/r0", "gpu2/r1", "gpu1", "gpu0"):
        r = nev(env, "rig", "start", spec)
        assert r.returncode == 0, r.stderr
    for r in ("r0", "r1"):
        pool_control(box, "gpu2", r, reset=True)


def journal(box, name: str, since: float) -> list[tuple[float, str, str]]:
    """(time, in|out, call) lines of a stand-in replica's journal from `since` on."""
    p = Path(box.dir) / "run" / f"{name}.journal"
    rows = [ln.split() for ln in p.read_text().splitlines()] if p.exists() else []
    return [(float(t), ev, call) for t, ev, call in rows if float(t) >= since]


def endpoint(box) -> Endpoint:
    return Endpoint(box.gateway_local_url, box.keys["batch"].read_text().strip())


class Batch:
    """Keeps `inflight` calls of the alias in flight through the gateway until `total` are sent."""

    def __init__(self, box, total: int, inflight: int) -> None:
        self.ep, self.left, self.lock = endpoint(box), total, threading.Lock()
        self.codes: list[int] = []
        self.latencies: list[float] = []
        self.threads = [threading.Thread(target=self.worker, daemon=True) for _ in range(inflight)]

    def take(self) -> bool:
        with self.lock:
            self.left -= 1
            return self.left >= 0

    def worker(self) -> None:
        while self.take():
            t0 = time.monotonic()
            try:
                r = gateway_http.post_json(self.ep, {"model": ALIAS, "max_tokens": 16, "messages": [
                    {"role": "user", "content": "Write clamp_px in Rust."}]}, timeout=(10, 120))
                code = r.status
            except Unreachable:
                code = 0
            with self.lock:
                self.codes.append(code)
                self.latencies.append(time.monotonic() - t0)

    def start(self) -> Batch:
        for t in self.threads:
            t.start()
        return self

    def join(self) -> None:
        for t in self.threads:
            t.join(300)


def wait_until(cond, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_drain_during_a_batch_loses_no_call_and_sends_the_drained_replica_nothing_new(serving):
    box, env = serving
    for r in ("r0", "r1"):
        pool_control(box, "gpu2", r, delay=1.0)
    since = time.time()
    batch = Batch(box, total=48, inflight=8).start()
    # both replicas busy before the drain begins
    wait_until(lambda: pool_control(box, "gpu2", "r0")["inflight"] >= 1 and pool_control(box, "gpu2", "r1")["inflight"] >= 1)
    began: list[float] = []
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if "to drain" in line:
            began.append(time.time())

    rc = run_verb("drain", "gpu2/r0", rigfile.load(box.rig_file), Path(env["NEV_RIG_NOTES"]), say,
                  grace=60, force=False, dry_run=False, probe_timeout=60)
    batch.join()
    assert rc == 0 and began, said
    assert batch.codes == [200] * 48                               # the batch finished, no 5xx surfaced
    r0 = journal(box, "gpu2-r0", since)
    arrived = {c: t for t, ev, c in r0 if ev == "in"}
    answered = {c for _t, ev, c in r0 if ev == "out"}
    in_flight_at_drain = [c for c, t in arrived.items() if t < began[0]]
    assert [c for c, t in arrived.items() if t >= began[0]] == []  # nothing new reached the drained replica
    assert in_flight_at_drain and set(in_flight_at_drain) <= answered   # every call it held was answered
    assert any("no call in flight after" in ln for ln in said) and any("stopped; no call cut" in ln for ln in said)
    assert len(journal(box, "gpu2-r1", since)) > len(r0)            # the rest of the batch went to r1
    log = (Path(env["NEV_RIG_NOTES"]) / "changelog.md").read_text()
    assert "drain gpu2/r0" in log and "- result: done" in log and "- who: " in log


def test_drain_stops_at_the_grace_and_says_how_many_calls_it_cut(serving):
    box, env = serving
    pool_control(box, "gpu2", "r0", delay=120.0)          # r0 never finishes within the grace
    batch = Batch(box, total=6, inflight=6).start()
    wait_until(lambda: pool_control(box, "gpu2", "r0")["inflight"] >= 1)
    time.sleep(0.5)
    held = pool_control(box, "gpu2", "r0")["inflight"]
    r = nev(env, "rig", "drain", "gpu2/r0", "--grace", "2")
    batch.join()
    assert r.returncode == 0, r.stderr
    assert f"grace of 2 s over with {held} call(s) in flight" in r.stdout
    assert f"stopped; {held} call(s) cut" in r.stdout
    assert sum(c != 200 for c in batch.codes) == held            # exactly the cut calls failed
    log = (Path(env["NEV_RIG_NOTES"]) / "changelog.md").read_text()
    assert f"- result: done; {held} call(s) cut" in log


def test_stopping_the_last_ready_replica_is_refused_without_force(serving):
    box, env = serving
    r = nev(env, "rig", "stop", "gpu0/r0")
    assert r.returncode == 1
    assert "qwen3.8-27b-fast would have no ready replica left" in r.stderr and "--force" in r.stderr
    assert "failed at check" in r.stderr
    assert run_in(box, "gpu0", [str(Path(box.dir) / "pools" / "units" / "gpu0-r0"), "status"]).returncode == 0
    # with one gpu2 replica drained, the other is the alias's last: refused too, then allowed with --force
    assert nev(env, "rig", "drain", "gpu2/r1").returncode == 0
    r = nev(env, "rig", "drain", "gpu2/r0")
    assert r.returncode == 1 and f"{ALIAS} would have no ready replica left" in r.stderr
    r = nev(env, "rig", "stop", "gpu2/r0", "--force")
    assert r.returncode == 0, r.stderr
    assert f"no: {ALIAS} will have no ready replica (--force)" in r.stdout
    log = (Path(env["NEV_RIG_NOTES"]) / "changelog.md").read_text()
    assert "- result: FAILED: stop gpu0/r0 failed at check" in log


def pair_pids(box) -> list[int]:
    p = Path(box.dir) / "run" / "gpu1-pair.pids"
    return [int(x) for x in p.read_text().split()] if p.exists() else []


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def test_a_pair_stops_and_starts_as_one_and_one_half_alone_is_refused(serving):
    box, env = serving
    before = pair_pids(box)
    assert len(before) == 2 and all(alive(p) for p in before)           # head and worker
    r = nev(env, "rig", "stop", "gpu1/worker", "--force")
    assert r.returncode == 2 and "one half of the pair gpu1/pair" in r.stderr
    assert all(alive(p) for p in before)
    r = nev(env, "rig", "stop", "gpu1", "--force")
    assert r.returncode == 0, r.stderr
    assert not any(alive(p) for p in before) and pair_pids(box) == []   # both halves stopped together
    r = nev(env, "rig", "start", "gpu1/head")
    assert r.returncode == 2 and "nev rig start gpu1/pair" in r.stderr
    assert pair_pids(box) == []                                          # nothing started
    r = nev(env, "rig", "start", "gpu1")
    assert r.returncode == 0, r.stderr
    after = pair_pids(box)
    assert len(after) == 2 and all(alive(p) for p in after) and not set(after) & set(before)
    assert "one completion of deepseek-v4.1-flash through the gateway: answered" in r.stdout


def test_dry_run_prints_the_steps_and_changes_nothing(serving):
    box, env = serving
    pids = Path(box.dir) / "run" / "gpu2-r1.pids"
    before = pids.read_text()
    r = nev(env, "rig", "restart", "gpu2/r1", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.split(": would ")[1].split(" ")[0] for ln in lines] == [
        "check", "set", "wait", "stop", "set", "start", "wait", "set", "one"]
    assert not (Path(env["NEV_RIG_NOTES"]) / "changelog.md").exists()
    assert pids.read_text() == before and all(alive(int(p)) for p in before.split())   # the same process
    assert server_row(box.proxy_stats_socket, "be_gpu2", "r1")["status"] in ("UP", "no check")


def test_status_and_the_dashboard_show_a_drained_or_stopped_replica_as_such_not_as_failing(serving, tmp_path,
                                                                                           monkeypatch):
    from rig.dashboard import collect, page

    box, env = serving
    env = {**env, "NEV_INVENTORY": str(tmp_path / "inventory.json")}
    monkeypatch.setenv("NEV_INVENTORY", env["NEV_INVENTORY"])
    assert nev(env, "rig", "drain", "gpu2/r0").returncode == 0
    assert nev(env, "rig", "stop", "gpu0", "--force").returncode == 0
    nev(env, "rig", "probe", "--timeout", "20")                      # gpu0's alias fails its probe now
    probed = json.loads((tmp_path / "inventory.json").read_text())["aliases"]
    assert probed[FAST]["status"] == "failing" and probed[ALIAS]["status"] == "ready"
    r = nev(env, "rig", "status", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    reps = {x["replica"]: x for x in s["replicas"]}
    assert reps["gpu2/r0"]["state"] == "drained" and reps["gpu2/r0"]["by"].startswith("drain by ")
    assert reps["gpu0/r0"]["state"] == "stopped" and reps["gpu0/r0"]["by"].startswith("stop by ")
    assert reps["gpu2/r1"]["state"] == "ready" and reps["gpu1/pair"]["state"] == "ready"
    status = {a["alias"]: a["status"] for a in s["aliases"]}
    assert status[FAST] == "stopped" and status[ALIAS] == "ready"    # an operator's stop, not a failure
    text = nev(env, "rig", "status").stdout
    assert any(ln.startswith("gpu0/r0") and "stopped" in ln for ln in text.splitlines()), text
    data = collect.gather({"aliases": collect.aliases, "replicas": collect.replicas})
    for k in collect.COLLECTORS:
        if getattr(data, k) is None:
            setattr(data, k, collect.unavailable("not collected here"))
    html = page.render(data, 30)
    assert 'data-replica="gpu2/r0" data-state="drained"' in html and 'data-replica="gpu0/r0" data-state="stopped"' in html
    assert f'data-alias="{FAST}" data-status="stopped"' in html


def test_box_up_after_an_operator_restart_adopts_the_replica_and_changes_nothing(serving):
    # `nev rig restart` starts the replica anew through its unit script: the box records its new
    # processes at the next up instead of starting it again (and reporting it as started).
    box, env = serving
    assert nev(env, "rig", "restart", "gpu2/r1", "--grace", "5").returncode == 0
    from rig.box import Box
    r = Box(box.name, box.net, box.dir).bring_up(len(box.lanes))
    assert not [c for c in r.changed if "gpu2" in c], r.changed
    pids = (box.dir / "run" / "gpu2-r1.pids").read_text().split()
    st = json.loads((box.dir / "box.json").read_text())
    assert str(st["procs"]["gpu2.r1"]["pid"]) == pids[0]
