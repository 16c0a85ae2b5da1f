"""Put this very nev on a lane: a wheelhouse built on the dev box, sent over SSH, installed offline.

Lanes have no route to a package index, and a lane must never run a different nev than the dev
box that drives it. So the dev box builds wheels of nev and its runtime dependencies (cached,
keyed by the project's sources), streams them as one tar over the SSH channel, and the lane
installs them with `pip --no-index`. A client install (pipx, uv tool: no sources here) makes the
same wheelhouse from its installed distributions instead (`lanes/installwheels.py`).

Installs are versioned and swapped atomically (`lanes/agent/layout.py` names the paths): each is a
venv of its own, `~/.local/share/nev/installs/<key>/`, built beside the others in a temporary
folder and renamed into place once whole; the current one is chosen by one atomic rename of a link,
`~/.local/share/nev/current -> installs/<key>`, and `~/.local/bin/nev` goes through that link. An
install never touches another: a nev already running keeps its own files (its interpreter is the
install's own, `rig/cli.py` holds its in-use lock and pins its children to it), and the sweep
(`lanes.sweep.decide_installs`) removes an old install only once no nev runs from it. Installing a
key already present builds nothing, once that install is checked against its key's manifest
(`manifest`, `VERIFY`): the files the wheels of this development box put in site-packages, with
their hashes from the wheels' own RECORDs, nothing else there, the venv's python and its
`bin/nev` what the install script makes. One that differs is moved aside and built anew, never
reused (docs/lanes.md, "The agent's code and the installs").
"""

from __future__ import annotations

import hashlib
import io
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from lanes.agent import layout
from lanes.base import flockwait, ui
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


def pythonpath() -> dict[str, str]:
    """What a command nev schedules (the tick's cron line, a forward's supervisor) needs to find
    this nev: its checkout on PYTHONPATH; nothing for a client install, whose python has nev
    already (its site-packages on PYTHONPATH would come before the standard library)."""
    return {"PYTHONPATH": str(PROJECT)} if from_checkout() else {}


def source_key(root: Path = PROJECT) -> str:
    """A digest of everything that goes into the nev wheel; from a client install, of the
    installed distributions the wheels are made from (`lanes/installwheels.py`)."""
    if not from_checkout(root):
        from lanes import installwheels

        return installwheels.key()
    h = hashlib.sha256()
    files = [root / "pyproject.toml"]
    for pkg in PACKAGES:
        files += sorted(p for p in (root / pkg).rglob("*")
                        if p.is_file() and not SKIP_PARTS.intersection(p.relative_to(root).parts)
                        and not p.name.endswith((".pyc", ".local.json")))
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def wheelhouse(cache: Path, root: Path = PROJECT,
               say: Callable[[str], None] | None = None) -> tuple[Path, str]:
    """Wheels of nev and its dependencies (plus pip), built once per source key: from a checkout
    with `pip wheel` (the package index reached for the dependencies), from a client install by
    packing the installed distributions back into wheels (offline). `say`: what a build does,
    as it starts (a checkout's takes a minute or more)."""
    key = source_key(root)
    house = cache / key
    if (house / ".complete").exists():
        return house, key
    cache.mkdir(parents=True, exist_ok=True)
    # One builder at a time (two `nev lane install` or `box up` at once): both would empty and
    # fill <root>/build. The second waits, then finds the first one's wheelhouse complete.
    fd = os.open(cache / ".build.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        flockwait.lock(fd, say, f"nev's wheelhouse {key}: waiting for another build in {cache} to end")
        if not (house / ".complete").exists():
            if from_checkout(root):
                _build(house, key, root, say or (lambda _s: None))
            else:
                from lanes import installwheels

                if say is not None:
                    say(f"nev's wheelhouse {key}: the installed distributions packed into wheels")
                shutil.rmtree(house, ignore_errors=True)     # a build cut short: start clean
                installwheels.build(house)
                (house / ".complete").write_text(key + "\n")
    finally:
        os.close(fd)
    return house, key


def _build(house: Path, key: str, root: Path, say: Callable[[str], None]) -> None:
    house.mkdir(parents=True, exist_ok=True)
    # setuptools stages the wheel in <root>/build and does not empty it first: a module deleted
    # from the sources would still ride along. It is build output (gitignored), so start clean.
    shutil.rmtree(root / "build", ignore_errors=True)
    with tempfile.TemporaryDirectory() as build:
        cmds = [[sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
                 "--wheel-dir", str(house), str(root)],
                [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                 "--no-deps", "--dest", str(house), "pip"]]
        for cmd, what in zip(cmds, ("pip wheel: nev and its requirements' wheels",
                                    "pip download: pip's wheel"), strict=True):
            say(f"nev's wheelhouse {key}: {what}")
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
    ls "$whl"/pip-*.whl >/dev/null 2>&1 || {{ echo "the lane's python3 has no ensurepip and no pip \
wheel came with nev's; install python3-venv on the lane (nev lane provision)" >&2; exit 1; }}
    pip="$tmp/bin/python $(ls "$whl"/pip-*.whl)/pip"
  fi
  $pip install -q --disable-pip-version-check --no-index --find-links "$whl" nev
  # only the wheelhouse's own distributions stay in site-packages (the manifest checks them all)
  for d in setuptools wheel pip; do
    if ! ls "$whl"/$d-*.whl >/dev/null 2>&1 || [ $d = pip ]; then
      $pip uninstall -q -y --disable-pip-version-check $d >/dev/null 2>&1 || true
    fi
  done
  grep -rlIF "$tmp" "$tmp/bin" "$tmp/pyvenv.cfg" | while read -r f; do
    sed -i "s|$tmp|$PWD/{new}|g" "$f"
  done
  printf '%s\n' "#!$PWD/{new}/bin/python" {shlex.quote(LAUNCHER)} > "$tmp/bin/nev"
  chmod 755 "$tmp/bin/nev"
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
         f'test -f {layout.NEV_INSTALLS}/"$1"/{layout.IN_USE} && echo present; '
         'echo "python=$(python3 -c \'import sys; print("%d%d" % sys.version_info[:2])\' 2>&1 '
         '| tr -d " ")/$(uname -m)"')

