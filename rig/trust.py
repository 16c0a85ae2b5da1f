"""`nev rig trust HOST`: a host's key shown by its fingerprint and pinned in the known_hosts file
after confirmation (the quickstart's step 2, without hand-built `ssh-keyscan` lines)."""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from pathlib import Path

from lanes import lanesfile
from lanes.base.errors import NevError, UsageError
from lanes.base.ssh import SshError, Target, default_known_hosts, fingerprint, offered_key


def trust(spec: str, yes: bool, direct: bool, say: Callable[[str], None],
          ask: Callable[[str], bool]) -> int:
    try:
        target = Target.parse(spec, default_user=getpass.getuser())
    except SshError as e:
        raise UsageError(str(e)) from None
    jump = None if direct else lanesfile.default_jump()
    if jump is not None and (jump.host, jump.port) == (target.host, target.port):
        jump = None                     # the jump host itself: reached directly
    kind, b64 = offered_key(target, jump)
    kh = default_known_hosts()
    name = target.known_hosts_name
    line = f"{name} {kind} {b64}"
    have = _pinned(kh, name)
    via = f" (through the jump host {jump})" if jump else ""
    say(f"{name}{via} offers {kind} {fingerprint(b64)}")
    if (kind, b64) in have:
        say(f"already pinned in {kh}; nothing changed")
        return 0
    if have:
        old = ", ".join(fingerprint(b) for _, b in have)
        say(f"CHANGED: {kh} pins {name} with another key ({old}); re-pin only if the host was "
            "really rebuilt")
    question = f"Is {fingerprint(b64)} the key its administrator gives? Pin it in {kh}"
    if not yes and not ask(question):
        raise NevError(f"not pinned: {name} left as it was in {kh}")
    _write(kh, name, line)
    say(f"pinned {name} in {kh}")
    return 0


def _pinned(kh: Path, name: str) -> list[tuple[str, str]]:
    if not kh.exists():
        return []
    out = []
    for ln in kh.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = ln.split()
        if len(parts) >= 3 and name in parts[0].split(","):
            out.append((parts[1], parts[2]))
    return out


def _write(kh: Path, name: str, line: str) -> None:
    """The file without `name`'s old lines, plus `line`; written by rename, mode 600."""
    old = kh.read_text(encoding="utf-8", errors="replace").splitlines() if kh.exists() else []
    keep = [ln for ln in old if not (ln.split() and name in ln.split()[0].split(","))]
    kh.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = kh.with_name(f".{kh.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(ln + "\n" for ln in [*keep, line]))
    os.replace(tmp, kh)
