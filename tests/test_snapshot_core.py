"""The pure parts of snapshot/restore: parsing, planning, refusals, masking, the store, the roles file."""

from __future__ import annotations

import json
import os
import stat

import pytest

from lanes.base import gitrun
from lanes.base.errors import ConfigError, UsageError
from lanes.base.mask import mask
from rig import rigfile
from rig.rigfile import Role
from rig.snapshot import changelog
from rig.snapshot.capture import CaptureError, CmdRec, FileRec, HostState, parse_capture, sha256
from rig.snapshot.diff import mask_text, render
from rig.snapshot.restore import plan_host
from rig.snapshot.store import (
    LocalStore,
    Manifest,
    StoreError,
    check_label,
    fstype_in,
    git_top_of,
    refusal,
)


def rec(path="/etc/x", data=b"a\n", user="root", group="root", mode=0o644) -> FileRec:
    return FileRec(path=path, user=user, group=group, mode=mode, size=len(data), sha256=sha256(data))


# -- parsing ---------------------------------------------------------------------------

def test_capture_parser_refuses_symlink_naming_its_target():
    raw = b"=file /etc/haproxy/haproxy.cfg\nsymlink /srv/cfg/haproxy.cfg\n=end\n"
    with pytest.raises(CaptureError) as e:
        parse_capture(raw, "root@proxy", ["/etc/haproxy/haproxy.cfg"], [])
    assert "symlink to /srv/cfg/haproxy.cfg" in str(e.value)


def test_capture_parser_notices_file_changed_while_read():
    raw = b"=file /etc/x\nstat 0 0 root root 644 10\nYQo=\n=end\n"
    with pytest.raises(CaptureError) as e:
        parse_capture(raw, "h", ["/etc/x"], [])
    assert "changed while it was read" in str(e.value)


def test_capture_parser_refuses_truncated_output():
    raw = b"=file /etc/x\nstat 0 0 root root 644 2\nYQo=\n"
    with pytest.raises(CaptureError) as e:
        parse_capture(raw, "h", ["/etc/x"], [])
    assert "did not finish" in str(e.value) or "ended early" in str(e.value)


def test_capture_parser_keeps_owner_mode_and_command_exit():
    raw = b"=file /etc/x\nstat 0 106 root haproxy 640 2\nYQo=\n=cmd 0\nexit 3\nZGlzYWJsZWQK\n=end\n"
    s = parse_capture(raw, "h", ["/etc/x"], ["systemctl is-enabled x"])
    assert (s.files[0].group, s.files[0].mode, s.files[0].gid) == ("haproxy", 0o640, 106)
    assert s.commands[0].exit == 3 and s.blobs[s.commands[0].sha256] == b"disabled\n"


# -- planning ---------------------------------------------------------------------------

def test_plan_skips_identical_files_and_names_mode_and_owner_changes():
    want = HostState("h", [rec("/a"), rec("/b", mode=0o600), rec("/c")])
    have = HostState("h", [rec("/a"), rec("/b", mode=0o644, group="haproxy"), FileRec("/c", missing=True)])
    plan = plan_host(want, have)
    assert [c.path for c in plan] == ["/b", "/c"]
    assert plan[0].describe() == "/b owner root:haproxy -> root:root, mode 0644 -> 0600"
    assert "created" in plan[1].describe()


def test_plan_removes_file_absent_in_snapshot():
    plan = plan_host(HostState("h", [FileRec("/a", missing=True)]), HostState("h", [rec("/a")]))
    assert plan[0].describe().endswith("removed (absent in the snapshot)")


# -- where a store may live -----------------------------------------------------------

def test_refusal_names_git_worktree_nas_and_network_filesystem():
    assert "git worktree /repo" in refusal("/repo/notes", "/repo", "ext4", [])
    assert "on the NAS" in refusal("/mnt/nas/notes", None, "ext4", ["/mnt/nas"])
    assert "network filesystem (nfs4)" in refusal("/home/me/notes", None, "nfs4", [])
    assert refusal("/mnt/nasty/notes", None, "ext4", ["/mnt/nas"]) is None


def test_git_worktree_found_from_a_folder_not_yet_created(tmp_path):
    gitrun.init(tmp_path / "repo")
    assert git_top_of(tmp_path / "repo" / "a" / "b" / "notes") == str((tmp_path / "repo").resolve())
    assert git_top_of(tmp_path / "elsewhere") is None


def test_fstype_uses_longest_mount_prefix():
    mounts = "/dev/sda1 / ext4 rw 0 0\nnas:/share /mnt/nas nfs4 rw 0 0\n"
    assert fstype_in("/mnt/nas/x", mounts) == "nfs4"
    assert fstype_in("/mnt/nasty", mounts) == "ext4"


def test_store_refuses_notes_inside_git_worktree_and_creates_nothing(tmp_path):
    gitrun.init(tmp_path / "repo")
    with pytest.raises(StoreError) as e:
        LocalStore.open(tmp_path / "repo" / "notes", [])
    assert "inside the git worktree" in str(e.value)
    assert not (tmp_path / "repo" / "notes").exists()


@pytest.mark.parametrize("label", ["", "live", "../x", "a b", "-x", "x" * 101])
def test_bad_labels_are_usage_errors(label):
    with pytest.raises(UsageError):
        check_label(label)


