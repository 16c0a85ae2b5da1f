"""Installing the pinned Dagu release on a lane.

The binary comes from a file the operator names (NEV_DAGU_BINARY: a file on this
box, sent over SSH stdin, or a path on the lane such as the NAS share) or, by
default, from the NAS share at `<shared>/releases/dagu-<version>/dagu`. Its sha256 is
checked on the lane against the pin in `dagu/layout.py` while the copy is still
mode 600; only a match is made executable and renamed into place (a running Dagu keeps the file it
started from). A mismatch removes the copy and refuses with both hashes.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path

from dagu.layout import DAGU_SHA256, DAGU_VERSION, Layout
from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.ssh import Connection


class InstallError(NevError):
    pass


@dataclass(frozen=True)
class Source:
    """Where the release binary comes from: a file here (`local`) or a path on the lane."""

    path: str
    local: bool

    def describe(self) -> str:
        return f"{self.path} ({'this box' if self.local else 'on the lane'})"


def default_nas_path(shared: str) -> str:
    return posixpath.join(shared, "releases", f"dagu-{DAGU_VERSION}", "dagu")


def choose_source(setting_value: str | None, shared: str) -> Source:
    """NEV_DAGU_BINARY if set (a file here wins over a lane path), else the NAS default."""
    if not setting_value:
        return Source(default_nas_path(shared), local=False)
    v = setting_value.strip()
    if "://" in v:
        raise InstallError(
            f"NEV_DAGU_BINARY={v!r} is a URL; download the release once and set NEV_DAGU_BINARY to the file "
            "(here or on the NAS share); nothing was installed")
    p = Path(os.path.expanduser(v))
    if p.is_file():
        return Source(str(p.resolve()), local=True)
    if not v.startswith("/"):
        raise InstallError(f"NEV_DAGU_BINARY={v!r}: no such file here, and a lane path must be absolute; "
                           "nothing was installed")
    return Source(v, local=False)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def show_hash(h: str) -> str:
    """A hash in groups of 16, so the error masking (which hides long hex runs as tokens) leaves it readable."""
    return " ".join(h[i:i + 16] for i in range(0, len(h), 16))


def check_pin(actual: str, what: str, pin: str = DAGU_SHA256) -> None:
    if actual != pin:
        raise InstallError(
            f"{what} has sha256 [{show_hash(actual)}], but the pin for Dagu {DAGU_VERSION} is [{show_hash(pin)}]; "
            "refusing to install it (point NEV_DAGU_BINARY at the real release)")


def remote_sha256(conn: Connection, path: str) -> str | None:
    r = conn.run(f"sha256sum -- {shlex.quote(path)} 2>/dev/null")
    if r.exit_status != 0 or not r.out.strip():
        return None
    return r.out.split()[0]


def install(conn: Connection, layout: Layout, source: Source, pin: str = DAGU_SHA256) -> bool:
    """Put the pinned binary at `layout.binary`; False when it was already there."""
    if remote_sha256(conn, layout.binary) == pin:
        return False
    # a name of this install's own: two installs at once never write, check or move each other's copy
    staged = f"{layout.binary}.new.{os.getpid()}.{secrets.token_hex(4)}"
    q = shlex.quote
    conn.run(f"umask 077 && mkdir -p {q(layout.bin_dir)} && rm -f {q(staged)}", check=True)
    if source.local:
        local = Path(source.path)
        check_pin(sha256_file(local), f"{local}", pin)
        with local.open("rb") as f:
            conn.run(f"umask 077 && cat > {q(staged)}", stdin=iter(lambda: f.read(1 << 20), b""), check=True)
    else:
        r = conn.run(f"umask 077 && cp -- {q(source.path)} {q(staged)} && chmod 600 {q(staged)}")
        if r.exit_status != 0:
            raise InstallError(
                f"cannot copy the Dagu release from {source.describe()}: {r.err.strip() or 'copy failed'}; "
                "put the release there or set NEV_DAGU_BINARY to the file; nothing was installed")
    got = remote_sha256(conn, staged)
    if got != pin:
        conn.run(f"rm -f {q(staged)}")
        check_pin(got or "(unreadable)", f"the copy of {source.describe()} on {conn.target}", pin)
    conn.run(f"chmod 755 {q(staged)} && mv -f {q(staged)} {q(layout.binary)}", check=True)
    return True


def source_from_settings(shared: str) -> Source:
    return choose_source(settings.get(settings.DAGU_BINARY), shared)
