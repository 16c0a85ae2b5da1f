"""`nev dagu` over a real sshd on loopback with the real Dagu 1.30.2: what the box tests do not cover
(a refusal that needs no lane, the NAS source, stop-run, NEV_DAGU_WAIT, clean-jobs, prune-mirror)."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from dagu.install import show_hash
from dagu.layout import DAGU_SHA256
from tests.helpers import local_sshd
from tests.helpers.dagu_helpers import (
    DAGU,
    Api,
    base_env,
    nev,
    ok,
    password_from_config,
    wait_for,
    write_lanes_file,
)

pytestmark = pytest.mark.parts  # starts the Dagu binary behind a local sshd here


@dataclass
class LocalLane:
    env: dict[str, str]
    root: Path  # NEV_DAGU_DIR
    lane_root: Path
    port: int
    key: str
    sshd: local_sshd.LocalSshd

    @property
    def api(self) -> Api:
        return Api(f"http://127.0.0.1:{self.port}", password_from_config((self.root / "home/config.yaml").read_text()))


def make_env(tmp: Path, sshd: local_sshd.LocalSshd, dagu_dir: Path, port: int, **extra: str) -> dict[str, str]:
    lanes = write_lanes_file(tmp / "lanes.json", [{"ssh": f"{sshd.user}@127.0.0.1:{sshd.port}",
                                                   "root": str(tmp / "lane-root")}])
    return base_env(NEV_LANES_FILE=str(lanes), NEV_KNOWN_HOSTS=str(sshd.known_hosts),
                    NEV_SSH_KEY=str(sshd.client_key), NEV_DAGU_DIR=str(dagu_dir), NEV_DAGU_PORT=str(port),
                    NEV_DAGU_COORD_PORT=str(local_sshd.free_port()), NEV_DAGU_POLL="1",
                    NEV_LANE_SHARED=str(tmp / "nas"), **extra)


@pytest.fixture(scope="module")
def lane(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dagu-lane")
    sshd = local_sshd.start(tmp / "sshd")
    key = "sk-test-" + secrets.token_hex(20)
    keyfile = tmp / "model-key"
    keyfile.write_text(key + "\n")
    keyfile.chmod(0o600)
    port = local_sshd.free_port()
    env = make_env(tmp, sshd, tmp / "dagu", port, NEV_DAGU_BINARY=DAGU, NEV_MODEL_KEY_FILE=str(keyfile))
    ll = LocalLane(env, tmp / "dagu", tmp / "lane-root", port, key, sshd)
    ok(nev(env, "dagu", "up"))
    yield ll
    nev(env, "dagu", "stop")
    sshd.stop()


def test_up_installs_pinned_binary_and_serves_only_with_password(lane):
    binary = lane.root / "bin/dagu"
    assert hashlib.sha256(binary.read_bytes()).hexdigest() == DAGU_SHA256
    assert stat.S_IMODE(binary.stat().st_mode) == 0o755
    for secret_file in ("home/config.yaml", "home/model-key"):
        assert stat.S_IMODE((lane.root / secret_file).stat().st_mode) == 0o600, secret_file
    assert (lane.root / "home/model-key").read_text() == lane.key
    url = f"http://127.0.0.1:{lane.port}/api/v2"
    assert requests.get(url + "/dag-runs", timeout=5).status_code == 401
    assert requests.get(url + "/dag-runs", auth=("nev", "wrong"), timeout=5).status_code == 401
    assert lane.api.get("/health")["status"] == "healthy"
    cfg = (lane.root / "home/config.yaml").read_text()
    assert "host: 127.0.0.1" in cfg and "lockStaleThreshold: 3s" in cfg



def test_status_reports_healthy(lane):
    r = ok(nev(lane.env, "dagu", "status"))
    assert "healthy" in r.stdout



def test_tampered_binary_on_the_nas_is_refused_on_the_lane(lane, tmp_path):
    nas_copy = Path(lane.env["NEV_LANE_SHARED"]) / "releases/dagu-1.30.2/dagu"
    nas_copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DAGU, nas_copy)
    with nas_copy.open("ab") as f:
        f.write(b"extra")
    fresh = tmp_path / "fresh"
    env = {k: v for k, v in lane.env.items() if k != "NEV_DAGU_BINARY"}
    env.update(NEV_DAGU_DIR=str(fresh), NEV_DAGU_PORT=str(local_sshd.free_port()))
    r = nev(env, "dagu", "up")
    assert r.returncode == 1 and show_hash(DAGU_SHA256) in r.stderr and "on the lane" in r.stderr, r.stderr
    assert not (fresh / "bin/dagu").exists() and not list((fresh / "bin").glob("dagu.new*"))




def test_stop_run_aborts_a_running_run(lane, tmp_path):
    wf = tmp_path / "long.yaml"
    wf.write_text("steps:\n  - name: nap\n    command: sleep 60\n")
    run_id = ok(nev(lane.env, "dagu", "run", str(wf), "--detach")).stdout.strip()
    api = lane.api
    wait_for(lambda: api.run("long", run_id)["statusLabel"] == "running", 10, what="run to start")
    ok(nev(lane.env, "dagu", "stop-run", run_id))
    wait_for(lambda: api.run("long", run_id)["statusLabel"] == "aborted", 15, what="run to abort")
    w = nev(lane.env, "dagu", "watch", "--once", run_id)
    assert w.returncode == 1 and "aborted" in w.stdout


def test_run_gives_up_following_after_dagu_wait(lane, tmp_path):
    wf = tmp_path / "slow.yaml"
    wf.write_text("steps:\n  - name: nap\n    command: sleep 30\n")
    t0 = time.monotonic()
    r = nev(dict(lane.env, NEV_DAGU_WAIT="2"), "dagu", "run", str(wf))
    assert r.returncode == 1 and "still running" in r.stderr and "NEV_DAGU_WAIT" in r.stderr
    assert time.monotonic() - t0 < 15
    ok(nev(lane.env, "dagu", "stop-run", r.stdout.strip()))


def test_clean_jobs_removes_only_that_job(lane):
    work = lane.root / "jobs-work"
    (work / "a/target").mkdir(parents=True)
    (work / "b").mkdir(parents=True)
    ok(nev(lane.env, "dagu", "clean-jobs", "a"))
    assert not (work / "a").exists() and (work / "b").exists()
    r = nev(lane.env, "dagu", "clean-jobs", "../b")
    assert r.returncode == 2 and (work / "b").exists()


def test_prune_mirror_prunes_only_job_and_result_refs_in_the_gates_mirror_and_the_job_mirror(lane, tmp_path):
    """The mirrors as nev makes them: the lane mirror by a real gate (`nev lane run`, fetched from
    the forge URL, no `origin` remote) and the job mirror by the job workflow's prepare step."""
    from jobs import lane_main
    from lanes.base.gitrun import Repo

    forge = tmp_path / "forge.git"
    Repo(tmp_path).git("init", "--bare", "-q", str(forge))
    work = tmp_path / "work"
    Repo(tmp_path).git("init", "-q", "-b", "main", str(work))
    w = Repo(work)
    (work / "f").write_text("x")
    w.git("add", "f")
    w.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    for b in ("main", "job/a", "job/b", "result/a", "feature/x"):
        w.git("push", "-q", str(forge), f"HEAD:refs/heads/{b}")
    env = {**lane.env, "NEV_LANE_GIT_URL": str(forge)}
    ok(nev(env, "lane", "run", str(work), "true"))
    mirror = lane.lane_root / ".git-mirror"
    m = Repo(mirror)
    assert m.git("remote").stdout.strip() == ""  # the gate fetches from the URL: no origin
    job_mirror = lane.root / "job-mirror.git"   # the Dagu layout's job_mirror on this lane
    for job in ("a", "b"):
        assert lane_main.prepare(job, str(forge), str(job_mirror), str(tmp_path / "jobs-work"), str(tmp_path)) == 0
    for b in ("job/a", "result/a", "feature/x"):
        Repo(forge).git("update-ref", "-d", f"refs/heads/{b}")
    r = ok(nev(env, "dagu", "prune-mirror"))
    assert sorted(r.stdout.splitlines()) == sorted([f"pruned {mirror}: refs/heads/job/a",
                                                    f"pruned {mirror}: refs/heads/result/a",
                                                    f"pruned {job_mirror}: refs/heads/job/a"])
    refs = m.git("for-each-ref", "--format=%(refname)").stdout.split()
    assert "refs/heads/job/b" in refs and "refs/heads/feature/x" in refs and "refs/heads/job/a" not in refs
    assert Repo(job_mirror).git("for-each-ref", "--format=%(refname)").stdout.split() == ["refs/heads/job/b"]
    assert ok(nev(env, "dagu", "prune-mirror")).stdout == ""  # nothing left to prune


def test_dagu_processes_are_ours_only(lane):
    pid = int((lane.root / "run/server.pid").read_text())
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmd[0].decode() == str(lane.root / "bin/dagu") and b"start-all" in cmd
    env = dict(x.split(b"=", 1) for x in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in x)
    assert b"NEV_MODEL_KEY_FILE" not in env and lane.key.encode() not in b"".join(env.values())
    assert os.path.basename(env[b"DAGU_HOME"].decode()) == "home"


def test_secret_parameter_refused_with_no_lane_reachable(lane):
    dead = dict(lane.env, NEV_LANE_SSH=f"root@127.0.0.1:{local_sshd.free_port()}")
    r = nev(dead, "dagu", "run", "hello", "--param", "TOKEN=x")
    assert r.returncode == 1 and "looks like a secret" in r.stderr and "nothing was sent" in r.stderr