# -- the local store --------------------------------------------------------------------

def test_store_files_are_private_shared_by_content_and_tamper_is_found(tmp_path):
    st = LocalStore.open(tmp_path / "notes", [])
    data = b"master_key: sk-a-secret-value-123\n"
    sha = st.put_blob(data)
    assert st.put_blob(data) == sha and len(list(st.objects.iterdir())) == 1
    f = FileRec("/etc/x", user="root", group="root", mode=0o600, size=len(data), sha256=sha)
    m = Manifest("one", "2026-01-01T00:00:00Z", "me", {"gw": {"h": HostState("h", [f])}})
    st.write_manifest(m)
    for p in [*st.objects.iterdir(), *st.labels.iterdir()]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    for d in (st.notes, st.root, st.objects, st.labels):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert st.verify(m) == []
    os.chmod(st.objects / sha, 0o600)
    (st.objects / sha).write_bytes(data.replace(b"123", b"999"))
    assert st.verify(m) == ["gw/h: /etc/x does not match its manifest hash"]


# -- masking ----------------------------------------------------------------------------

def test_declared_masks_hide_values_the_helper_would_not():
    text = 'salt: Q9vX\n"admin": "hunter22"\nport: 4000\n'
    out = mask_text(text, ["salt", "re:\"admin\": \"([^\"]+)\""])
    assert "Q9vX" not in out and "hunter22" not in out and "port: 4000" in out
    assert "hunter22" not in mask("later log line with hunter22")  # registered for logs too


def test_volatile_fields_do_not_count_as_differences():
    role = Role("p", ["h"], commands=["uptime"], volatile=[r"up \d+ min"])
    o1, o2 = b"up 3 min, load 0.1\n", b"up 9 min, load 0.1\n"
    a = HostState("h", [], [CmdRec("uptime", 0, sha256(o1))], {sha256(o1): o1})
    b = HostState("h", [], [CmdRec("uptime", 0, sha256(o2))], {sha256(o2): o2})
    assert render("x", {"p": {"h": a}}, "y", {"p": {"h": b}}, {"p": role}) == ""


def test_diff_of_a_changed_secret_says_so_without_showing_it():
    old, new = b"master_key: sk-old-0123456789\n", b"master_key: sk-new-9876543210\n"
    role = Role("gw", ["h"], files=["/c"], masks=["master_key"])
    a = HostState("h", [rec("/c", old)], [], {sha256(old): old})
    b = HostState("h", [rec("/c", new)], [], {sha256(new): new})
    out = render("one", {"gw": {"h": a}}, "two", {"gw": {"h": b}}, {"gw": role})
    assert "sk-old" not in out and "sk-new" not in out
    assert "-master_key: ***" in out and "+master_key: ***" in out


# -- change log -------------------------------------------------------------------------

def test_change_log_is_private_and_masked(tmp_path):
    from lanes.base.mask import register_secret
    register_secret("sk-master-in-a-message-42")
    p = changelog.append(tmp_path, changelog.restore_entry("x", ["gw"], ["FAILED: saw sk-master-in-a-message-42"]))
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert "sk-master-in-a-message-42" not in p.read_text() and "FAILED" in p.read_text()


# -- the roles file ---------------------------------------------------------------------

def _rig(tmp_path, roles, **top):
    p = tmp_path / "rig.local.json"
    p.write_text(json.dumps({"roles": roles, **top}))
    return p


@pytest.mark.parametrize("role,field", [
    ({"hosts": ["root@h"], "files": ["etc/x"]}, "roles.p.files[0]"),
    ({"hosts": ["root@h"], "files": ["/x"], "validate": "haproxy -c"}, "roles.p.validate"),
    ({"hosts": ["root@h"], "volatile": ["("]}, "roles.p.volatile[0]"),
    ({"hosts": ["root@h:port"]}, "roles.p.hosts[0]"),
    ({"hosts": ["root@h"], "files": [{"validate": "x {path}"}]}, "roles.p.files[0].path"),
    ({"hosts": ["root@h"], "health_timeout": 0}, "roles.p.health_timeout"),
])
def test_rig_file_errors_name_the_field(tmp_path, role, field):
    with pytest.raises(ConfigError) as e:
        rigfile.load(_rig(tmp_path, {"p": role}))
    assert f"field {field} " in str(e.value)


def test_role_validate_belongs_to_first_file_and_file_objects_bring_their_own(tmp_path):
    rf = rigfile.load(_rig(tmp_path, {"gw": {
        "hosts": ["root@h"], "validate": "yamlcheck {path}",
        "files": ["/etc/litellm/config.yaml", {"path": "/etc/litellm/keys.json", "validate": "jq . {path}"},
                  "/etc/systemd/system/litellm.service"]}}, host_store="/var/lib/x/"))
    r = rf.roles["gw"]
    assert r.validate_for("/etc/litellm/config.yaml") == "yamlcheck {path}"
    assert r.validate_for("/etc/litellm/keys.json") == "jq . {path}"
    assert r.validate_for("/etc/systemd/system/litellm.service") is None
    assert rf.host_store == "/var/lib/x"
