"""A real sshd on loopback for tests that only need one SSH server (not the whole box)."""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalSshd:
    port: int
    user: str
    host_pub: str
    client_key: Path
    known_hosts: Path
    proc: subprocess.Popen

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start(tmp: Path, addr: str = "127.0.0.1") -> LocalSshd:
    """sshd on `addr` (any loopback address: 127.0.0.2 is a second host name) and a free port."""
    tmp.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(exist_ok=True)
    hk = tmp / "host_ed25519"
    ck = tmp / "client_ed25519"
    for k in (hk, ck):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(k)], check=True)
    (tmp / "authorized_keys").write_text(ck.with_suffix(".pub").read_text())
    os.chmod(tmp / "authorized_keys", 0o600)
    port = free_port()
    user = getpass.getuser()
    cfg = tmp / "sshd_config"
    cfg.write_text(f"""Port {port}
ListenAddress {addr}
HostKey {hk}
PidFile {tmp}/sshd.pid
AuthorizedKeysFile {tmp}/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
AllowUsers {user}
UsePAM no
StrictModes no
""")
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)], stderr=subprocess.DEVNULL)
    host_pub = hk.with_suffix(".pub").read_text().split()
    kh = tmp / "known_hosts"
    kh.write_text(f"[{addr}]:{port} {host_pub[0]} {host_pub[1]}\n")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((addr, port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.05)
    return LocalSshd(port, user, f"{host_pub[0]} {host_pub[1]}", ck, kh, proc)
