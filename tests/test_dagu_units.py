"""The dagu package's pure decisions, the shipped workflows (real `dagu validate`), the worker
supervisor (real processes) and the CA/lane certificates (real TLS handshakes)."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from dagu import daguconfig, install, pki, runs
from dagu.api import StepStatus, parse_run, step_exit_code
from dagu.distributed import worker_labels
from dagu.layout import DAGU_SHA256, Layout, resolve_root
from dagu.service import cron_lines
from lanes.base.errors import ConfigError, UsageError
from lanes.lanesfile import choose_lane_index
from tests.helpers.dagu_helpers import DAGU

WORKFLOWS = sorted((Path(__file__).resolve().parent.parent / "dagu" / "workflows").glob("*.yaml"))


@pytest.mark.parametrize("wf", WORKFLOWS, ids=lambda p: p.name)
def test_every_shipped_workflow_passes_dagu_validate(wf, tmp_path):
    r = subprocess.run([DAGU, "validate", str(wf)], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DAGU_HOME": str(tmp_path / "h")})
    assert r.returncode == 0 and "valid" in (r.stdout + r.stderr), r.stdout + r.stderr


def test_dagu_validate_refuses_a_snake_case_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_active_runs: 1\nsteps:\n  - name: a\n    command: \"true\"\n")
    r = subprocess.run([DAGU, "validate", str(bad)], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DAGU_HOME": str(tmp_path / "h")})
    assert r.returncode != 0


def test_shipped_workflows_carry_no_secret_params():
    for wf in WORKFLOWS:
        doc = yaml.safe_load(wf.read_text())
        for p in doc.get("params") or []:
            for name in (p if isinstance(p, dict) else {}):
                assert not runs.is_secret_name(name), (wf.name, name)


def test_secret_named_params_are_refused():
    for name in ("OPENAI_API_KEY", "token", "ClientSecret", "DB_PASSWORD", "PASSWD", "GIT_CREDENTIALS"):
        with pytest.raises(runs.RunError) as e:
            runs.parse_params([f"{name}=v"])
        assert name in str(e.value) and "nothing was sent" in str(e.value)
    assert runs.parse_params(["NAME=a=b", "N=1"]) == {"NAME": "a=b", "N": "1"}
    with pytest.raises(UsageError):
        runs.parse_params(["novalue"])


def test_workflow_with_queue_or_worker_selector_is_enqueued(tmp_path):
    cases = {"q.yaml": ("queue: global\nsteps: []\n", True), "w.yaml": ("workerSelector: {lane: '1'}\nsteps: []\n", True),
             "s.yaml": ("steps: []\n", False)}
    for fname, (text, enq) in cases.items():
        (tmp_path / fname).write_text(text)
        assert runs.load_workflow(str(tmp_path / fname)).enqueue is enq, fname
    assert runs.load_workflow("queued").enqueue and not runs.load_workflow("hello").enqueue
    with pytest.raises(UsageError):
        runs.load_workflow("no-such-workflow")


def test_step_exit_code_from_error_text():
    assert step_exit_code(StepStatus("a", "succeeded")) == "0"
    assert step_exit_code(StepStatus("a", "failed", 'failed to execute step "a": exit status 3')) == "3"
    assert step_exit_code(StepStatus("a", "failed", 'failed to execute step "a": signal: killed')) == "-"
    assert step_exit_code(StepStatus("a", "aborted", "signal: terminated")) == "-"


def test_parse_run_reads_nodes():
    st = parse_run({"dagRunDetails": {"name": "x", "dagRunId": "r", "statusLabel": "failed", "workerId": "lane1",
                                      "nodes": [{"step": {"name": "s"}, "statusLabel": "failed",
                                                 "error": "exit status 7"}]}})
    assert st.done and st.worker_id == "lane1" and step_exit_code(st.step("s")) == "7"


def test_run_json_is_what_dagu_run_and_watch_print_with_json():
    import json

    from dagu.runs import run_json

    nodes = [{"step": {"name": "s"}, "statusLabel": "failed", "error": "exit status 7"},
             {"step": {"name": "t"}, "statusLabel": "running"}]
    st = parse_run({"dagRunDetails": {"name": "x", "dagRunId": "r", "statusLabel": "failed",
                                      "startedAt": "t0", "nodes": nodes}})
    got = json.loads(json.dumps(run_json(st)))
    assert (got["run_id"], got["workflow"], got["status"], got["done"]) == ("r", "x", "failed", True)
    assert [(s["name"], s["exit"]) for s in got["steps"]] == [("s", "7"), ("t", None)]


def test_a_run_and_its_steps_keep_their_times_and_end_on_their_own_labels():
    st = parse_run({"name": "x", "dagRunId": "r", "statusLabel": "running", "startedAt": "t0",
                    "nodes": [{"step": {"name": "a"}, "statusLabel": "skipped", "startedAt": "t1", "finishedAt": "t2"}]})
    step = st.step("a")
    assert (st.started_at, st.finished_at, step.started_at, step.finished_at) == ("t0", "", "t1", "t2")
    assert step.done and not st.done                      # a skipped step is over; a running run is not
    assert not parse_run({"statusLabel": "skipped"}).done  # nor is a run whose label only a step can end on


def test_max_overlap():
    assert runs.max_overlap([(0, 3), (0, 3), (3, 6), (3, 6)]) == 2
    assert runs.max_overlap([(0, 5), (1, 6), (2, 7)]) == 3
    assert runs.max_overlap([]) == 0


def test_lane_choice_order():
    assert choose_lane_index(2, "1", "lane@h") == (2, False)
    assert choose_lane_index(None, "1", "lane@h") == (1, False)
    assert choose_lane_index(None, None, "lane@h") == (0, True)
    assert choose_lane_index(None, None, None) == (0, False)
    with pytest.raises(ConfigError):
        choose_lane_index(None, "one", None)


def test_config_renders_camel_case_and_keeps_password_and_queue():
    lay = Layout("/home/lane/dagu")
    text = daguconfig.render_server(daguconfig.ServerConfig(layout=lay, port=18431, password="pw-abc", coord_port=50055,
                                                      queue_max=3))
    doc = yaml.safe_load(text)
    assert doc["scheduler"]["lockStaleThreshold"] == "3s"
    assert doc["paths"]["dataDir"] == "/home/lane/dagu/home/data" and doc["host"] == "127.0.0.1"
    ex = daguconfig.parse_existing(text)
    assert (ex.password, ex.queue_max) == ("pw-abc", 3)
    assert not daguconfig.is_distributed(text)
    assert daguconfig.parse_existing(None).password is None


def test_distributed_config_keeps_everything_but_the_queue_size():
    lay = Layout("/home/lane/dagu", shared="/srv/lane-shared")
    tls = daguconfig.Tls("/c", "/k", "/ca")
    text = daguconfig.render_server(daguconfig.ServerConfig(layout=lay, port=1, password="pw", coord_port=2,
                                                      coord_host="198.18.0.11", tls=tls))
    assert daguconfig.is_distributed(text)
    doc = yaml.safe_load(text)
    assert doc["paths"]["dataDir"] == "/srv/lane-shared/dagu/data"
    assert doc["coordinator"] == {"host": "198.18.0.11", "port": 2, "advertise": "198.18.0.11"}
    assert doc["peer"] == {"insecure": False, "certFile": "/c", "keyFile": "/k", "clientCaFile": "/ca"}
    new = yaml.safe_load(daguconfig.with_queue_max(text, 5))
    assert new["queues"]["config"][0]["maxConcurrency"] == 5
    assert {k: v for k, v in new.items() if k != "queues"} == {k: v for k, v in doc.items() if k != "queues"}


def test_cron_line_added_once_and_removed_keeping_others():
    base = "0 * * * * echo other\n"
    on = cron_lines(base, "/home/lane/dagu/bin/start.sh", True)
    assert on.count("@reboot") == 1 and "echo other" in on
    assert cron_lines(on, "/home/lane/dagu/bin/start.sh", True) == on
    assert cron_lines(on, "/home/lane/dagu/bin/start.sh", False) == base


def test_root_resolution():
    assert resolve_root("~/dagu", "/home/lane") == "/home/lane/dagu"
    assert resolve_root("/opt/d/", "/home/lane") == "/opt/d"
    assert resolve_root("dagu", "/home/lane") == "/home/lane/dagu"


def test_binary_source_choice_and_pin(tmp_path):
    assert install.choose_source(None, "/srv/lane-shared").path == "/srv/lane-shared/releases/dagu-1.30.2/dagu"
    f = tmp_path / "dagu"
    f.write_bytes(b"x")
    assert install.choose_source(str(f), "/s").local
    assert not install.choose_source("/srv/lane-shared/d", "/s").local
    with pytest.raises(install.InstallError):
        install.choose_source("https://example.invalid/dagu", "/s")
    with pytest.raises(install.InstallError) as e:
        install.check_pin("0" * 64, "x")
    assert install.show_hash(DAGU_SHA256) in str(e.value)
    install.check_pin(DAGU_SHA256, "x")


def test_worker_labels():
    assert worker_labels(1, True, 4) == {"rig": "nev", "lane": "1", "browsers": "yes", "cores": "4"}


SUPERVISE = Path(__file__).resolve().parent.parent / "dagu" / "supervise.py"


def test_supervisor_stops_a_spinning_worker_and_caps_its_log(tmp_path):
    log, pid = tmp_path / "w.log", tmp_path / "w.pid"
    r = subprocess.run([sys.executable, str(SUPERVISE), "--log", str(log), "--pidfile", str(pid),
                        "--cap", "200000", "--max-lines", "2000", "--window", "5", "--", "yes", "spinning"],
                       capture_output=True, timeout=30)
    assert r.returncode == 3
    assert log.stat().st_size <= 200000 + 200
    assert "stopping the worker" in log.read_text()
    assert not pid.exists()


def test_supervisor_passes_sigterm_to_the_worker(tmp_path):
    log, pid = tmp_path / "w.log", tmp_path / "w.pid"
    p = subprocess.Popen([sys.executable, str(SUPERVISE), "--log", str(log), "--pidfile", str(pid), "--",
                          "sleep", "60"])
    try:
        import time
        deadline = time.monotonic() + 10
        while not pid.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        while "started" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        p.terminate()
        assert p.wait(10) == 0
        assert "worker exited with -15" in log.read_text()
    finally:
        if p.poll() is None:
            p.kill()


def _serve_tls(ctx: ssl.SSLContext, sock: socket.socket, results: list) -> None:
    conn, _ = sock.accept()
    try:
        with ctx.wrap_socket(conn, server_side=True) as s:
            results.append(s.getpeercert() is not None)
            s.sendall(b"ok")
    except (ssl.SSLError, OSError) as e:
        results.append(e)


def test_lane_certificates_do_mutual_tls_and_stay_private(tmp_path):
    folder = tmp_path / "pki"
    c0 = pki.lane_cert(0, "127.0.0.1", folder)
    c1 = pki.lane_cert(1, "127.0.0.2", folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in folder.iterdir())
    assert pki.lane_cert(0, "127.0.0.1", folder) == c0  # stable on the second call
    files = {}
    for name, data in (("c0", c0.cert_pem), ("k0", c0.key_pem), ("c1", c1.cert_pem), ("k1", c1.key_pem),
                       ("ca", c0.ca_pem)):
        files[name] = tmp_path / name
        files[name].write_bytes(data)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files["c0"], files["k0"])
    server.load_verify_locations(files["ca"])
    server.verify_mode = ssl.CERT_REQUIRED

    def attempt(with_cert: bool) -> tuple[object, list]:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        results: list = []
        t = threading.Thread(target=_serve_tls, args=(server, sock, results))
        t.start()
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.load_verify_locations(files["ca"])
        if with_cert:
            client.load_cert_chain(files["c1"], files["k1"])
        got: object
        try:
            with socket.create_connection(sock.getsockname()) as raw, \
                    client.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                got = s.recv(2)
        except (ssl.SSLError, OSError) as e:
            got = e
        t.join(5)
        sock.close()
        return got, results

    got, results = attempt(True)
    assert got == b"ok" and results == [True]
    got, results = attempt(False)
    assert got != b"ok" and isinstance(results[0], Exception)


def test_pki_dir_is_outside_the_repository():
    from lanes.base import settings

    p = settings.get_path(settings.DAGU_PKI_DIR, {})
    assert p is not None and not str(p).startswith(str(Path(__file__).resolve().parent.parent))
    assert os.path.expanduser("~") in str(p)


def test_worker_dies_with_a_killed_supervisor(tmp_path):
    import signal
    import time

    log, pid = tmp_path / "w.log", tmp_path / "w.pid"
    p = subprocess.Popen([sys.executable, str(SUPERVISE), "--log", str(log), "--pidfile", str(pid), "--",
                          "sh", "-c", "echo child $$; exec sleep 60"])
    try:
        deadline = time.monotonic() + 10
        while (not log.exists() or "child " not in log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(log.read_text().split("child ")[1].split()[0])
        p.send_signal(signal.SIGKILL)
        p.wait(5)
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    finally:
        if p.poll() is None:
            p.kill()


class _ForgetfulDagu:
    """A Dagu API stand-in that answers an enqueue with an id and then forgets the first N runs,
    as Dagu 1.30.2 did under four simultaneous submissions on a loaded lane."""

    def __init__(self, forget: int) -> None:
        self.forget = forget
        self.enqueued: list[str] = []
        self.kept: set[str] = set()

    def enqueue(self, name, params=None):
        rid = f"run-{len(self.enqueued)}"
        self.enqueued.append(rid)
        if self.forget > 0:
            self.forget -= 1
        else:
            self.kept.add(rid)
        return rid

    def status(self, name, run_id):
        from dagu.api import DaguApiError
        if run_id not in self.kept:
            raise DaguApiError("no such run", 404)
        return object()


def test_submit_enqueues_again_when_dagu_keeps_no_record_of_the_run():
    from dagu import runs
    from lanes.base.errors import NevError
    wf = runs.Workflow("queued", "queue: global\n", {"queue": "global"})
    said: list[str] = []
    api = _ForgetfulDagu(forget=1)
    rid, queued = runs.submit(api, wf, {}, confirm_wait=0.1, sleep=lambda s: None, say=said.append)  # type: ignore[arg-type]
    assert (rid, queued) == ("run-1", True) and api.enqueued == ["run-0", "run-1"]
    assert said and "lost enqueued run run-0" in said[0]
    api = _ForgetfulDagu(forget=0)
    assert runs.submit(api, wf, {}, confirm_wait=0.1, sleep=lambda s: None)[0] == "run-0"  # type: ignore[arg-type]
    assert api.enqueued == ["run-0"]
    api = _ForgetfulDagu(forget=2)
    try:
        runs.submit(api, wf, {}, confirm_wait=0.1, sleep=lambda s: None)  # type: ignore[arg-type]
        raise AssertionError("a run Dagu never records must be an error")
    except NevError as e:
        assert "keeps no record" in e.message


class _BlinkingDagu:
    """A Dagu API stand-in that does not know a run for `gap` reads, then knows it ended, as a
    distributed Dagu 1.30.2 answered 404 for a moment while moving a queued run to its worker."""

    def __init__(self, gap: int) -> None:
        self.gap = gap
        self.reads = 0

    def status(self, name, run_id):
        from dagu.api import DaguApiError, parse_run
        self.reads += 1
        if self.reads <= self.gap:
            raise DaguApiError("no such run", 404)
        return parse_run({"dagRunId": run_id, "name": name, "status": 4, "statusLabel": "succeeded",
                          "nodes": []})


def test_follow_reads_again_a_run_dagu_does_not_know_for_a_moment_and_not_for_ever():
    from dagu import runs
    from dagu.api import DaguApiError
    lines: list[str] = []
    api = _BlinkingDagu(gap=3)
    st = runs.follow(api, "wf", "r1", 60, 1.0, lines.append, sleep=lambda s: None)
    assert st.status == "succeeded" and lines == ["run r1: succeeded"]
    gap = int(runs.LOST_GRACE_S / 0.5) + 2
    try:
        api = _BlinkingDagu(gap=gap)
        runs.follow(api, "wf", "r1", 60, 1.0, lines.append, sleep=lambda s: None)
        raise AssertionError("a run Dagu never knows again must be an error")
    except DaguApiError as e:
        assert e.status == 404


class _WakingDagu:
    """A Dagu API stand-in that answers its health check only from the `after`-th read on (a lane
    rebooting: its Dagu started again by the lane's @reboot line)."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.reads = 0

    def health(self):
        from dagu.api import DaguApiError
        self.reads += 1
        if self.reads < self.after:
            raise DaguApiError("Dagu API GET /health did not answer: connection refused")
        return {"status": "healthy"}


def test_submit_waits_for_a_lanes_dagu_that_does_not_answer_yet_then_gives_up_with_3(monkeypatch):
    from dagu.layout import Layout
    from dagu.service import LaneDagu
    from lanes.base.errors import NevError
    from lanes.lanesfile import Lane
    monkeypatch.setattr("time.sleep", lambda s: None)
    conn = None
    ld = LaneDagu(Lane(0, "lane@h"), conn, Layout("/home/lane/dagu"), 1, 2)
    said: list[str] = []
    api = _WakingDagu(after=4)
    ld.answering(api, 30, said.append)  # type: ignore[arg-type]
    assert api.reads == 4
    assert said[0].startswith("Dagu on lane 0 does not answer; waiting up to 30 s")
    assert said[-1] == "Dagu on lane 0 answers"
    said.clear()
    ld.answering(_WakingDagu(after=1), 30, said.append)  # type: ignore[arg-type]
    assert said == []                                   # healthy at once: nothing said
    ticks = iter(range(0, 10_000, 10))
    monkeypatch.setattr("time.monotonic", lambda: float(next(ticks)))
    try:
        ld.answering(_WakingDagu(after=10_000), 30, said.append)  # type: ignore[arg-type]
        raise AssertionError("a Dagu that never answers must be an error")
    except NevError as e:
        assert e.exit_code == 3 and "did not answer for 30 s; nothing was submitted" in e.message
