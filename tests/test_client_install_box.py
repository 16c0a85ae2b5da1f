"""The client install: nev installed by an ordinary user (uid 65534, no root) into a fresh
virtualenv made with the system's python3, from nev's wheels (offline, as a lane installs them),
with no Debian package added; configured by a config file in that user's HOME only, `nev
doctor --json` against the rig-in-a-box passes every check. `nev box` says in one line that it
needs root on Debian."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from lanes import selfinstall
from tests.helpers.dagu_helpers import DAGU

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534


def as_user(argv: list[str], home: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    clean = {"HOME": str(home), "PATH": f"{home / 'venv' / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8",
             **env}
    return subprocess.run(argv, cwd=home, env=clean, user=NOBODY, group=NOBODY, extra_groups=[],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def client_home(box):
    home = Path(tempfile.mkdtemp(prefix="nev-client-", dir="/tmp"))
    os.chmod(home, 0o755)
    os.chown(home, NOBODY, NOBODY)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def give(src: Path, dest: Path) -> None:
    shutil.copy(src, dest)
    os.chown(dest, NOBODY, NOBODY)
    dest.chmod(0o600)


def test_an_ordinary_user_installs_the_client_and_doctor_passes_against_the_box(box, client_home):
    house, _ = selfinstall.wheelhouse(selfinstall.default_cache())
    wheels = client_home / "wheels"
    shutil.copytree(house, wheels)
    for p in [wheels, *wheels.iterdir()]:
        os.chown(p, NOBODY, NOBODY)
    r = as_user(["/usr/bin/python3", "-m", "venv", str(client_home / "venv")], client_home)
    assert r.returncode == 0, r.stderr
    r = as_user([str(client_home / "venv" / "bin" / "pip"), "install", "-q", "--no-index",
                 "--find-links", str(wheels), "nev"], client_home)
    assert r.returncode == 0, r.stderr
    assert (client_home / "venv" / "bin" / "nev").is_file()

    # the box's settings, as files of this user's and one config file: no NEV_* variable
    cfg = client_home / ".config" / "nev"
    cfg.mkdir(parents=True)
    env = box.env
    for name, src in (("id_rig", env["NEV_SSH_KEY"]), ("known_hosts", env["NEV_KNOWN_HOSTS"]),
                      ("lanes.json", env["NEV_LANES_FILE"]), ("folknet.json", env["NEV_FOLKNET_FILE"]),
                      ("forge-token", env["NEV_FORGE_TOKEN_FILE"]), ("batch.key", env["NEV_MODEL_KEY_FILE"])):
        give(Path(src), cfg / name)
    (cfg / "config.toml").write_text(
        'ssh_key = "id_rig"\nknown_hosts = "known_hosts"\nlanes_file = "lanes.json"\n'
        'folknet_file = "folknet.json"\n'
        f'[lane]\njump = "{env["NEV_LANE_JUMP"]}"\n'
        f'[forge]\nurl = "{env["NEV_FORGE_URL"]}"\nuser = "{env["NEV_FORGE_USER"]}"\n'
        'token_file = "forge-token"\n'
        f'[model]\nurl = "{env["NEV_MODEL_URL"]}"\nkey_file = "batch.key"\n'
        f'[dagu]\nlane = 0\nbinary = "{DAGU}"\n[inventory]\nlane = 0\n')
    for p in (cfg.parent, cfg, cfg / "config.toml"):
        os.chown(p, NOBODY, NOBODY)
    root_env = {**env, "NEV_DAGU_BINARY": DAGU, "PYTHONPATH": str(ROOT)}
    up = subprocess.run([str(ROOT / ".venv" / "bin" / "nev"), "dagu", "up"], env={**os.environ, **root_env},
                        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert up.returncode == 0, up.stderr         # Dagu on lane 0, as the quickstart's step 4

    r = as_user([str(client_home / "venv" / "bin" / "nev"), "doctor", "--json"], client_home)
    checks = json.loads(r.stdout)
    failed = {c["check"]: c["detail"] for c in checks if not c["ok"]}
    assert r.returncode == 0 and not failed, failed
    assert any("client install" in c["detail"] for c in checks)

    r = as_user([str(client_home / "venv" / "bin" / "nev"), "box", "up"], client_home)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and "needs root on Debian" in lines[0], r.stderr