# The install's `bin/nev` after its first line (`#!<install>/bin/python`): written by the install
# script, so the check can say what it must hold.
LAUNCHER = "import sys\nfrom rig.cli import run\nsys.exit(run())"
# Made by pip in each distribution's `.dist-info`, in no wheel's RECORD.
PIP_MADE = ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json")

# The lane's check of an install (`python3 -I -S -c VERIFY <install folder>`, the manifest as
# JSON on stdin): drops every `__pycache__` (a compiled file cannot be checked against its
# source; the next run compiles again), then prints `ok`, or `differs: <what>` for the first
# file that is missing, differs, or is there without being in the manifest, a venv python that
# is not this lane's python3, or a `bin/nev` that is not the launcher.
VERIFY = f"""
import glob, hashlib, base64, json, os, shutil, sys
d = sys.argv[1]
want = json.load(sys.stdin)
def say(w):
    print("differs: " + w); sys.exit(0)
sp = glob.glob(os.path.join(d, "lib", "python*", "site-packages"))
if len(sp) != 1: say("no single site-packages")
sp = sp[0]
py = os.path.realpath(sys.executable)
for n in ("python", "python3"):
    if os.path.realpath(os.path.join(d, "bin", n)) != py: say("bin/" + n + " is not " + py)
cfg = dict(l.split("=", 1) for l in open(os.path.join(d, "pyvenv.cfg")) if "=" in l)
cfg = {{k.strip(): v.strip() for k, v in cfg.items()}}
if cfg.get("include-system-site-packages") != "false" or \
        os.path.realpath(os.path.join(cfg.get("home", "/"), "python3")) != py: say("pyvenv.cfg")
nev = "#!" + os.path.join(d, "bin", "python") + "\\n" + {LAUNCHER!r} + "\\n"
b = os.path.join(d, "bin", "nev")
if os.path.islink(b) or open(b).read() != nev:
    say("bin/nev")
seen = set()
for top, dirs, files in os.walk(sp):
    if "__pycache__" in dirs:
        shutil.rmtree(os.path.join(top, "__pycache__"))
        dirs.remove("__pycache__")
    for f in files:
        p = os.path.join(top, f)
        rel = os.path.relpath(p, sp)
        if rel not in want:
            if os.path.basename(top).endswith(".dist-info") and f in {PIP_MADE!r}: continue
            say(rel + " is in no wheel")
        if os.path.islink(p): say(rel + " is a link")
        h = hashlib.sha256()
        with open(p, "rb") as x:
            for b in iter(lambda: x.read(1 << 20), b""): h.update(b)
        if "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode() != want[rel]:
            say(rel + " changed")
        seen.add(rel)
miss = sorted(set(want) - seen)
if miss: say(miss[0] + " is missing")
print("ok")
"""


