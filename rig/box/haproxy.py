"""Reading HAProxy's runtime statistics over its stats socket (queue depths per backend)."""

from __future__ import annotations

import socket
from pathlib import Path


def command(sock: Path, cmd: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(cmd.encode() + b"\n")
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks).decode()


def clear_counters(sock: Path) -> None:
    """Reset every counter, maxima (qmax, smax) included."""
    command(sock, "clear counters all")


def show_stat(sock: Path) -> list[dict[str, str]]:
    """`show stat` as rows (pxname, svname, qcur, qmax, scur, smax, stot, ...)."""
    lines = command(sock, "show stat").splitlines()
    if not lines or not lines[0].startswith("# "):
        return []
    head = lines[0][2:].split(",")
    return [dict(zip(head, ln.split(","), strict=False)) for ln in lines[1:] if ln.strip()]


def server_row(sock: Path, backend: str, server: str) -> dict[str, str]:
    for r in show_stat(sock):
        if r.get("pxname") == backend and r.get("svname") == server:
            return r
    raise KeyError(f"{backend}/{server} not in HAProxy's stats")


def main(argv: list[str]) -> int:
    """`python haproxy.py SOCKET`: send stdin (one runtime API command, or several joined by `;`)
    to the admin socket and print the answer: the box's stand-in for `socat stdio SOCKET` on the
    proxy host, reached over SSH like every rig host."""
    import sys

    cmd = sys.stdin.read().strip()
    if len(argv) != 1 or not cmd:
        print("usage: haproxy.py SOCKET < COMMAND", file=sys.stderr)
        return 2
    sys.stdout.write(command(Path(argv[0]), cmd))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
