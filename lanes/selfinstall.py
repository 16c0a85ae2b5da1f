"""Put this very nev on a lane: a wheelhouse built on the dev box, sent over SSH, installed offline.

Lanes have no route to a package index, and a lane must never run a different nev than the dev
box that drives it. So the dev box builds wheels of nev and its runtime dependencies (cached,
keyed by the project's sources), streams them as one tar over the SSH channel, and the lane
installs them with `pip --no-index`.

Installs are versioned and swapped atomically (`lanes/agent/layout.py` names the paths): each is a
venv of its own, `~/.local/share/nev/installs/<key>/`, built beside the others in a temporary
folder and renamed into place once whole; the current one is chosen by one atomic rename of a link,
`~/.local/share/nev/current -> installs/<key>`, and `~/.local/bin/nev` goes through that link. An
install never touches another: a nev already running keeps its own files (its interpreter is the
install's own, `rig/cli.py` holds its in-use lock and pins its children to it), and the sweep
(`lanes.sweep.decide_installs`) removes an old install only once no nev runs from it. Installing a
key already present builds nothing: the link is flipped back to it.
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

from lanes.agent import layout
from lanes.base.errors import NevError
from lanes.base.ssh import Connection

PROJECT = Path(__file__).resolve().parent.parent
PACKAGES = ("bench", "jobs", "lanes", "rig", "dagu", "crates_bridge")
CURRENT = layout.NEV_CURRENT      # the link to the install chosen now, relative to the lane's home
VENV = CURRENT                    # the current install's venv, through the link (`VENV/bin/python`)
MARKER = layout.NEV_SHARE + "/installed"   # the current install's key, written after each flip
LINK = ".local/bin/nev"           # the lane's `nev`, relative to its home: through CURRENT
SKIP_PARTS = {"__pycache__", "target", ".pytest_cache", ".mypy_cache"}


def from_checkout(root: Path = PROJECT) -> bool:
    """Whether this nev runs from a checkout of its sources (not a client install: pipx, uv)."""
    return (root / "pyproject.toml").is_file()


def source_key(root: Path = PROJECT) -> str:
    """A digest of everything that goes into the nev wheel."""
    if not from_checkout(root):
        raise NevError("this nev is a client install (pipx, uv tool) with no sources to build the "
                       "lanes' install from; run `nev lane install` from a checkout of nev once "
                       "(README), or set NEV_JOB_INSTALL_NEV=0 to submit jobs to the nev there")
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


def install_dir(key: str) -> str:
    """The install of `key`, relative to the lane's home."""
    return f"{layout.NEV_INSTALLS}/{key}"


def remote_script(key: str) -> str:
    """The lane's end of an install, run by `sh` in the lane user's session, the wheelhouse's tar
    on stdin (empty is fine when the install is there already). One install at a time (a lock).
    The venv is built under a temporary name and renamed to `installs/<key>`: venvs are not
    relocatable, so the scripts that name their folder (shebangs, activate) are rewritten to the
    final name first. Then `current` and `~/.local/bin/nev` are each replaced by one rename."""
    if not layout.install_name_ok(key):
        raise NevError(f"{key!r} is not an install key (16 hex digits); nothing installed")
    new = install_dir(key)
    return f"""set -eu
cd "$HOME"
mkdir -p {layout.NEV_INSTALLS} .local/bin
exec 9>{layout.INSTALL_LOCK}
flock 9   # one install at a time on this lane (another dev box, or two commands at once)
if [ -x {new}/bin/nev ] && [ -f {new}/{layout.IN_USE} ]; then
  cat > /dev/null; built=no
else
  tmp=$(mktemp -d "$PWD/{layout.NEV_INSTALLS}/{layout.INSTALL_TMP}{key}.XXXXXX")
  whl=$(mktemp -d)
  trap 'rm -rf "$tmp" "$whl"' EXIT
  tar -x -C "$whl"
  if python3 -m venv "$tmp" >/dev/null 2>&1; then
    pip="$tmp/bin/python -m pip"
  else
    python3 -m venv --without-pip "$tmp"
    pip="$tmp/bin/python $(ls "$whl"/pip-*.whl)/pip"
  fi
  $pip install -q --disable-pip-version-check --no-index --find-links "$whl" nev
  grep -rlIF "$tmp" "$tmp/bin" "$tmp/pyvenv.cfg" | while read -r f; do
    sed -i "s|$tmp|$PWD/{new}|g" "$f"
  done
  mkdir "$tmp/{layout.INSTALL_ENTRY}"
  ln -s ../bin/nev "$tmp/{layout.INSTALL_ENTRY}/nev"
  : > "$tmp/{layout.IN_USE}"
  mv -T "$tmp" {new}
  built=yes
fi
touch {new}/{layout.CHOSEN}
if [ "$(readlink {CURRENT} || true)" = installs/{key} ] && \
   [ "$(readlink {LINK} || true)" = "$PWD/{CURRENT}/bin/nev" ] && [ $built = no ]; then
  echo "unchanged: nev {key} already installed"; exit 0
fi
ln -sfn installs/{key} {CURRENT}.tmp$$ && mv -T {CURRENT}.tmp$$ {CURRENT}
ln -sfn "$PWD/{CURRENT}/bin/nev" {LINK}.tmp$$ && mv -T {LINK}.tmp$$ {LINK}
echo {key} > {MARKER}.tmp$$ && mv -T {MARKER}.tmp$$ {MARKER}
if [ $built = yes ]; then
  echo "changed: nev {key} installed in ~/{new}, now current"
else
  echo "unchanged: nev {key} already installed in ~/{new}; made current again"
fi
"""


PROBE = (f'cd "$HOME" && readlink {CURRENT}; test -x {LINK} && echo ok; '
         f'test -f {layout.NEV_INSTALLS}/"$1"/{layout.IN_USE} && echo present')


def install(conn: Connection, cache: Path) -> tuple[bool, str]:
    """Install nev on the lane behind `conn`; returns (changed, the lane's one-line report).
    Changed means a new install was built; flipping back to one already there is not a change."""
    house, key = wheelhouse(cache)
    probe = conn.run(f"sh -c {shlex.quote(PROBE)} sh {key}")
    lines = probe.out.split()
    if lines == [f"installs/{key}", "ok", "present"]:
        return False, f"unchanged: nev {key} already installed"
    tar = b"" if "present" in lines else wheel_tar(house)
    res = conn.run(remote_script(key), stdin=tar, timeout=900)
    if res.exit_status != 0:
        last = (res.err.strip().splitlines() or [f"exit {res.exit_status}"])[-1]
        raise NevError(f"installing nev on {conn.target} failed: {last}")
    line = res.out.strip().splitlines()[-1]
    return line.startswith("changed:"), line


def default_cache() -> Path:
    return Path.home() / ".cache" / "nev" / "wheelhouse"
