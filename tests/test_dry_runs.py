"""`--dry-run` on the commands that change a lane, a host or the forge (issue 36): each says what
it would do and changes nothing. Each host, lane and forge is a real stand-in here: a TCP listener
on loopback that counts the connections it is offered (an SSH write needs one), and a bare git
repository as the forge. The same command without `--dry-run` reaches the stand-in (it fails
after, the listener speaks no SSH), so a count of 0 means the dry run did not try."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.job_helpers import git, make_checkout, write_manifest

ROOT = Path(__file__).resolve().parents[1]


class Counter:
    """A loopback listener counting the connections made to it (each closed at once)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.count += 1
            c.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def host():
    c = Counter()
    yield c
    c.close()


def env_for(tmp: Path, host: Counter, **extra: str) -> dict[str, str]:
    lanes = tmp / "lane.local.json"
    lanes.write_text(json.dumps({"lanes": [{"ssh": f"u@127.0.0.1:{host.port}"}]}))
    (tmp / "known_hosts").write_text("")
    (tmp / "no-key").write_text("not a key: the connection is made, the login never")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "LANE_"))}
    env.update({"PYTHONPATH": str(ROOT), "HOME": str(tmp / "home"),
                "NEV_STATE_DIR": str(tmp / "state"), "NEV_LANES_FILE": str(lanes),
                "NEV_KNOWN_HOSTS": str(tmp / "known_hosts"), "NEV_SSH_KEY": str(tmp / "no-key"),
                "NEV_SSH_CONNECT_TIMEOUT": "5", **extra})
    return env


def nev(env: dict[str, str], *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_lane_provision_dry_run_names_the_lane_and_steps_and_connects_to_none(tmp_path, host):
    env = env_for(tmp_path, host)
    r = nev(env, "lane", "provision", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == (f"would provision lane 0 (root@127.0.0.1:{host.port}), "
                        "each step only where its check fails:")
    assert len(lines) > 5 and all(ln.startswith("  ") for ln in lines[1:])
    assert host.count == 0
    assert nev(env, "lane", "provision").returncode != 0 and host.count >= 1


def test_dagu_up_dry_run_names_the_lane_and_steps_and_connects_to_none(tmp_path, host):
    env = env_for(tmp_path, host)
    r = nev(env, "dagu", "up", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"would set up Dagu on lane 0 (u@127.0.0.1:{host.port}) "
                               "(single mode)"), r.stdout
    assert "binary (sha256 checked" in r.stdout and "config.yaml" in r.stdout
    d = nev(env, "dagu", "up", "--distributed", "--dry-run")
    assert d.returncode == 0 and "a worker on every lane" in d.stdout, d.stderr
    assert host.count == 0
    assert nev(env, "dagu", "up").returncode != 0 and host.count >= 1


def test_rig_snapshot_dry_run_names_hosts_files_commands_and_writes_no_notes(tmp_path, host):
    rig = tmp_path / "rig.local.json"
    rig.write_text(json.dumps({"roles": {"proxy": {
        "hosts": [f"root@127.0.0.1:{host.port}"], "files": ["/etc/haproxy/haproxy.cfg"],
        "commands": ["haproxy -v"]}}}))
    notes = tmp_path / "notes"
    env = env_for(tmp_path, host, NEV_RIG_FILE=str(rig), NEV_RIG_NOTES=str(notes))
    r = nev(env, "rig", "snapshot", "before-change", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"would record proxy on root@127.0.0.1:{host.port} under before-change: "
        "1 file(s), 1 command(s)",
        "  file /etc/haproxy/haproxy.cfg", "  command haproxy -v"]
    assert host.count == 0 and not notes.exists()
    assert nev(env, "rig", "snapshot", "before-change", "nope", "--dry-run").returncode == 2
    assert nev(env, "rig", "snapshot", "before-change").returncode != 0 and host.count >= 1


def test_job_submit_dry_run_pushes_nothing_and_connects_to_no_lane(tmp_path, host):
    base = make_checkout(tmp_path / "dev")
    manifest = write_manifest(tmp_path / "job.yaml", base,
                              [{"name": "a", "kind": "command", "command": "true"}])
    forge = tmp_path / "forge.git"
    subprocess.run(["git", "init", "-q", "--bare", str(forge)], check=True)
    env = env_for(tmp_path, host, NEV_FORGE_URL=str(forge), NEV_LANE_GIT_URL=str(forge))
    r = nev(env, "job", "submit", str(manifest), "--dry-run", cwd=tmp_path / "dev")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"would push job/demo ({base[:12]}) to {forge}"), r.stdout
    assert f"would start workflow job on lane 0 (u@127.0.0.1:{host.port}, Dagu)" in r.stdout
    assert git(forge, "for-each-ref") == "" and host.count == 0
    assert not (tmp_path / "state" / "jobs.json").exists()
    # the real submission pushes to the forge, then reaches for the lane
    assert nev(env, "job", "submit", str(manifest), cwd=tmp_path / "dev").returncode != 0
    assert "refs/heads/job/demo" in git(forge, "for-each-ref") and host.count >= 1
