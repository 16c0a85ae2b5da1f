"""`nev rig provision-sudo` on the rig-in-a-box: gpu0's host has the seed's admin account
(nevadm, no general sudo) and its own sudo configuration (a box folder over /etc/sudoers.d in that
host's mount namespace). The admin logs in over SSH through the jump host, host keys pinned, and
asks sudo as the serving commands do (`sudo -n UNIT VERB`)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rig import rigfile
from rig.box import plan
from rig.serving import provision, sudoers
from rig.snapshot.context import Context
from rig.snapshot.hosts import Hosts
from rig.snapshot.record import take
from rig.snapshot.restore import RestoreFailed

ROOT = Path(__file__).resolve().parent.parent
DROP_IN = sudoers.path(plan.ADMIN_POOL)


@pytest.fixture
def admin_host(box_env, tmp_path, monkeypatch):
    """(box, env for nev, run(user, command) on gpu0's host over SSH); the box's drop-in as the
    generator writes it again after each test."""
    box = box_env
    rig = json.loads(Path(box.rig_file).read_text())
    rig["host_store"] = str(tmp_path / "hoststore")           # the hosts' copies of the snapshots
    rf = tmp_path / "rig.local.json"
    rf.write_text(json.dumps(rig))
    env = {**box.env, "NEV_RIG_FILE": str(rf), "NEV_RIG_NOTES": str(tmp_path / "notes")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    addr = box.pools[plan.ADMIN_POOL].addr

    def run(user: str, command: str) -> tuple[int, str]:
        with Hosts(rigfile.load(rf)) as hosts:
            res = hosts.get(f"{user}@{addr}").run(command, timeout=60)
        return res.exit_status, res.out + res.err

    yield box, env, run
    r = nev(env, "rig", "provision-sudo", plan.ADMIN_POOL)
    assert r.returncode == 0, r.stdout + r.stderr


def nev(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env, "PYTHONPATH": str(ROOT)})


def unit(box, pool: str = plan.ADMIN_POOL, replica: str = "r0") -> str:
    return str(Path(box.dir) / "pools" / "units" / f"{pool}-{replica}")


def test_provision_sudo_lets_the_admin_run_exactly_its_unit_commands_and_refuses_another(admin_host):
    box, env, run = admin_host
    assert run("root", f"rm -f {DROP_IN}")[0] == 0               # the seed's state: no sudo at all
    code, out = run(plan.ADMIN_USER, f"sudo -n {unit(box)} status")
    assert code != 0 and "password is required" in out
    r = nev(env, "rig", "provision-sudo", plan.ADMIN_POOL)
    assert r.returncode == 0, r.stdout + r.stderr
    label = next(w.rstrip(":") for w in r.stdout.split() if w.startswith("before-provision-sudo-gpu0-"))
    assert "3 unit command(s)" in r.stdout
    assert f"{DROP_IN} created (root:root 0440) (validated, moved, healthy)" in r.stdout
    assert run("root", f"stat -c '%U:%G %a' {DROP_IN}") == (0, "root:root 440\n")
    assert run("root", "visudo -c")[0] == 0                     # the whole configuration, the drop-in in it
    # allowed: the unit's own commands, exactly
    assert run(plan.ADMIN_USER, f"sudo -n {unit(box)} status") == (0, "")
    assert run(plan.ADMIN_USER, f"sudo -n -l {unit(box)} stop")[0] == 0
    # refused: anything else, the same unit with another verb or another unit
    for other in ("/bin/true", f"{unit(box)} restart", f"{unit(box)} status --all", f"{unit(box)}",
                  f"{unit(box, 'gpu2', 'r0')} status", "/bin/sh -c id"):
        code, out = run(plan.ADMIN_USER, f"sudo -n {other}")
        assert code == 1 and "password is required" in out, (other, out)
    # the host's sudo configuration is its own: this machine's has no such drop-in
    assert not Path(DROP_IN).exists()
    log = (Path(env["NEV_RIG_NOTES"]) / "changelog.md").read_text()
    assert f"provision-sudo {plan.ADMIN_POOL}" in log and "- result: done" in log
    # the snapshot is the undo: the host without the drop-in again, the admin refused again
    r = nev(env, "rig", "restore", label, sudoers.role_name(plan.ADMIN_POOL))
    assert r.returncode == 0, r.stdout + r.stderr
    assert run("root", f"test -e {DROP_IN}")[0] == 1
    assert run(plan.ADMIN_USER, f"sudo -n {unit(box)} status")[0] == 1


def test_serving_commands_on_the_admin_host_run_through_sudo(admin_host):
    box, env, run = admin_host
    r = nev(env, "rig", "stop", f"{plan.ADMIN_POOL}/r0", "--force")
    assert r.returncode == 0, r.stderr
    assert f"nevadm@{box.pools[plan.ADMIN_POOL].addr}: sudo -n {unit(box)} stop: stopped" in r.stdout
    assert run("root", f"{unit(box)} status")[0] != 0
    r = nev(env, "rig", "start", f"{plan.ADMIN_POOL}/r0")
    assert r.returncode == 0, r.stderr
    assert run("root", f"{unit(box)} status")[0] == 0


def test_a_drop_in_visudo_refuses_is_never_installed_and_the_old_one_stays(admin_host, tmp_path):
    box, env, run = admin_host
    before = run("root", f"sha256sum {DROP_IN}")
    assert before[0] == 0
    rig = rigfile.load(Path(env["NEV_RIG_FILE"]))
    said: list[str] = []

    def broken(role):
        return {h: t.replace("NOPASSWD:", "NOPASSWD") for h, t in sudoers.drop_ins(role).items()}

    with pytest.raises(RestoreFailed) as e:
        provision.provision(rig, plan.ADMIN_POOL, tmp_path / "notes", said.append,
                            lambda label: take(Context.load(), label, (sudoers.role_name(plan.ADMIN_POOL),),
                                               said.append), render=broken)
    msg = e.value.message
    assert "failed at validate" in msg and "visudo -cf" in msg and "syntax error" in msg
    assert "nothing was replaced" in msg
    assert run("root", f"sha256sum {DROP_IN}") == before
    assert run("root", "ls -A /etc/sudoers.d")[1].split() == [Path(DROP_IN).name]   # no staged copy left
    assert run(plan.ADMIN_USER, f"sudo -n {unit(box)} status") == (0, "")
    expected = hashlib.sha256(sudoers.drop_ins(rig.serving[plan.ADMIN_POOL])[
        f"root@{box.pools[plan.ADMIN_POOL].addr}"].encode()).hexdigest()
    assert before[1].split()[0] == expected
    assert "- result: FAILED: provision-sudo gpu0: role sudo-gpu0 failed at validate" in \
        (tmp_path / "notes" / "changelog.md").read_text()


def test_provision_sudo_refuses_a_replica_and_a_role_without_sudo_replicas(admin_host):
    box, env, run = admin_host
    r = nev(env, "rig", "provision-sudo", f"{plan.ADMIN_POOL}/r0")
    assert r.returncode == 2 and "takes a serving role, not one replica" in r.stderr
    r = nev(env, "rig", "provision-sudo", "gpu2")
    assert r.returncode == 1 and "serving.gpu2 has no replica with \"sudo\": true" in r.stderr
    r = nev(env, "rig", "provision-sudo", plan.ADMIN_POOL, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert f"nevadm ALL=(root) NOPASSWD: {unit(box)} start" in r.stdout and "nothing would be replaced" in r.stdout
    assert run("root", f"rm -f {DROP_IN}")[0] == 0
    r = nev(env, "rig", "provision-sudo", plan.ADMIN_POOL, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "would change /etc/sudoers.d/nev-serving-gpu0 created (root:root 0440) (validate passed)" in r.stdout
    assert run("root", f"test -e {DROP_IN}")[0] == 1                  # a dry run replaces nothing
