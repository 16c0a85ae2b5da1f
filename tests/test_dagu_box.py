"""`nev dagu` on a rig-in-a-box lane (user `lane`, its own network namespace), real Dagu 1.30.2."""

from __future__ import annotations

import hashlib
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from dagu.install import show_hash
from dagu.layout import DAGU_SHA256
from dagu.runs import max_overlap
from lanes.base.ssh import Connection, Forward, Target
from rig.box.netns import run_in
from tests.helpers.dagu_helpers import (
    DAGU,
    WORKTREE,
    Api,
    base_env,
    nev,
    ok,
    password_from_config,
    tree_contains,
    wait_for,
)
from tests.helpers.reboot import boots, reboot_lane

PORT = 18431


@dataclass
class BoxLane:
    env: dict[str, str]
    root: Path  # ~/dagu of lane0, seen from the root side
    addr: str
    key: str
    fwd: Forward
    info: object

    @property
    def api(self) -> Api:
        return Api(self.fwd.url, password_from_config((self.root / "home/config.yaml").read_text()))


@pytest.fixture(scope="module")
def lane(box, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dagu-box")
    key = "sk-box-" + secrets.token_hex(20)
    keyfile = tmp / "model-key"
    keyfile.write_text(key + "\n")
    keyfile.chmod(0o600)
    env = base_env(**box.env)
    env.update(NEV_DAGU_BINARY=DAGU, NEV_MODEL_KEY_FILE=str(keyfile), NEV_DAGU_POLL="1")
    l0 = box.lanes[0]
    r = nev(env, "dagu", "up")
    conn = Connection(Target.parse(l0.ssh), box.known_hosts, box.ssh_key, jump=Target.parse(box.jump)).connect()
    fwd = conn.forward("127.0.0.1", PORT)
    bl = BoxLane(env, l0.host_home / "dagu", l0.addr, key, fwd, box)
    bl.first_up = r  # type: ignore[attr-defined]
    yield bl
    bl.fwd.close()                  # a test that reboots the lane opens a new one
    bl.fwd.conn.close()
    conn.close()
    nev(env, "dagu", "stop")


def test_up_on_a_clean_lane_verifies_the_binary_and_listens_on_loopback_only(lane, box):
    ok(lane.first_up)
    assert "changed: lane 0 (lane0): Dagu 1.30.2 binary (sha256 checked)" in lane.first_up.stderr
    binary = lane.root / "bin/dagu"
    assert hashlib.sha256(binary.read_bytes()).hexdigest() == DAGU_SHA256
    assert stat.S_IMODE(binary.stat().st_mode) == 0o755
    for f in ("home/config.yaml", "home/model-key"):
        assert stat.S_IMODE((lane.root / f).stat().st_mode) == 0o600, f
        assert (lane.root / f).stat().st_uid == binary.stat().st_uid != 0  # the lane user's
    assert (lane.root / "home/model-key").read_text() == lane.key
    # healthy on the lane's own loopback ...
    r = run_in(box, box.lanes[0].name, ["curl", "-s", f"http://127.0.0.1:{PORT}/api/v2/health"])
    assert '"status":"healthy"' in r.stdout
    # ... and not reachable from the rig network on the lane's address
    from rig.box.netns import inside

    with inside(box.rig_netns), pytest.raises(OSError):
        socket.create_connection((lane.addr, PORT), timeout=2).close()
    # 401 without the password, through the SSH forward
    assert requests.get(lane.fwd.url + "/api/v2/dag-runs", timeout=5).status_code == 401
    assert lane.api.get("/health")["status"] == "healthy"


def test_second_up_changes_nothing(lane):
    files = [lane.root / p for p in ("bin/dagu", "home/config.yaml", "home/model-key", "run/server.pid")]
    before = [(f.stat().st_mtime_ns, f.read_bytes()) for f in files]
    r = ok(nev(lane.env, "dagu", "up"))
    assert "changed:" not in r.stderr.replace("unchanged:", ""), r.stderr
    assert [(f.stat().st_mtime_ns, f.read_bytes()) for f in files] == before


def test_tampered_binary_is_refused(lane, tmp_path):
    bad = tmp_path / "dagu"
    shutil.copyfile(DAGU, bad)
    with bad.open("ab") as f:
        f.write(b"tampered")
    bad_hash = hashlib.sha256(bad.read_bytes()).hexdigest()
    env = dict(lane.env, NEV_DAGU_BINARY=str(bad), NEV_DAGU_DIR="~/dagu-tampered", NEV_DAGU_PORT="18499")
    r = nev(env, "dagu", "up")
    assert r.returncode == 1, r.stderr
    assert show_hash(bad_hash) in r.stderr and show_hash(DAGU_SHA256) in r.stderr
    assert not (lane.root.parent / "dagu-tampered/bin/dagu").exists()


def test_secret_named_parameter_is_refused_before_anything_is_sent(lane):
    before = len(lane.api.runs("hello"))
    dags = lane.root / "home/dags"
    files = {p.name: p.stat().st_mtime_ns for p in dags.iterdir()}
    for name in ("API_KEY", "gh_token", "MY_SECRET", "DB_PASSWORD", "PASSWD", "AWS_CREDENTIALS"):
        r = nev(lane.env, "dagu", "run", "hello", "--param", f"{name}=x")
        assert r.returncode == 1 and name in r.stderr and "nothing was sent" in r.stderr, r.stderr
    assert len(lane.api.runs("hello")) == before
    assert {p.name: p.stat().st_mtime_ns for p in dags.iterdir()} == files


def test_key_reaches_steps_but_is_nowhere_in_data_or_logs(lane):
    r = ok(nev(lane.env, "dagu", "run", "hello", "--param", "NAME=box"))
    run_id = r.stdout.strip().splitlines()[0]
    assert "step greet: succeeded (exit 0)" in r.stderr and "step key-reachable: succeeded" in r.stderr
    keylog = lane.api.get(f"/dag-runs/hello/{run_id}/steps/key-reachable/log", stream="stdout")["content"]
    assert hashlib.sha256(lane.key.encode()).hexdigest()[:16] in keylog
    needle = lane.key.encode()
    assert (lane.root / "home/data/dag-runs").is_dir() and (lane.root / "home/logs/hello").is_dir()
    assert tree_contains(lane.root / "home/data", needle) == []
    assert tree_contains(lane.root / "home/logs", needle) == []
    assert tree_contains(lane.root / "run", needle) == []


def test_watch_once_step_gives_zero_n_or_dash(lane, tmp_path):
    wf = tmp_path / "codes.yaml"
    wf.write_text("type: graph\nsteps:\n"
                  "  - name: ok\n    command: \"true\"\n"
                  "  - name: three\n    command: sh -c 'exit 3'\n"
                  "  - name: sig\n    command: sh -c 'kill -9 $PPID'\n")  # the wrapping shell dies of the signal
    r = nev(lane.env, "dagu", "run", str(wf))
    assert r.returncode == 1, r.stderr
    run_id = r.stdout.strip().splitlines()[0]
    for step, out, code in (("ok", "0", 0), ("three", "3", 3), ("sig", "-", 1)):
        w = nev(lane.env, "dagu", "watch", "--once", "--step", step, run_id)
        assert (w.stdout.strip(), w.returncode) == (out, code), (step, w.stdout, w.stderr)


def test_queue_max_two_runs_four_never_more_than_two_at_once(lane):
    ok(nev(lane.env, "dagu", "queue", "--max", "2"))
    assert "maxConcurrency: 2" in (lane.root / "home/config.yaml").read_text()
    procs = [subprocess.Popen([sys.executable, "-m", "rig.cli", "dagu", "run", "queued", "--param", "SECONDS=5",
                               "--detach"], cwd=WORKTREE, env=lane.env, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]  # four submissions at once
    ids = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs) and len(set(ids)) == 4
    api = lane.api
    seen: list[int] = []

    def all_done() -> list[dict] | None:
        seen.append(api.running_in_queue())
        return api.finished("queued", ids)

    runs = wait_for(all_done, 60, every=0.3, what="four queued runs")
    assert max(seen) == 2, seen

    def ts(s: str) -> float:
        return time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))

    spans = [(ts(d["startedAt"]), ts(d["finishedAt"])) for d in runs]
    assert max_overlap(spans) <= 2


