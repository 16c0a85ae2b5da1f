"""The sudoers drop-in of a serving role: its admin accounts may run exactly their units' commands.

    the rig file says (a replica with "sudo": true)          the drop-in says
    admin@node-a, start /usr/bin/systemctl start fn          admin ALL=(root) NOPASSWD: /usr/bin/systemctl start fn, ...
    a command with no argument: /opt/fn/restart              /opt/fn/restart ""  (no argument; bare would allow any)
    an argument with , : = * ? [ ] # ! ^                     each escaped with a backslash (never a wildcard);
                                                             a backslash written as four
    a relative path; whitespace, a control character or      refused, naming the field
      nothing in an argument; a command the shell would
      not pass word for word (`shlex.join` is how to write it)

One file per serving role and host (`/etc/sudoers.d/nev-serving-ROLE`: sudo skips names with a
dot, so the restore path's temporary copies beside it are never read), one line per account.
`rig.rigfile` declares it as the snapshot role `sudo-ROLE` on `root@` each such host, validated
with `visudo -cf` before it moves into place and with `visudo -c` after.
"""

from __future__ import annotations

import re
import shlex

from lanes.base.errors import ConfigError
from lanes.base.ssh import Target
from rig.serving.declared import Replica, ServingRole

DIR = "/etc/sudoers.d"
VALIDATE = "visudo -cf {path}"     # the temporary copy alone
HEALTH = "visudo -c"               # the whole configuration, the new file in place
ROLE_PREFIX = "sudo-"
RUNAS = "root"
# sudoers(5): `, : =` must be escaped in an argument, `* ? [ ]` would be wildcards, `#` would
# start a comment, a leading `^` a regular expression, `!` a negation: `\x` is `x` for each. A
# backslash is unescaped twice (by the parser, then by the matcher): one is written as four.
_SPECIAL = set(",:=*?[]#!^")
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_USER = re.compile(r"[a-z_][a-z0-9_-]*")
_PATH = re.compile(r"/[A-Za-z0-9_.+@/-]*")
_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f]")


def path(role: str) -> str:
    return f"{DIR}/nev-serving-{role}"


def role_name(role: str) -> str:
    """The snapshot role that holds the drop-in."""
    return f"{ROLE_PREFIX}{role}"


def sudo_replicas(role: ServingRole) -> list[Replica]:
    return [r for r in role.replicas.values() if r.sudo]


def root_host(replica: Replica) -> str:
    """The replica's host as root reaches it (the drop-in is root's to install)."""
    t = Target.parse(replica.host, default_user="root")
    return str(Target(host=t.host, user="root", port=t.port))


def root_hosts(role: ServingRole) -> list[str]:
    return list(dict.fromkeys(root_host(r) for r in sudo_replicas(role)))


def escape(arg: str) -> str:
    return "".join("\\" * 4 if c == "\\" else "\\" + c if c in _SPECIAL else c for c in arg)


def sudoers_command(command: str, where: str) -> str:
    """One unit command as a sudoers Cmnd that matches it and nothing else."""
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise ConfigError(f"{where} is not a command line ({e})") from None
    if not argv or shlex.join(argv) != command:
        raise ConfigError(f"{where} must be written as the shell passes it word for word, so sudo can allow "
                          f"exactly it: {shlex.join(argv) if argv else 'an absolute path and its arguments'}")
    exe, args = argv[0], argv[1:]
    if not _PATH.fullmatch(exe) or "/../" in exe + "/" or "/./" in exe + "/":
        raise ConfigError(f"{where} must start with the command's absolute path (letters, digits and "
                          f"_ . + @ / - only), not {exe!r}")
    for a in args:
        if not a or _UNSAFE.search(a):
            raise ConfigError(f"{where} has an argument sudo cannot match exactly ({a!r}: empty, or with "
                              "whitespace or a control character)")
    return " ".join([exe, *(escape(a) for a in args)]) if args else f'{exe} ""'


def _user(replica: Replica, where: str) -> str:
    user = Target.parse(replica.host, default_user="root").user
    if user == "root":
        raise ConfigError(f"{where}.host logs in as root, which needs no sudo rule; name the admin account "
                          "(admin@host) or drop \"sudo\": true")
    if not _USER.fullmatch(user):
        raise ConfigError(f"{where}.host's account {user!r} is not a plain user name (a-z 0-9 _ -)")
    return user


def drop_ins(role: ServingRole) -> dict[str, str]:
    """root@host -> the drop-in's text for that host: per admin account there, its replicas'
    start, stop and status commands, exactly. Pure; raises ConfigError naming the bad field."""
    if not _NAME.fullmatch(role.name):
        raise ConfigError(f"serving.{role.name} names a sudoers file; use letters, digits, _ or - only")
    reps = sudo_replicas(role)
    if not reps:
        raise ConfigError(f"serving.{role.name} has no replica with \"sudo\": true; nothing to allow")
    rules: dict[str, dict[str, list[str]]] = {}
    for r in reps:
        where = f"serving.{role.name}.replicas.{r.name}"
        cmds = rules.setdefault(root_host(r), {}).setdefault(_user(r, where), [])
        for which in ("start", "stop", "status"):
            c = sudoers_command(getattr(r, which), f"{where}.{which}")
            if c not in cmds:
                cmds.append(c)
    out = {}
    for host, users in rules.items():
        lines = [f"# {path(role.name)}: written by `nev rig provision-sudo {role.name}`; the serving role's",
                 "# unit commands, exactly, and nothing else. Edit the rig file and provision again."]
        for user, cmds in users.items():
            lines.append(f"{user} ALL=({RUNAS}) NOPASSWD: " + ", \\\n    ".join(cmds))
        out[host] = "\n".join(lines) + "\n"
    return out