def manifest(house: Path) -> dict[str, str]:
    """Every file the wheelhouse's wheels (pip's aside: the install does not keep it) put in
    site-packages, with its hash as the wheel's RECORD gives it (`sha256=<urlsafe base64>`);
    what an install of this key must hold, read from the wheels on this development box."""
    import csv
    import zipfile

    out: dict[str, str] = {}
    for whl in sorted(house.glob("*.whl")):
        if whl.name.startswith("pip-"):
            continue
        with zipfile.ZipFile(whl) as zf:
            records = [n for n in zf.namelist()
                       if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
            if len(records) != 1:
                raise NevError(f"wheel {whl} has no single RECORD; remove {house} and try again")
            text = zf.read(records[0]).decode("utf-8")
        for row in csv.reader(text.splitlines()):
            if len(row) < 2 or not row[1] or row[0].split("/", 1)[0].endswith(".data"):
                continue
            out[row[0]] = row[1]
    return out


def unfit_wheels(house: Path, lane_py: str, lane_machine: str) -> list[str]:
    """The wheels of the wheelhouse a lane with CPython `lane_py` ("311") on `lane_machine`
    ("x86_64") cannot install: one built for another CPython (not abi3, or abi3 newer than the
    lane's), or for another machine. Nothing is said of a lane whose python3 did not answer."""
    if not lane_py.isdigit() or not lane_machine:
        return []
    out = []
    for whl in sorted(house.glob("*.whl")):
        pys, abi, plat = (part.split(".") for part in whl.name[:-4].split("-")[-3:])
        cp = [int(p[3:]) for p in pys if p.startswith("cp") and p[3:].isdigit()]
        if abi == ["abi3"]:
            fits = bool(cp) and int(lane_py[1:]) >= min(cp)
        elif any(a.startswith("cp") for a in abi):
            fits = f"cp{lane_py}" in pys
        else:
            fits = True
        if fits and plat != ["any"] and not any(p.endswith(lane_machine) for p in plat):
            fits = False
        if not fits:
            out.append(whl.name.split("-")[0])
    return out


def _unfit(target: object, py: str, machine: str, misfits: list[str]) -> NevError:
    there = f"{py[:1]}.{py[1:]}"
    return NevError(f"{target}'s python3 is {there} on {machine}; this nev's wheels are for this "
                    f"box's Python {sys.version_info[0]}.{sys.version_info[1]} on "
                    f"{os.uname().machine} ({', '.join(misfits[:3])}); install nev here with "
                    f"Python {there} (pipx install --python python{there}, uv tool install "
                    f"--python {there}) and run again; nothing was sent")


def verify_command(key: str) -> str:
    """The lane's check of the install of `key` (its manifest on stdin): `ok` or `differs: ...`."""
    return f'python3 -I -S -c {shlex.quote(VERIFY)} "$HOME/{install_dir(key)}"'


def set_aside_command(key: str) -> str:
    """The install of `key` renamed to `.gone-<key>.<pid>` (the sweep removes it once nothing runs
    from it), under the install lock."""
    gone = f"{layout.NEV_INSTALLS}/{layout.INSTALL_GONE}{key}.$$"
    return (f'cd "$HOME" && exec 9>{layout.INSTALL_LOCK} && flock 9 && '
            f'mv -T {install_dir(key)} {gone}')


def install(conn: Connection, cache: Path) -> tuple[bool, str]:
    """Install nev on the lane behind `conn`; returns (changed, the lane's one-line report).
    Changed means a new install was built; flipping back to one already there is not a change."""
    import json

    house, key = wheelhouse(cache, say=ui.info)
    probe = conn.run(f"sh -c {shlex.quote(PROBE)} sh {key}")
    lines = [w for w in probe.out.split() if not w.startswith("python=")]
    py, _, machine = next((w[7:] for w in probe.out.split() if w.startswith("python=")),
                          "").partition("/")
    misfits = unfit_wheels(house, py, machine)
    if "present" in lines:
        want = json.dumps(manifest(house)).encode()
        check = conn.run(verify_command(key), stdin=want, timeout=300)
        said = (check.out.strip().splitlines()
                or [check.err.strip() or f"exit {check.exit_status}"])[-1]
        if said != "ok":
            aside = conn.run(set_aside_command(key))
            if aside.exit_status != 0:
                last = (aside.err.strip().splitlines() or ['?'])[-1]
                raise NevError(f"the install of nev {key} on {conn.target} {said}, and moving it "
                               f"aside failed: {last}")
            what = said.replace("differs: ", "differs (")
            ui.info(f"{conn.target}: the install of nev {key} {what}); moved it aside, "
                    "installing it anew")
            lines = [x for x in lines if x != "present"]
    if lines == [f"installs/{key}", "ok", "present"]:
        return False, f"unchanged: nev {key} already installed"
    if misfits and "present" not in lines:
        raise _unfit(conn.target, py, machine, misfits)
    tar = b"" if "present" in lines else wheel_tar(house)
    res = conn.run(remote_script(key), stdin=tar, timeout=900)
    if res.exit_status != 0:
        last = (res.err.strip().splitlines() or [f"exit {res.exit_status}"])[-1]
        raise NevError(f"installing nev on {conn.target} failed: {last}")
    line = res.out.strip().splitlines()[-1]
    return line.startswith("changed:"), line


def default_cache() -> Path:
    return Path.home() / ".cache" / "nev" / "wheelhouse"