def test_stop_then_start_is_healthy_and_takes_queued_runs_within_5s(lane):
    ok(nev(lane.env, "dagu", "run", "queued", "--param", "SECONDS=1"))  # the workflow is on the lane
    ok(nev(lane.env, "dagu", "stop"))
    st = nev(lane.env, "dagu", "status")
    assert st.returncode == 1 and "not running" in st.stdout
    # queue a run while Dagu is stopped (Dagu's own CLI on the lane writes the queue files)
    run_id = "0" + secrets.token_hex(15)
    h = "/home/lane/dagu"
    r = lane.fwd.conn.run(f"DAGU_HOME={h}/home TMPDIR={h}/tmp {h}/bin/dagu enqueue -q -c {h}/home/config.yaml "
                          f"--run-id={run_id} -p SECONDS=1 {h}/home/dags/queued.yaml")
    assert r.exit_status == 0, r.err
    ok(nev(lane.env, "dagu", "start"))  # returns once healthy
    t0 = time.monotonic()
    api = lane.api

    def started() -> bool:
        try:
            return api.run("queued", run_id)["statusLabel"] in ("running", "succeeded")
        except requests.HTTPError as e:   # not read from its queue files yet: 404 until it is
            if e.response is not None and e.response.status_code == 404:
                return False
            raise

    wait_for(started, 5, 0.1, "the queued run to start")
    assert time.monotonic() - t0 < 5


