"""`nev dagu up --distributed` on the rig-in-a-box: coordinator on lane0, supervised mTLS workers
on both lanes, Dagu's data and logs on the NAS; real Dagu 1.30.2 across network namespaces."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from lanes.base.ssh import Connection, Forward, Target
from tests.helpers.dagu_helpers import DAGU, Api, base_env, nev, ok, password_from_config, wait_for

PORT = 18431
COORD_PORT = 50055


@dataclass
class Dist:
    env: dict[str, str]
    info: object
    fwd: Forward
    pki: Path
    conns: list[Connection]

    @property
    def api(self) -> Api:
        home = self.info.lanes[0].host_home  # type: ignore[attr-defined]
        return Api(self.fwd.url, password_from_config((home / "dagu/home/config.yaml").read_text()))

    def workflow(self, tmp: Path, name: str, text: str) -> str:
        p = tmp / f"{name}.yaml"
        p.write_text(text)
        return str(p)


@pytest.fixture(scope="module")
def dist(box, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dagu-dist")
    release = box.nas / "releases" / "dagu-1.30.2" / "dagu"  # the operator's copy on the NAS share
    release.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DAGU, release)
    release.chmod(0o755)
    env = base_env(**box.env)
    env.update(NEV_DAGU_PKI_DIR=str(tmp / "pki"), NEV_DAGU_POLL="1", NEV_DAGU_WAIT="120")
    r = nev(env, "dagu", "up", "--distributed", "--lane", "0")
    assert r.returncode == 0, r.stderr
    conns = [Connection(Target.parse(ln.ssh), box.known_hosts, box.ssh_key, jump=Target.parse(box.jump)).connect() for ln in box.lanes]
    fwd = conns[0].forward("127.0.0.1", PORT)
    d = Dist(env, box, fwd, tmp / "pki", conns)
    yield d
    fwd.close()
    for c in conns:
        c.close()
    for i in (1, 0):
        nev(env, "dagu", "stop", "--lane", str(i))


def test_workers_register_with_their_labels_and_certs_stay_private(dist, box):
    workers = {w["id"]: w["labels"] for w in dist.api.get("/workers")["workers"]}
    assert workers["lane0"]["lane"] == "0" and workers["lane1"]["lane"] == "1"
    assert workers["lane0"]["rig"] == workers["lane1"]["rig"] == "nev"
    for ln in box.lanes:
        tls = ln.host_home / "dagu/tls"
        assert sorted(p.name for p in tls.iterdir()) == ["ca.crt", "lane.crt", "lane.key"]
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in tls.iterdir())
    assert not [p for p in box.nas.rglob("*") if p.suffix in (".key", ".crt")]
    assert (box.nas / "dagu/data/service-registry").is_dir()
    assert stat.S_IMODE(dist.pki.stat().st_mode) == 0o700 and (dist.pki / "ca.key").exists()
    st = ok(nev(dist.env, "dagu", "status", "--lane", "1"))
    assert "worker running" in st.stdout and "Dagu" not in st.stdout  # lane1 runs only a worker
    st = ok(nev(dist.env, "dagu", "status", "--lane", "0"))
    assert "Dagu healthy" in st.stdout and "worker running" in st.stdout


def _ts(s: str) -> float:
    return time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))


def test_two_concurrent_runs_run_one_on_each_lane(dist, tmp_path):
    # Each run lasts well past the time two `nev dagu run` calls take on a loaded machine (2-3 s
    # each), so the second is enqueued while the first still holds lane0's one slot.
    wf = dist.workflow(tmp_path, "spread", "queue: global\nworkerSelector:\n  rig: nev\n"
                                          "steps:\n  - name: work\n    command: sleep 12\n")
    ids = [ok(nev(dist.env, "dagu", "run", wf, "--detach")).stdout.strip() for _ in range(2)]
    api = dist.api
    runs = wait_for(lambda: api.finished("spread", ids), 90, 0.5, "both runs to succeed")
    assert sorted(r["workerId"] for r in runs) == ["lane0", "lane1"]
    (s0, e0), (s1, e1) = ((_ts(r["startedAt"]), _ts(r["finishedAt"])) for r in runs)
    assert s0 < e1 and s1 < e0, "the two runs did not overlap in time"


def test_label_pinned_run_runs_on_the_labelled_lane(dist, box, tmp_path):
    wf = dist.workflow(tmp_path, "pinned", "workerSelector:\n  lane: \"1\"\nsteps:\n  - name: mark\n"
                                          "    command: sh -c 'touch \"$HOME/pinned-$DAG_RUN_ID\"'\n")
    r = ok(nev(dist.env, "dagu", "run", wf))
    run_id = r.stdout.strip().splitlines()[0]
    assert "enqueued" in r.stderr
    assert dist.api.run("pinned", run_id)["workerId"] == "lane1"
    assert (box.lanes[1].host_home / f"pinned-{run_id}").exists()
    assert not (box.lanes[0].host_home / f"pinned-{run_id}").exists()


def test_coordinator_port_refuses_plain_and_certificateless_connections(dist, box):
    from rig.box.netns import inside

    addr = box.lanes[0].addr
    # Tried from the rig network (anyone on it could reach the port): plain HTTP/2 (what an
    # insecure gRPC client sends): no HTTP/2 SETTINGS frame comes back
    with inside(box.rig_netns), socket.create_connection((addr, COORD_PORT), timeout=5) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000"))
        s.settimeout(5)
        try:
            answer = s.recv(64)
        except (ConnectionResetError, TimeoutError):
            answer = b""
    assert not (len(answer) >= 4 and answer[3] == 0x04), answer
    # TLS with our CA but without a client certificate: refused
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(dist.pki / "ca.crt")
    ctx.set_alpn_protocols(["h2"])
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        with inside(box.rig_netns), socket.create_connection((addr, COORD_PORT), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname=addr) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            if not s.recv(64):
                raise ConnectionResetError("closed")
    # ... and with a certificate it completes the handshake (the port does speak mTLS)
    ctx.load_cert_chain(dist.pki / "lane1.crt", dist.pki / "lane1.key")
    with inside(box.rig_netns), socket.create_connection((addr, COORD_PORT), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname=addr) as s:
        assert s.selected_alpn_protocol() == "h2"


def test_worker_without_client_certificate_cannot_connect_and_is_stopped_spinning(dist, box):
    lane1 = dist.conns[1]
    home = "/home/lane/dagu"
    base = f"""paths:
  dagsDir: {home}/home/dags
  dataDir: /srv/lane-shared/dagu/data
  logDir: /srv/lane-shared/dagu/logs
