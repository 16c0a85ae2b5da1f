"""Put this very nev on a lane: a wheelhouse built on the dev box, sent over SSH, installed offline.

Lanes have no route to a package index, and a lane must never run a different nev than the dev
box that drives it. So the dev box builds wheels of nev and its runtime dependencies (cached,
keyed by the project's sources), streams them as one tar over the SSH channel, and the lane
installs them with `pip --no-index` into `~/.local/share/nev/venv`, linking `~/.local/bin/nev`.
A marker holding the key makes a second install of the same sources a no-op.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from lanes.base.errors import NevError
from lanes.base.ssh import Connection

PROJECT = Path(__file__).resolve().parent.parent
PACKAGES = ("bench", "jobs", "lanes", "rig", "dagu", "crates_bridge")
VENV = ".local/share/nev/venv"
MARKER = ".local/share/nev/installed"
LINK = ".local/bin/nev"           # the lane's `nev`, relative to its home
SKIP_PARTS = {"__pycache__", "target", ".pytest_cache", ".mypy_cache"}


def source_key(root: Path = PROJECT) -> str:
    """A digest of everything that goes into the nev wheel."""
    h = hashlib.sha256()
    files = [root / "pyproject.toml"]
    for pkg in PACKAGES:
        files += sorted(p for p in (root / pkg).rglob("*")
                        if p.is_file() and not SKIP_PARTS.intersection(p.relative_to(root).parts)
                        and not p.name.endswith((".pyc", ".local.json")))
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def wheelhouse(cache: Path, root: Path = PROJECT) -> tuple[Path, str]:
    """Wheels of nev and its dependencies (plus pip), built once per source key."""
    key = source_key(root)
    house = cache / key
    if (house / ".complete").exists():
        return house, key
    cache.mkdir(parents=True, exist_ok=True)
    # One builder at a time (two `nev lane install` or `box up` at once): both would empty and
    # fill <root>/build. The second waits, then finds the first one's wheelhouse complete.
    fd = os.open(cache / ".build.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not (house / ".complete").exists():
            _build(house, key, root)
    finally:
        os.close(fd)
    return house, key


def _build(house: Path, key: str, root: Path) -> None:
    house.mkdir(parents=True, exist_ok=True)
    # setuptools stages the wheel in <root>/build and does not empty it first: a module deleted
    # from the sources would still ride along. It is build output (gitignored), so start clean.
    shutil.rmtree(root / "build", ignore_errors=True)
    with tempfile.TemporaryDirectory() as build:
        cmds = [[sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
                 "--wheel-dir", str(house), str(root)],
                [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                 "--no-deps", "--dest", str(house), "pip"]]
        for cmd in cmds:
            cp = subprocess.run(cmd, capture_output=True, text=True, cwd=build)
            if cp.returncode != 0:
                last = (cp.stderr.strip().splitlines() or ["(no message)"])[-1]
                raise NevError(f"building nev's wheelhouse in {house} failed: {last}; "
                               "check that the package index is reachable from the dev box")
    (house / ".complete").write_text(key + "\n")


def wheel_tar(house: Path) -> bytes:
    """The wheelhouse as one tar, as the lane's install script reads it on stdin."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for whl in sorted(house.glob("*.whl")):
            tf.add(whl, arcname=whl.name)
    return buf.getvalue()


def remote_script(key: str) -> str:
    k = shlex.quote(key)
    return f"""set -eu
cd "$HOME"
mkdir -p .local/share/nev .local/bin
exec 9>.local/share/nev/install.lock
flock 9   # one install at a time on this lane (another dev box, or two commands at once)
if [ -f {MARKER} ] && [ "$(cat {MARKER})" = {k} ] && [ -x {VENV}/bin/nev ]; then
  cat > /dev/null; echo "unchanged: nev {key} already installed"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tar -x -C "$tmp"
rm -rf {VENV}
if python3 -m venv {VENV} >/dev/null 2>&1; then
  pip="{VENV}/bin/python -m pip"
else
  python3 -m venv --without-pip {VENV}
  pip="{VENV}/bin/python $(ls "$tmp"/pip-*.whl)/pip"
fi
$pip install -q --disable-pip-version-check --no-index --find-links "$tmp" nev
ln -sfn "$HOME/{VENV}/bin/nev" {LINK}
echo {k} > {MARKER}
echo "changed: nev {key} installed in ~/{VENV}"
"""


def install(conn: Connection, cache: Path) -> tuple[bool, str]:
    """Install nev on the lane behind `conn`; returns (changed, the lane's one-line report)."""
    house, key = wheelhouse(cache)
    probe = conn.run(f"cat $HOME/{MARKER} 2>/dev/null; test -x $HOME/{VENV}/bin/nev && echo ok")
    lines = probe.out.split()
    if lines == [key, "ok"]:
        return False, f"unchanged: nev {key} already installed"
    res = conn.run(remote_script(key), stdin=wheel_tar(house), timeout=900)
    if res.exit_status != 0:
        last = (res.err.strip().splitlines() or [f"exit {res.exit_status}"])[-1]
        raise NevError(f"installing nev on {conn.target} failed: {last}")
    return True, res.out.strip().splitlines()[-1]


def default_cache() -> Path:
    return Path.home() / ".cache" / "nev" / "wheelhouse"
