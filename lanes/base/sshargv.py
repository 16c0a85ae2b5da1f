"""The OpenSSH client's argv, in one place: a pinned hop's options (`client_options`), the route
to a host through its jump host (`route_argv`: the gate's client, and what `nev -v` shows to try
by hand for a paramiko connection too), and the jump host asked why it cannot reach a host
(`jump_says`). Shared by `lanes.base.ssh` and `lanes.base.openssh`, below both."""

from __future__ import annotations

import logging
import shlex
import subprocess
from pathlib import Path

from lanes.base.mask import mask_argv
from lanes.base.sshfail import Hop

log = logging.getLogger("nev.ssh")

# X25519 first: the client's default (a post-quantum hybrid) costs tens of ms of CPU per hop.
KEX = ("curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,"
       "diffie-hellman-group14-sha256")


def _opt_path(p: Path) -> str:
    return f'"{p}"' if any(c.isspace() for c in str(p)) else str(p)


def client_options(known_hosts: Path, key_file: Path | None, timeout: float,
                   control: tuple[str, int] | None = None) -> list[str]:
    """The OpenSSH client's options for one pinned hop: the host key only from `known_hosts` (no
    global file, never added), no config file, agent or password, the key given or the defaults;
    no kept connection, or the one at `control` (its socket, its ControlPersist seconds:
    `lanes.base.ssh.control`)."""
    # `-o "Option value"` rather than `Option=value`: the masked log would hide the values.
    opts = {"BatchMode": "yes", "StrictHostKeyChecking": "yes",
            "UserKnownHostsFile": _opt_path(known_hosts), "GlobalKnownHostsFile": "/dev/null",
            "UpdateHostKeys": "no", "ConnectTimeout": f"{timeout:.0f}",
            "ServerAliveInterval": "15", "ServerAliveCountMax": "3", "ForwardAgent": "no",
            "ControlMaster": "no", "ControlPath": "none", "LogLevel": "ERROR",
            "KexAlgorithms": KEX}
    if control is not None:
        # `auto`: the first client becomes the master, the next ones ride on it; a stale socket
        # (its master gone) is removed by the client, which then becomes the master itself
        opts.update({"ControlMaster": "auto", "ControlPath": control[0].replace("%", "%%"),
                     "ControlPersist": str(control[1])})
    if key_file is not None:
        opts["IdentitiesOnly"] = "yes"
    argv = ["-F", "none"]
    for k, v in opts.items():
        argv += ["-o", f"{k} {v}"]
    return argv + (["-i", str(key_file)] if key_file is not None else [])


def _hop_options(known_hosts: Path, key_file: Path | None, timeout: float) -> list[str]:
    """A jump hop's options: LogLevel INFO, at which the jump host's `open failed: connect
    failed: <why>` (the lane refused, its name unknown there) is said; nothing on success."""
    return [("LogLevel INFO" if o == "LogLevel ERROR" else o)
            for o in client_options(known_hosts, key_file, timeout)]


def route_argv(target: Hop, jump: Hop | None, known_hosts: Path, key_file: Path | None,
               timeout: float, command: str, control: tuple[str, int] | None = None) -> list[str]:
    """`ssh -T ... USER@HOST -- COMMAND`, through `jump` when given (a ProxyCommand hop with the
    same pins and key: ProxyJump would not pass these options to it); over the kept connection
    at `control` when given (the hop is then made once, by its master)."""
    # Through a jump host the outer client waits 2 s longer: a jump host that never answers is
    # then reported by the hop's own client, which names it.
    argv = ["ssh", "-T", *client_options(known_hosts, key_file, timeout + (2 if jump else 0),
                                         control)]
    if jump is not None:
        hop = ["ssh", *_hop_options(known_hosts, key_file, timeout), "-W", "[%h]:%p",
               "-p", str(jump.port), f"{jump.user}@{jump.host}"]
        # ssh expands %-tokens in it: a literal % (in a path) is doubled, `[%h]:%p` is meant.
        words = (a if a == "[%h]:%p" else shlex.quote(a).replace("%", "%%") for a in hop)
        argv += ["-o", "ProxyCommand " + " ".join(words)]
    return argv + ["-p", str(target.port), f"{target.user}@{target.host}", "--", command]


def jump_says(jump: Hop, target: Hop, known_hosts: Path, key_file: Path | None,
              timeout: float) -> str:
    """What the jump host says when asked for a connection to `target` (`ssh -W`): `open failed:
    connect failed: <why>` when it cannot make one; "" when it can."""
    argv = ["ssh", *_hop_options(known_hosts, key_file, timeout),
            "-W", f"[{target.host}]:{target.port}", "-p", str(jump.port),
            f"{jump.user}@{jump.host}"]
    log.debug("ssh %s@%s: asking why it cannot reach %s: %s", jump.user, jump.host, target.host,
              mask_argv(argv))
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=timeout * 2)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return p.stderr.decode(errors="replace") if p.returncode != 0 else ""