"""
    lane1.write_file(f"{home}/home/nocert.yaml", (base + f"worker: {{id: nocert}}\npeer:\n  insecure: false\n"
                                                         f"  clientCaFile: {home}/tls/ca.crt\n").encode())
    lane1.write_file(f"{home}/home/plain.yaml", (base + "worker: {id: plain}\npeer:\n  insecure: true\n").encode())
    # Both spin logging errors; each runs under the supervisor nev uses for workers (and `timeout`).
    cmd = " & ".join(
        f"DAGU_HOME={home}/home TMPDIR={home}/tmp timeout 20 python3 {home}/bin/supervise.py "
        f"--log {home}/run/{n}.log --pidfile {home}/run/{n}.pid --cap 200000 -- "
        f"{home}/bin/dagu worker -c {home}/home/{n}.yaml; echo {n}=$? >> {home}/run/rc"
        for n in ("nocert", "plain")) + " & wait"
    lane1.run(f"rm -f {home}/run/rc")
    seen: set[str] = set()
    t = threading.Thread(target=lambda: lane1.run(cmd, timeout=40))
    t.start()
    try:
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline:
            seen |= {w["id"] for w in dist.api.get("/workers")["workers"]}
            time.sleep(0.5)
    finally:
        t.join(40)
    assert "lane1" in seen and "nocert" not in seen and "plain" not in seen, seen
    logs = lane1.run(f"cat {home}/run/nocert.log {home}/run/plain.log").out.lower()
    assert "tls" in logs or "certificate" in logs or "handshake" in logs or "connection" in logs
    # ... and both spun, so the supervisor stopped them (exit 3) well before `timeout`, logs capped
    assert sorted(lane1.run(f"cat {home}/run/rc").out.split()) == ["nocert=3", "plain=3"]
    for n in ("nocert", "plain"):
        assert int(lane1.run(f"stat -c %s {home}/run/{n}.log").out) <= 200000 + 300


def _kill_lane_except_sshd(netns: str) -> int:
    """Every process of the lane but its sshd and, on an LXC lane, the guest's init (pid 1 in the
    guest's pid namespace: killing it would end the guest, not just its work)."""
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
    killed = 0
    for p in pids:
        try:
            comm = Path(f"/proc/{p}/comm").read_text().strip()
            nspid = next(line.split()[-1] for line in Path(f"/proc/{p}/status").read_text().splitlines()
                         if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if comm != "sshd" and nspid != "1":
            try:
                os.kill(int(p), signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def test_killed_worker_lane_leaves_run_failed_and_resubmission_completes_on_other_lane(dist, box, tmp_path):
    api = dist.api
    wf = dist.workflow(tmp_path, "victim", "workerSelector:\n  lane: \"1\"\nsteps:\n  - name: long\n"
                                          "    command: sleep 120\n")
    run_id = ok(nev(dist.env, "dagu", "run", wf, "--detach")).stdout.strip()
    wait_for(lambda: api.run("victim", run_id)["statusLabel"] == "running", 30, 0.3, "the run to start on lane1")
    assert api.run("victim", run_id)["workerId"] == "lane1"
    assert _kill_lane_except_sshd(box.lanes[1].netns) >= 2  # supervisor, worker, the run and its step
    t0 = time.monotonic()
    wait_for(lambda: api.run("victim", run_id)["statusLabel"] == "failed", 150, 2, "the run to show failed")
    failed_after = time.monotonic() - t0
    assert api.run("victim", run_id)["statusLabel"] == "failed"  # stays failed: not re-dispatched
    again = dist.workflow(tmp_path, "victim2", "workerSelector:\n  rig: nev\nsteps:\n  - name: long\n"
                                              "    command: sleep 1\n")
    r = ok(nev(dist.env, "dagu", "run", again))
    rid = r.stdout.strip().splitlines()[0]
    assert api.run("victim2", rid)["workerId"] == "lane0"
    print(f"killed worker lane: run failed after {failed_after:.0f} s")
    ok(nev(dist.env, "dagu", "start", "--lane", "1"))  # the worker comes back
    wait_for(lambda: "lane1" in {w["id"] for w in api.get("/workers")["workers"]}, 30, 0.5, "lane1 worker")


def test_spinning_worker_is_stopped_by_its_supervisor(dist):
    lane1 = dist.conns[1]
    home = "/home/lane/dagu"
    # A "worker" that logs like one which cannot reach its coordinator.
    cmd = (f"python3 {home}/bin/supervise.py --log {home}/run/spin.log --pidfile {home}/run/spin.pid "
           f"--cap 100000 -- sh -c {shlex.quote('while :; do echo dial failed; done')}")
    r = lane1.run(cmd, timeout=60)
    assert r.exit_status == 3
    size = int(lane1.run(f"stat -c %s {home}/run/spin.log").out)
    assert size <= 100000 + 300
    assert "stopping the worker" in lane1.run(f"tail -n 2 {home}/run/spin.log").out
