"""The sudoers drop-in of `nev rig provision-sudo`, a pure function of the rig file's serving
section: exact commands, escaped, refused when sudo could not allow exactly them; and the real
`visudo` and `sudo -l` reading what it writes (in a private mount namespace, never this machine's
own sudoers)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lanes.base.errors import ConfigError
from rig import rigfile
from rig.serving import sudoers
from rig.serving.declared import Replica, ServingRole


def replica(name: str, host: str = "admin@arm1", unit: str = "/usr/bin/systemctl", svc: str = "fn",
            sudo: bool = True, **cmds: str) -> Replica:
    c = {"start": f"{unit} start {svc}", "stop": f"{unit} stop {svc}", "status": f"{unit} is-active --quiet {svc}"}
    c.update(cmds)
    return Replica(role="fn", name=name, host=host, server=name, sudo=sudo, **c)


def role(*reps: Replica, name: str = "fn") -> ServingRole:
    return ServingRole(name=name, proxy="proxy", backend="be_fn", aliases=["a"], replicas={r.name: r for r in reps})


def test_the_drop_in_allows_each_admin_exactly_its_units_three_commands():
    out = sudoers.drop_ins(role(replica("r0"), replica("r1", host="admin@arm2:2222", svc="fn2"),
                                replica("r2", host="root@arm3", sudo=False)))
    assert list(out) == ["root@arm1", "root@arm2:2222"]        # installed as root; no line for a non-sudo replica
    assert out["root@arm1"] == (
        "# /etc/sudoers.d/nev-serving-fn: written by `nev rig provision-sudo fn`; the serving role's\n"
        "# unit commands, exactly, and nothing else. Edit the rig file and provision again.\n"
        "admin ALL=(root) NOPASSWD: /usr/bin/systemctl start fn, \\\n"
        "    /usr/bin/systemctl stop fn, \\\n"
        "    /usr/bin/systemctl is-active --quiet fn\n")
    assert "fn2" in out["root@arm2:2222"] and " fn," not in out["root@arm2:2222"]


def test_two_accounts_on_one_host_get_a_line_each_and_a_repeated_command_is_listed_once():
    text = sudoers.drop_ins(role(replica("r0"), replica("r1", host="ops@arm1", svc="other"),
                                 replica("r2")))["root@arm1"]
    rules = [ln for ln in text.splitlines() if "NOPASSWD" in ln]
    assert [r.split()[0] for r in rules] == ["admin", "ops"]
    assert text.count("/usr/bin/systemctl start fn,") == 1


def test_a_command_without_arguments_allows_no_arguments_rather_than_any():
    text = sudoers.drop_ins(role(replica("r0", start="/opt/fn/up", stop="/opt/fn/down", status="/opt/fn/ok")))
    assert '/opt/fn/up "", \\' in text["root@arm1"] and text["root@arm1"].rstrip().endswith('/opt/fn/ok ""')


def test_sudoers_special_characters_are_escaped_and_never_wildcards():
    cmd = "/usr/bin/unit set-property 'fn,a:b=c\\d' 'x*y?[z]' '#h' '!n' '^r' 'p%q$\"'"
    got = sudoers.sudoers_command(cmd, "f")
    assert got == '/usr/bin/unit set-property fn\\,a\\:b\\=c\\\\\\\\d x\\*y\\?\\[z\\] \\#h \\!n \\^r p%q$"'


@pytest.mark.parametrize(("field", "value", "why"), [
    ("start", "systemctl start fn", "absolute path"),
    ("start", "/usr/bin/../bin/sh -c id", "absolute path"),
    ("stop", "/usr/bin/systemctl stop 'f n'", "whitespace"),
    ("stop", "/usr/bin/systemctl stop ''", "empty"),
    ("status", "/usr/bin/systemctl status fn; id", "word for word"),
    ("status", "/usr/bin/systemctl status $UNIT", "word for word"),
    ("status", "/usr/bin/systemctl status \"fn\"", "word for word"),
    ("status", "/usr/bin/systemctl status 'fn", "not a command line"),
])
def test_a_command_sudo_could_not_allow_exactly_is_refused_naming_its_field(field, value, why):
    with pytest.raises(ConfigError, match=rf"serving\.fn\.replicas\.r0\.{field} .*{why}"):
        sudoers.drop_ins(role(replica("r0", **{field: value})))


def test_a_role_without_sudo_replicas_or_with_root_or_an_odd_account_is_refused():
    with pytest.raises(ConfigError, match="no replica with \"sudo\": true"):
        sudoers.drop_ins(role(replica("r0", sudo=False)))
    with pytest.raises(ConfigError, match=r"replicas\.r0\.host logs in as root"):
        sudoers.drop_ins(role(replica("r0", host="arm1")))
    with pytest.raises(ConfigError, match="not a plain user name"):
        sudoers.drop_ins(role(replica("r0", host="Ad,min@arm1")))
    with pytest.raises(ConfigError, match="names a sudoers file"):
        sudoers.drop_ins(role(replica("r0"), name="fn.v2"))


def test_the_rig_file_holds_the_drop_in_as_a_snapshot_role_validated_by_visudo(tmp_path):
    data = {"roles": {"proxy": {"hosts": ["root@proxy"]}},
            "serving": {"fn": {"proxy": "proxy", "backend": "be_fn", "aliases": ["a"], "replicas": {
                "r0": {"host": "admin@arm1:2222", "sudo": True, "start": "/u start", "stop": "/u stop",
                       "status": "/u status"},
                "r1": {"host": "root@arm2", "start": "/u start", "stop": "/u stop", "status": "/u status"}}},
                "gw": {"proxy": "proxy", "backend": "be_gw", "aliases": ["b"], "replicas": {
                    "r0": {"host": "root@arm2", "start": "/u start", "stop": "/u stop", "status": "/u status"}}}}}
    p = tmp_path / "rig.local.json"
    p.write_text(json.dumps(data))
    r = rigfile.load(p).roles
    assert set(r) == {"proxy", "sudo-fn"}                      # none for a role without sudo replicas
    s = r["sudo-fn"]
    assert s.hosts == ["root@arm1:2222"] and s.files == ["/etc/sudoers.d/nev-serving-fn"]
    assert s.validate_for(s.files[0]) == "visudo -cf {path}" and s.health == "visudo -c" and s.reload is None
    data["roles"]["sudo-fn"] = {"hosts": ["root@x"]}
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"roles\.sudo-fn"):
        rigfile.load(p)


def _in_private_sudoers(tmp_path: Path, text: str, script: str) -> subprocess.CompletedProcess:
    """`script` run with `text` as the only drop-in: tmp_path's folder bound over /etc/sudoers.d in
    a mount namespace of its own, so this machine's sudoers is never read or touched."""
    d = tmp_path / "sudoers.d"
    d.mkdir()
    f = d / "nev-serving-fn"
    f.write_text(text)
    f.chmod(0o440)
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f'mount --bind "$1" /etc/sudoers.d && {script}', "sh", str(d)],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parts
def test_visudo_accepts_the_drop_in_and_sudo_allows_exactly_the_literal_commands(tmp_path):
    unit, status = tmp_path / "unit", tmp_path / "unit-status"
    for f in (unit, status):
        f.write_text("#!/bin/sh\n")
        f.chmod(0o755)
    tricky = f"{unit} set 'fn,a:b=c\\d' 'x*y' '#h' '^r'"
    text = sudoers.drop_ins(role(replica("r0", host="nobody@h", start=tricky, stop=f"{unit} stop",
                                         status=str(status))))["root@h"]
    assert subprocess.run(["visudo", "-cf", "/dev/stdin"], input=text, capture_output=True,
                          text=True).returncode == 0
    # sudo -l -U asks the policy without running anything: 0 allowed, 1 refused
    checks = [(unit, "set", "fn,a:b=c\\d", "x*y", "#h", "^r"), (unit, "set", "fn,a:b=c\\d", "xzy", "#h", "^r"),
              (unit, "stop"), (unit, "stop", "--now"), (unit, "status"), (unit,), (status,), (status, "x")]
    script = "; ".join(" ".join(["sudo -n -l -U nobody", *(f"'{a}'" for a in argv), ">/dev/null 2>&1; echo $?"])
                       for argv in checks) + "; visudo -c >/dev/null; echo $?"
    r = _in_private_sudoers(tmp_path, text, script)
    assert r.stdout.split() == ["0", "1", "0", "1", "1", "1", "0", "1", "0"], r.stdout + r.stderr