def test_tunnel_prints_a_local_url_that_reaches_the_api(lane):
    p = subprocess.Popen([sys.executable, "-m", "rig.cli", "dagu", "tunnel"], cwd=WORKTREE, env=lane.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        url = p.stdout.readline().split()[0].rstrip("/")
        assert url.startswith("http://127.0.0.1:")
        assert requests.get(url + "/api/v2/health", timeout=5).json()["status"] == "healthy"
        assert requests.get(url + "/api/v2/dag-runs", timeout=5).status_code == 401
    finally:
        p.terminate()
        assert p.wait(10) == 143


def test_autostart_line_brings_dagu_back_after_a_restart(lane, box):
    ok(nev(lane.env, "dagu", "autostart", "on"))
    conn = lane.fwd.conn
    tab = conn.run("crontab -l").out
    lines = [ln for ln in tab.splitlines() if "# nev-dagu" in ln]
    assert len(lines) == 1 and lines[0].startswith("@reboot ")
    ok(nev(lane.env, "dagu", "autostart", "on"))
    assert conn.run("crontab -l").out == tab  # idempotent
    if boots(box):
        # a real reboot of the guest (its own init): its cron runs the @reboot line, not this test
        took = reboot_lane(box, box.lanes[0].name)
        print(f"\nlane rebooted in {took:.2f} s")
        t0 = time.monotonic()
        health = ["curl", "-s", f"http://127.0.0.1:{PORT}/api/v2/health"]
        wait_for(lambda: '"healthy"' in run_in(box, box.lanes[0].name, health).stdout,
                 60, 0.2, "Dagu to come back by the lane's own autostart")
        print(f"Dagu healthy {time.monotonic() - t0:.2f} s after the new init")
        # the reboot ended every SSH session to the lane: the API's forward with them
        l0 = box.lanes[0]
        conn = Connection(Target.parse(l0.ssh), box.known_hosts, box.ssh_key,
                          jump=Target.parse(box.jump)).connect()
        lane.fwd = conn.forward("127.0.0.1", PORT)
    else:
        # netns lanes cannot boot: every Dagu process of the lane dies, then the line is run by hand
        pid = int((lane.root / "run/server.pid").read_text())
        assert conn.run(f"kill -KILL {pid}").exit_status == 0
        wait_for(lambda: conn.run(f"kill -0 {pid}").exit_status != 0, 5, what="Dagu to die")
        assert conn.run(lines[0].removeprefix("@reboot ").split(" #")[0]).exit_status == 0
    t0 = time.monotonic()
    wait_for(lambda: '"healthy"' in run_in(box, box.lanes[0].name, ["curl", "-s", f"http://127.0.0.1:{PORT}/api/v2/health"]).stdout,
             15, 0.2, "Dagu to come back")
    run_id = ok(nev(lane.env, "dagu", "run", "queued", "--param", "SECONDS=1", "--detach")).stdout.strip()
    wait_for(lambda: lane.api.run("queued", run_id)["statusLabel"] in ("running", "succeeded"), 10, 0.2,
             "a queued run after the restart")
    assert time.monotonic() - t0 < 15
    ok(nev(lane.env, "dagu", "autostart", "off"))
    as_lane = ["runuser", "-u", "lane", "--", "sh", "-c"]
    tab = run_in(box, box.lanes[0].name, [*as_lane, "crontab -l 2>/dev/null"]).stdout
    assert "# nev-dagu" not in tab
