"""Snapshot and restore against real parts: sshd on loopback (as root), Debian's HAProxy in
front of a real HTTP pool, a LiteLLM-style gateway config with its custom-auth keys file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from lanes.base import gitrun
from lanes.base.ssh import Connection, Target
from rig.snapshot.capture import FileRec
from rig.snapshot.store import LocalStore
from tests.helpers import snapshot_parts
from tests.helpers.local_sshd import free_port
from tests.helpers.snapshot_parts import BATCH_KEY, MASTER_KEY

pytestmark = pytest.mark.parts  # starts HAProxy and sshd for every role here


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    p = snapshot_parts.start(tmp_path_factory.mktemp("snaprig"))
    yield p
    p.stop()


def fresh(parts, tag: str) -> dict[str, str]:
    """A notes folder of its own for one test, so labels never collide."""
    return {"NEV_RIG_NOTES": str(parts.dir / f"notes-{tag}")}


def ok(r) -> str:
    assert r.returncode == 0, r.stderr
    return r.stdout


def forge_label(parts, env: dict[str, str], base: str, new: str, path: Path, text: str) -> None:
    """Copy snapshot `base` to `new` with `path` holding `text`, its hash fixed up (a consistent snapshot)."""
    st = LocalStore(Path(env["NEV_RIG_NOTES"]))
    m = st.read_manifest(base)
    data = text.encode()
    sha = st.put_blob(data)
    for hosts in m.roles.values():
        for s in hosts.values():
            s.files = [FileRec(f.path, False, f.uid, f.gid, f.user, f.group, f.mode, len(data), sha)
                       if f.path == str(path) else f for f in s.files]
    m.label = new
    st.write_manifest(m)


def leftovers(d: Path) -> list[str]:
    return [p.name for p in d.iterdir() if ".nev-" in p.name]


def test_restore_brings_back_file_owner_mode_and_haproxy_serves_pool(parts):
    env = fresh(parts, "roundtrip")
    original = parts.haproxy_cfg.read_bytes()
    ok(parts.nev("rig", "snapshot", "known-good", env=env))
    # a working change, applied by hand the way the seed's change log describes
    parts.haproxy_cfg.write_text(parts.haproxy_text().replace("maxconn 8", "maxconn 16"))
    os.chown(parts.haproxy_cfg, 0, 106)
    os.chmod(parts.haproxy_cfg, 0o640)
    ok(parts.nev("rig", "snapshot", "maxconn-16", env=env))
    assert "maxconn 16" in ok(parts.nev("rig", "diff", "known-good", "maxconn-16", env=env))
    pid_before = parts.haproxy_pid()

    out = ok(parts.nev("rig", "restore", "known-good", "proxy", env=env))

    assert "reloaded, healthy" in out
    assert parts.haproxy_cfg.read_bytes() == original
    st_ = parts.haproxy_cfg.stat()
    assert (st_.st_uid, st_.st_gid, stat.S_IMODE(st_.st_mode)) == (0, 0, 0o644)
    assert parts.haproxy_pid() != pid_before  # a real reload: a new HAProxy process took over
    assert parts.wait_healthy(5)
    assert "pool-a" in parts.through_proxy()
    assert leftovers(parts.haproxy_cfg.parent) == []
    log = (Path(env["NEV_RIG_NOTES"]) / "changelog.md").read_text()
    assert "snapshot known-good" in log and "restore known-good [proxy]" in log and "maxconn-16" in log
    assert "no differences" in ok(parts.nev("rig", "diff", "known-good", env=env))


def test_restore_of_config_failing_haproxy_check_replaces_nothing(parts):
    env = fresh(parts, "broken")
    ok(parts.nev("rig", "snapshot", "good", env=env))
    forge_label(parts, env, "good", "broken", parts.haproxy_cfg,
                parts.haproxy_text() + "backend broken\n    server b1 127.0.0.1:1 chekc\n")
    before, pid = parts.haproxy_cfg.read_bytes(), parts.haproxy_pid()

    r = parts.nev("rig", "restore", "broken", env=env)

    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("nev: restore broken: role proxy failed at validate")
    assert "chekc" in line and "nothing was replaced" in line  # haproxy -c's own words
    assert parts.haproxy_cfg.read_bytes() == before and parts.haproxy_pid() == pid
    assert leftovers(parts.haproxy_cfg.parent) == []
    assert parts.healthy()
    assert "FAILED: restore broken: role proxy failed at validate" in \
        (Path(env["NEV_RIG_NOTES"]) / "changelog.md").read_text()


def test_failed_health_check_after_reload_puts_previous_files_back(parts):
    env = fresh(parts, "health")
    ok(parts.nev("rig", "snapshot", "serving", env=env))
    dead = free_port()  # passes haproxy -c, but the pool behind it is not there
    forge_label(parts, env, "serving", "dead-pool", parts.haproxy_cfg, parts.haproxy_text(be=dead))
    before = parts.haproxy_cfg.read_bytes()

    r = parts.nev("rig", "restore", "dead-pool", "proxy", env=env)

    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert "role proxy failed at health check" in line
    assert "previous files put back, reloaded and healthy again" in line
    assert parts.haproxy_cfg.read_bytes() == before
    assert str(dead) not in parts.haproxy_cfg.read_text()
    assert parts.wait_healthy(5) and "pool-a" in parts.through_proxy()
    assert leftovers(parts.haproxy_cfg.parent) == []


def test_master_key_is_held_but_never_shown_in_diff_logs_or_change_log(parts):
    env = fresh(parts, "secrets")
    notes = Path(env["NEV_RIG_NOTES"])
    original = parts.gateway_cfg.read_text()
    ok(parts.nev("rig", "snapshot", "gw-before", "gateway", env=env))
    rotated = "rotated-master-4b1d9e7a22c5"
    parts.gateway_cfg.write_text(original.replace(MASTER_KEY, rotated).replace("num_retries: 0", "num_retries: 1"))
    runs = [parts.nev("-v", "rig", "diff", "gw-before", env=env),
            parts.nev("-v", "rig", "snapshot", "gw-after", "gateway", env=env),
            parts.nev("-v", "rig", "diff", "gw-before", "gw-after", env=env),
            parts.nev("-v", "rig", "restore", "gw-before", "gateway", "--dry-run", env=env),
            parts.nev("-v", "rig", "restore", "gw-before", "gateway", env=env)]
    for r in runs:
        assert r.returncode == 0, r.stderr
        for secret in (MASTER_KEY, rotated, BATCH_KEY):
            assert secret not in r.stdout and secret not in r.stderr
    assert "-  master_key: ***" in runs[0].stdout and "+  master_key: ***" in runs[0].stdout
    assert "+  num_retries: 1" in runs[0].stdout
    assert parts.gateway_cfg.read_text() == original  # the restore needed the key, and had it
    log = (notes / "changelog.md").read_text()
    assert "restore gw-before [gateway]" in log
    assert MASTER_KEY not in log and rotated not in log
    objects = list((notes / "snapshots" / "objects").iterdir())
    assert any(MASTER_KEY.encode() in p.read_bytes() for p in objects)
    for p in [*objects, *(notes / "snapshots" / "labels").iterdir(), notes / "changelog.md"]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    host_objects = list((parts.host_store / "objects").iterdir())
    assert any(MASTER_KEY.encode() in p.read_bytes() for p in host_objects)
    assert stat.S_IMODE(parts.host_store.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in host_objects)
    assert (parts.host_store / "labels" / "gw-before.json").exists()


def test_identical_snapshots_share_storage_and_labels_are_never_overwritten(parts):
    env = fresh(parts, "dedupe")
    ok(parts.nev("rig", "snapshot", "one", env=env))
    objects = Path(env["NEV_RIG_NOTES"]) / "snapshots" / "objects"
    n = len(list(objects.iterdir()))
    assert "same content as one" in ok(parts.nev("rig", "snapshot", "two", env=env))
    assert len(list(objects.iterdir())) == n
    again = parts.nev("rig", "snapshot", "one", env=env)
    assert again.returncode == 1 and "labels are never overwritten" in again.stderr
    rows = json.loads(ok(parts.nev("rig", "snapshots", "--json", env=env)))
    assert [r["label"] for r in rows] == ["one", "two"] and rows[0]["roles"] == ["proxy", "gateway"]


def test_restore_refuses_snapshot_whose_files_do_not_match_manifest(parts):
    env = fresh(parts, "tamper")
    ok(parts.nev("rig", "snapshot", "t", "proxy", env=env))
    st = LocalStore(Path(env["NEV_RIG_NOTES"]))
    sha = st.read_manifest("t").roles["proxy"][parts.host].files[0].sha256
    (st.objects / sha).write_bytes(b"global\n")
    before, pid = parts.haproxy_cfg.read_bytes(), parts.haproxy_pid()
    r = parts.nev("rig", "restore", "t", env=env)
    assert r.returncode == 1
    assert "snapshot t is damaged" in r.stderr and "does not match its manifest hash" in r.stderr
    assert parts.haproxy_cfg.read_bytes() == before and parts.haproxy_pid() == pid


def test_dry_run_shows_diff_and_validates_without_replacing(parts):
    env = fresh(parts, "dry")
    original = parts.haproxy_cfg.read_bytes()
    ok(parts.nev("rig", "snapshot", "d", "proxy", env=env))
    try:
        parts.haproxy_cfg.write_text(parts.haproxy_text() + "# tried by hand\n")
        out = ok(parts.nev("rig", "restore", "d", "--dry-run", env=env))
        assert "-# tried by hand" in out and "validate passed" in out
        assert parts.haproxy_cfg.read_text().endswith("# tried by hand\n")
        assert leftovers(parts.haproxy_cfg.parent) == []
        assert not (Path(env["NEV_RIG_NOTES"]) / "changelog.md").read_text().count("restore d")
    finally:
        parts.haproxy_cfg.write_bytes(original)


def test_snapshot_refuses_notes_in_git_worktree_or_on_nas(parts, tmp_path):
    gitrun.init(tmp_path / "repo")
    r = parts.nev("rig", "snapshot", "x", env={"NEV_RIG_NOTES": str(tmp_path / "repo" / "notes")})
    assert r.returncode == 1 and "inside the git worktree" in r.stderr
    assert not (tmp_path / "repo" / "notes").exists()
    nas = tmp_path / "nas"
    nas.mkdir()
    r = parts.nev("rig", "snapshot", "x", env={"NEV_RIG_NOTES": str(nas / "notes"), "NEV_LANE_SHARED": str(nas)})
    assert r.returncode == 1 and "on the NAS" in r.stderr
    assert not (nas / "notes").exists()


def test_snapshot_refuses_host_store_in_git_worktree(parts, tmp_path):
    gitrun.init(tmp_path / "repo")
    rig = json.loads(parts.rig_file.read_text())
    rig["host_store"] = str(tmp_path / "repo" / "snaps")
    rf = tmp_path / "rig.local.json"
    rf.write_text(json.dumps(rig))
    env = {**fresh(parts, "hostgit"), "NEV_RIG_FILE": str(rf)}
    r = parts.nev("rig", "snapshot", "x", env=env)
    assert r.returncode == 1 and "refusing to keep snapshots on" in r.stderr and "git worktree" in r.stderr
    assert not (tmp_path / "repo" / "snaps").exists()
    assert not (Path(env["NEV_RIG_NOTES"]) / "snapshots" / "labels" / "x.json").exists()


def test_roles_are_reached_through_the_declared_jump_host(parts, tmp_path):
    rig = json.loads(parts.rig_file.read_text())
    rig["jump"] = parts.host
    rf = tmp_path / "rig.local.json"
    rf.write_text(json.dumps(rig))
    env = {**fresh(parts, "jump"), "NEV_RIG_FILE": str(rf)}
    assert "2 role(s)" in ok(parts.nev("rig", "snapshot", "via-jump", env=env))
    # and the choke point's jump support on its own: a channel through the jump connection
    t = Target("127.0.0.1", parts.sshd.user, parts.sshd.port)
    with Connection(t, parts.sshd.known_hosts, parts.sshd.client_key) as jump:
        with Connection(t, parts.sshd.known_hosts, parts.sshd.client_key, via=jump) as c:
            assert c.run("echo through").out == "through\n"


def test_unknown_role_and_unknown_label_are_one_line_errors(parts):
    env = fresh(parts, "errors")
    r = parts.nev("rig", "snapshot", "x", "nosuch", env=env)
    assert r.returncode == 2 and "no role 'nosuch'" in r.stderr and "proxy, gateway" in r.stderr
    r = parts.nev("rig", "restore", "never-taken", env=env)
    assert r.returncode == 1 and "no snapshot labelled never-taken" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_restore_takes_objects_lost_locally_from_the_hosts_copy(parts):
    env = fresh(parts, "hostcopy")
    original = parts.haproxy_cfg.read_bytes()
    ok(parts.nev("rig", "snapshot", "h", "proxy", env=env))
    st = LocalStore(Path(env["NEV_RIG_NOTES"]))
    sha = st.read_manifest("h").roles["proxy"][parts.host].files[0].sha256
    (st.objects / sha).unlink()
    try:
        parts.haproxy_cfg.write_text(parts.haproxy_text() + "# drift\n")
        r = parts.nev("rig", "restore", "h", env=env)
        assert r.returncode == 0, r.stderr
        assert "fetched from the hosts' copies" in r.stderr
        assert parts.haproxy_cfg.read_bytes() == original and (st.objects / sha).exists()
    finally:
        parts.haproxy_cfg.write_bytes(original)


def test_file_absent_at_snapshot_is_removed_by_restore_and_recorded_files_recreated(parts, tmp_path):
    extra = parts.gateway_cfg.parent / "extra.env"
    rig = json.loads(parts.rig_file.read_text())
    rig["roles"]["gateway"]["files"].append(str(extra))
    rf = tmp_path / "rig.local.json"
    rf.write_text(json.dumps(rig))
    env = {**fresh(parts, "absent"), "NEV_RIG_FILE": str(rf)}
    keys = parts.keys_file.read_bytes()
    ok(parts.nev("rig", "snapshot", "no-extra", "gateway", env=env))
    try:
        extra.write_text("LITELLM_LOG=DEBUG\n")
        parts.keys_file.unlink()
        out = ok(parts.nev("rig", "restore", "no-extra", env=env))
        assert "extra.env removed (absent in the snapshot)" in out and "keys.json created (root:root 0600)" in out
        assert not extra.exists()
        assert parts.keys_file.read_bytes() == keys and stat.S_IMODE(parts.keys_file.stat().st_mode) == 0o600
        assert (parts.dir / "gateway.reloaded").exists()
    finally:
        extra.unlink(missing_ok=True)
        parts.keys_file.write_bytes(keys)
        os.chmod(parts.keys_file, 0o600)
