"""The text of a key-only sshd config: one policy for every sshd nev writes (the box's hosts and
lanes, a lane guest made by `nev lane create`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def config(written_for: str, listen: Iterable[str], host_key: str, pid_file: str, authorized_keys: str,
           users: str, root_login: str = "no", env: Mapping[str, str] | None = None,
           options: Iterable[str] = ()) -> str:
    """An sshd_config that listens on `listen` (addr:port) and lets in `users` by key only (no
    password, keyboard-interactive or PAM; no X11, no motd); `env` set for every session, then
    the role's own `options` lines."""
    lines = [f"# sshd of {written_for}"]
    if env:
        lines.append("SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()))
    lines += [f"ListenAddress {a}" for a in listen]
    lines += [f"HostKey {host_key}", f"PidFile {pid_file}", f"AuthorizedKeysFile {authorized_keys}",
              "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
              f"PermitRootLogin {root_login}", f"AllowUsers {users}", "UsePAM no", "X11Forwarding no",
              "PrintMotd no", *options]
    return "\n".join(lines) + "\n"
