"""Per-host SSH keys in the rig file: a `hosts` entry, else the role's, else the file's key."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from lanes.base.errors import ConfigError
from lanes.base.ssh import SshError
from rig import rigfile
from rig.forward.supervise import client_files
from rig.inventory import reach
from rig.snapshot.hosts import Hosts

UNIT = {"start": "u start", "stop": "u stop", "status": "u status"}


def keys(tmp_path: Path, *names: str) -> dict[str, Path]:
    out = {}
    for n in names:
        p = tmp_path / "keys" / n
        p.parent.mkdir(exist_ok=True)
        p.write_text("not read by these tests\n")
        out[n] = p
    return out


def load(tmp_path: Path, **top) -> rigfile.RigFile:
    p = tmp_path / "rig.local.json"
    p.write_text(json.dumps(top))
    return rigfile.load(p)


def arm_rig(tmp_path: Path, **more) -> dict:
    return {"jump": "root@jump-host", "ssh_key": "keys/default",
            "roles": {"proxy": {"hosts": ["root@proxy-host"]},
                      "arm-node": {"hosts": ["root@arm-node-1", "root@arm-node-2:2222"],
                                   "ssh_key": "keys/arm-root"}},
            "serving": {"flash": {"proxy": "proxy", "backend": "be", "aliases": ["a"],
                                  "ssh_key": "keys/arm-admin",
                                  "replicas": {"r0": {"host": "admin@arm-node-1", **UNIT},
                                               "r1": {"host": "admin@arm-node-2", **UNIT}}}},
            **more}


def test_a_host_takes_its_own_key_else_its_roles_else_the_files(tmp_path):
    k = keys(tmp_path, "default", "arm-root", "arm-admin", "node2", "node1-admin", "jump")
    hosts = {"arm-node-2": {"ssh_key": str(k["node2"])},
             "admin@arm-node-1": {"ssh_key": "keys/node1-admin"},
             "jump-host": {"ssh_key": "keys/jump"}}
    rf = load(tmp_path, **arm_rig(tmp_path, hosts=hosts))
    assert rf.key_for("root@proxy-host") == k["default"]         # no role key: the file's
    assert rf.key_for("root@arm-node-1") == k["arm-root"]        # the role's
    assert rf.key_for("admin@arm-node-2") == k["node2"]          # the host's beats the serving's
    assert rf.key_for("root@arm-node-2:2222") == k["node2"]      # and the role's; ports never count
    assert rf.key_for("admin@arm-node-1") == k["node1-admin"]    # an account's own
    assert rf.key_for("arm-node-1") == k["arm-root"]             # root by default
    assert rf.key_for(rf.jump or "") == k["jump"]
    assert rf.key_for("root@elsewhere") == k["default"]


def test_the_serving_roles_key_is_its_replicas_accounts(tmp_path):
    k = keys(tmp_path, "default", "arm-root", "arm-admin")
    rf = load(tmp_path, **arm_rig(tmp_path))
    assert rf.key_for("admin@arm-node-1") == rf.key_for("admin@arm-node-2") == k["arm-admin"]
    assert rf.key_for("root@arm-node-2") == k["arm-root"]
    # the sudoers role nev adds on root@ a sudo replica's host takes no serving key
    rig = arm_rig(tmp_path)
    rig["serving"]["flash"]["replicas"]["r0"]["sudo"] = True
    rf = load(tmp_path, **rig)
    assert rf.roles["sudo-flash"].hosts == ["root@arm-node-1"]
    assert rf.key_for("root@arm-node-1") == k["arm-root"]


def test_without_keys_every_host_takes_the_files_key_or_none(tmp_path):
    assert load(tmp_path, roles={"p": {"hosts": ["root@h"]}}).key_for("root@h") is None
    k = keys(tmp_path, "default")
    rf = load(tmp_path, ssh_key=str(k["default"]), roles={"p": {"hosts": ["root@h"]}})
    assert rf.key_for("root@h") == k["default"]
    # a RigFile made in code (no Keys) answers the same
    in_code = rigfile.RigFile(path=tmp_path, roles={}, ssh_key=k["default"])
    assert in_code.key_for("root@x") == k["default"]


@pytest.mark.parametrize("hosts,field,words", [
    ({"arm-node-1": {"ssh_key": "keys/missing"}}, "hosts.arm-node-1.ssh_key",
     ["missing", "arm-node-1"]),
    ({"arm-node-9": {"ssh_key": "keys/default"}}, "hosts.arm-node-9",
     ["names no host", "arm-node-1"]),
    ({"root@arm-node-1:22": {"ssh_key": "keys/default"}}, "hosts.root@arm-node-1:22",
     ["without a port"]),
    ({"arm-node-1": {"key": "keys/default"}}, "hosts.arm-node-1.key", ["ssh_key"]),
    ({"arm-node-1": {"ssh_key": ""}}, "hosts.arm-node-1.ssh_key", ["empty"]),
])
def test_a_bad_hosts_entry_is_one_error_naming_the_host(tmp_path, hosts, field, words):
    keys(tmp_path, "default", "arm-root", "arm-admin")
    with pytest.raises(ConfigError) as e:
        load(tmp_path, **arm_rig(tmp_path, hosts=hosts))
    msg = e.value.message
    assert f"field {field} " in msg and all(w in msg for w in words), msg
    assert len(e.value.message.splitlines()) == 1


def test_a_roles_missing_key_names_the_role_and_its_hosts(tmp_path):
    keys(tmp_path, "default", "arm-admin")
    with pytest.raises(ConfigError) as e:
        load(tmp_path, **arm_rig(tmp_path))
    assert "field roles.arm-node.ssh_key " in e.value.message
    assert "root@arm-node-1, root@arm-node-2:2222 cannot be reached" in e.value.message


def test_two_roles_giving_one_account_two_keys_is_refused_unless_the_host_has_its_own(tmp_path):
    k = keys(tmp_path, "a", "b")
    roles = {"one": {"hosts": ["root@h1", "root@h2"], "ssh_key": "keys/a"},
             "two": {"hosts": ["root@h2"], "ssh_key": "keys/b"}}
    with pytest.raises(ConfigError) as e:
        load(tmp_path, roles=roles)
    assert "roles.two.ssh_key" in e.value.message and "root@h2" in e.value.message
    assert '"hosts": {"root@h2"' in e.value.message
    rf = load(tmp_path, roles=roles, hosts={"h2": {"ssh_key": "keys/b"}})
    assert (rf.key_for("root@h1"), rf.key_for("root@h2")) == (k["a"], k["b"])


def test_the_forwards_and_the_ansible_export_take_each_hosts_key(tmp_path, monkeypatch):
    k = keys(tmp_path, "default", "arm-root", "arm-admin", "jump", "kh")
    rig = arm_rig(tmp_path, hosts={"jump-host": {"ssh_key": "keys/jump"}}, known_hosts="keys/kh")
    path = tmp_path / "rig.local.json"
    path.write_text(json.dumps(rig))
    assert client_files(rigfile.load(path)) == (k["kh"], k["jump"])
    monkeypatch.setenv("NEV_RIG_FILE", str(path))
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "no-lanes.json"))
    r = reach.load()
    arm = reach.host_vars("arm-node-1", None, r)
    assert arm["ansible_ssh_private_key_file"] == str(k["arm-root"])
    hv = reach.host_vars("proxy-host", None, r)
    assert hv["ansible_ssh_private_key_file"] == str(k["default"])
    args = shlex.split(hv["ansible_ssh_common_args"])
    proxy_cmd = next(a for a in args if a.startswith("ProxyCommand="))
    assert f"IdentityFile={k['jump']}" in shlex.split(proxy_cmd.removeprefix("ProxyCommand="))


def test_a_host_with_its_own_key_is_reached_with_it_through_the_jump(tmp_path):
    """Two real sshd: the jump takes the file's key, the target (another address) only its own."""
    from tests.helpers import local_sshd

    jump = local_sshd.start(tmp_path / "jump")
    target = local_sshd.start(tmp_path / "target", addr="127.0.0.2")
    try:
        own = tmp_path / "target" / "client_ed25519"        # the target's own key, not the jump's
        assert own.read_text() != jump.client_key.read_text()
        kh = tmp_path / "known_hosts"
        kh.write_text(jump.known_hosts.read_text() + target.known_hosts.read_text())
        spec = f"{target.user}@127.0.0.2:{target.port}"
        rig = {"jump": f"{jump.user}@127.0.0.1:{jump.port}", "known_hosts": str(kh),
               "ssh_key": str(jump.client_key), "roles": {"arm": {"hosts": [spec]}}}

        def run(rig: dict) -> str:
            with Hosts(load(tmp_path, **rig)) as hosts:
                return hosts.get(spec).run("echo reached", timeout=30).out.strip()

        with pytest.raises(SshError):                      # the file's key: refused by that host
            run(rig)
        assert run({**rig, "hosts": {"127.0.0.2": {"ssh_key": str(own)}}}) == "reached"
        role = {"hosts": [spec], "ssh_key": str(own)}
        assert run({**rig, "roles": {"arm": role}}) == "reached"
        # the same refusal with the OpenSSH client: the key really is the only one it takes
        cp = subprocess.run(["ssh", "-o", f"UserKnownHostsFile={kh}",
                             "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                             "-o", "IdentitiesOnly=yes",
                             "-i", str(jump.client_key), "-p", str(target.port),
                             f"{target.user}@127.0.0.2", "true"],
                            capture_output=True, text=True, timeout=30)
        assert cp.returncode == 255 and "Permission denied" in cp.stderr
    finally:
        jump.stop()
        target.stop()
