"""A host with its own SSH key on the rig-in-a-box: gpu0's admin account (nevadm, the seed's ARM
nodes' admin) takes only a key of its own, as the seed's ARM nodes do; the rig file gives that
host its key, and the jump host and the proxy keep the box's.

The admin account's keys are the box's file `state.keys_file(box, "admin")` (sshd reads it as
nevadm; root's keys on the service hosts are another file): the test writes the host's own public
key there in place (owner and mode kept) and puts the box's back after. No change to the box."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lanes.base.ssh import SshError
from rig import rigfile
from rig.box import plan, state
from rig.box.netns import run_in
from rig.snapshot.hosts import Hosts

ROOT = Path(__file__).resolve().parent.parent


def nev(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)})


@pytest.fixture
def own_key(box_env, tmp_path):
    """(box, the admin host's address, its own key, the box's rig file as a dict, env): gpu0's
    admin account takes only its own key while the test runs."""
    box = box_env
    key = tmp_path / "id_gpu0_admin"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpu0-admin",
                    "-f", str(key)], check=True)
    rig = json.loads(Path(box.rig_file).read_text())
    for k in ("ssh_key", "known_hosts"):             # the copy lives elsewhere: absolute paths
        if k in rig:
            rig[k] = str(Path(box.rig_file).parent / Path(rig[k]).expanduser())
    env = {**box.env, "NEV_RIG_NOTES": str(tmp_path / "notes")}
    keys = state.keys_file(box.name, "admin")
    before = keys.read_text()
    assert before.strip() and key.with_suffix(".pub").read_text() != before
    with open(keys, "w") as f:                       # in place: nevadm's file, mode 600
        f.write(key.with_suffix(".pub").read_text())
    try:
        yield box, box.pools[plan.ADMIN_POOL].addr, key, rig, env
    finally:
        with open(keys, "w") as f:
            f.write(before)
        r = nev(env, "rig", "start", plan.ADMIN_POOL)      # the box's own rig file
        assert r.returncode == 0, r.stdout + r.stderr


def write(tmp_path: Path, rig: dict) -> Path:
    p = tmp_path / "rig.local.json"
    p.write_text(json.dumps(rig))
    return p


def unit_status(box) -> int:
    unit = Path(box.dir) / "pools" / "units" / f"{plan.ADMIN_POOL}-r0"
    return run_in(box, plan.ADMIN_POOL, [str(unit), "status"]).returncode


def test_a_serving_verb_reaches_a_host_by_its_own_key_the_default_refused(own_key, tmp_path):
    box, addr, key, rig, env = own_key
    admin = f"{plan.ADMIN_USER}@{addr}"
    # the rig file's default key: refused by that host (the jump and the proxy still take it)
    default = write(tmp_path, rig)
    with Hosts(rigfile.load(default)) as hosts, pytest.raises(SshError):
        hosts.get(admin).run("true", timeout=30)
    r = nev({**env, "NEV_RIG_FILE": str(default)}, "rig", "start", f"{plan.ADMIN_POOL}/r0")
    assert r.returncode == 1 and addr in r.stderr, r.stdout + r.stderr
    assert unit_status(box) == 0                                     # nothing changed
    # the host's own key in the rig file: the same verbs reach it
    own = write(tmp_path, {**rig, "hosts": {addr: {"ssh_key": str(key)}}})
    assert rigfile.load(own).key_for(admin) == key
    assert rigfile.load(own).key_for(rig["roles"]["proxy"]["hosts"][0]) == Path(rig["ssh_key"])
    e = {**env, "NEV_RIG_FILE": str(own)}
    r = nev(e, "rig", "stop", f"{plan.ADMIN_POOL}/r0", "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    assert unit_status(box) != 0                                     # the unit really stopped
    r = nev(e, "rig", "start", f"{plan.ADMIN_POOL}/r0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert unit_status(box) == 0 and "answered" in r.stdout
    log = (tmp_path / "notes" / "changelog.md").read_text()
    assert f"stop {plan.ADMIN_POOL}/r0" in log and "- result: done" in log


def test_a_missing_own_key_is_one_line_naming_the_host(own_key, tmp_path):
    box, addr, key, rig, env = own_key
    bad = write(tmp_path, {**rig, "hosts": {addr: {"ssh_key": str(tmp_path / "no-such-key")}}})
    r = nev({**env, "NEV_RIG_FILE": str(bad)}, "rig", "start", f"{plan.ADMIN_POOL}/r0")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert f"hosts.{addr}.ssh_key" in r.stderr and "does not exist" in r.stderr
    assert unit_status(box) == 0
