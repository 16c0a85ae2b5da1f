"""scripts/setup on a machine without npm or Rust: it installs Debian's, or says in one line how to get them.

Each test runs the real script with PATH stripped of a program. With NEV_SETUP_SKIP_APT=1 it may
install nothing and must stop at the missing program with the one-line message; with --check it
says what a real run would install from Debian (the install itself, apt-get as root, is the same
list a real run passes to apt-get). Neither mode reaches the virtualenv or changes the machine.
"""

import os
import subprocess
from pathlib import Path

from lanes.base.rustversion import minimum

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "scripts" / "setup"
MINIMUM = minimum(ROOT / "crates_bridge" / "engine" / "Cargo.toml")


def path_without(names: set[str], tmp: Path) -> str:
    """This PATH with `names` gone: a folder holding one of them is replaced by a folder of links
    to everything else in it."""
    dirs = []
    for i, d in enumerate(os.environ["PATH"].split(os.pathsep)):
        p = Path(d)
        if not any((p / n).exists() for n in names):
            dirs.append(d)
            continue
        copy = tmp / f"path{i}"
        copy.mkdir()
        for entry in p.iterdir():
            if entry.name not in names:
                (copy / entry.name).symlink_to(entry)
        dirs.append(str(copy))
    return os.pathsep.join(dirs)


def run_setup(tmp: Path, without: set[str], *args: str, skip_apt: bool = False,
              extra_path: str | None = None) -> subprocess.CompletedProcess:
    path = path_without(without, tmp)
    left = subprocess.run(["bash", "-c", "command -v " + " ".join(sorted(without)) + " || true"],
                          env={**os.environ, "PATH": path}, capture_output=True, text=True)
    assert left.stdout == "", f"still on PATH: {left.stdout}"
    env = {**os.environ, "PATH": f"{extra_path}:{path}" if extra_path else path,
           "NEV_VENV": str(tmp / "venv")}
    env.pop("NEV_SETUP_SKIP_APT", None)
    if skip_apt:
        env["NEV_SETUP_SKIP_APT"] = "1"
    return subprocess.run([str(SETUP), *args], env=env, capture_output=True, text=True, timeout=300)


def test_setup_without_rust_stops_with_one_line_naming_the_minimum_and_rustup(tmp_path):
    cp = run_setup(tmp_path, {"cargo", "rustc"}, skip_apt=True)
    assert cp.returncode == 1
    [line] = cp.stderr.splitlines()
    assert line.startswith("setup: rustc is not installed; the engine needs Rust " + MINIMUM + " or newer")
    assert "rustup" in line and "apt-get install rustc-web cargo-web" in line
    assert "virtualenv" not in cp.stdout and not (tmp_path / "venv").exists()


def test_setup_with_debians_rust_163_stops_naming_the_version_found_and_the_minimum(tmp_path):
    fake = tmp_path / "debian-rust"
    fake.mkdir()
    for name, line in (("rustc", "rustc 1.63.0"), ("cargo", "cargo 1.65.0")):   # bookworm's rustc, cargo 0.66
        (fake / name).write_text(f"#!/bin/sh\necho '{line}'\n")
        (fake / name).chmod(0o755)
    cp = run_setup(tmp_path, {"cargo", "rustc"}, skip_apt=True, extra_path=str(fake))
    assert cp.returncode == 1
    [line] = cp.stderr.splitlines()
    assert line.startswith(f"setup: rustc 1.63.0 is older than Rust {MINIMUM}, the engine's minimum: ")
    assert "rustup" in line


def test_setup_without_rust_would_install_debians_rust_web(tmp_path):
    cp = run_setup(tmp_path, {"cargo", "rustc"}, "--check")
    assert cp.returncode == 1, cp.stderr
    [plan] = [x for x in cp.stdout.splitlines() if "would install" in x]
    assert plan.split(": ", 1)[1].split()[-2:] == ["rustc-web", "cargo-web"]
    assert "npm" not in plan.split()


def test_setup_without_npm_would_install_debians_npm(tmp_path):
    cp = run_setup(tmp_path, {"npm"}, "--check")
    assert cp.returncode == 1, cp.stderr
    [plan] = [x for x in cp.stdout.splitlines() if "would install" in x]
    assert "npm" in plan.split(": ", 1)[1].split() and "rustc-web" not in plan


def test_setup_without_npm_and_no_apt_says_how_to_get_it(tmp_path):
    cp = run_setup(tmp_path, {"npm"}, skip_apt=True)
    assert cp.returncode == 1
    assert cp.stderr.splitlines() == [
        "setup: npm is missing; install Debian's (apt-get install npm: enough for the pinned Dagu package) "
        "or Node.js 20 with its npm"]


def test_setup_check_changes_nothing_and_reports_the_virtualenv_it_would_make(tmp_path):
    cp = run_setup(tmp_path, set(), "--check")
    assert f"would make the virtualenv {tmp_path / 'venv'}" in cp.stdout
    assert cp.returncode == 1 and not (tmp_path / "venv").exists()
    assert any(x.endswith(f"(the engine needs {MINIMUM})") and "unchanged: Rust: rustc " in x
               for x in cp.stdout.splitlines())


def test_setup_says_when_npm_cannot_fetch_dagu(tmp_path):
    fake = tmp_path / "npm-offline"
    fake.mkdir()
    (fake / "npm").write_text("#!/bin/sh\necho 'npm ERR! code SELF_SIGNED_CERT_IN_CHAIN' >&2\nexit 1\n")
    (fake / "npm").chmod(0o755)
    env_dagu = tmp_path / "dagu-cache"
    path = path_without({"npm"}, tmp_path)
    cp = subprocess.run([str(SETUP)], capture_output=True, text=True, timeout=300,
                        env={**os.environ, "PATH": f"{fake}:{path}", "NEV_SETUP_SKIP_APT": "1",
                             "NEV_DAGU_CACHE": str(env_dagu), "NEV_VENV": str(tmp_path / "venv")})
    assert cp.returncode == 1
    assert cp.stderr.splitlines()[-1].startswith("setup: npm could not fetch @dagu-org/dagu-linux-x64@")
    assert "SELF_SIGNED_CERT_IN_CHAIN" in cp.stderr
    assert not env_dagu.exists() and not (tmp_path / "venv").exists()
