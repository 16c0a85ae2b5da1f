"""`nev lane install`: the lane gets this very nev, offline, and a second install is a no-op."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nev(*args, env):
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=900)


def test_install_puts_this_nev_on_the_lane_and_second_run_changes_nothing(box, tmp_path):
    env = {**os.environ, **box.env, "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/root")}
    first = nev("lane", "install", "--lane", "1", env=env)
    assert first.returncode == 0, first.stderr
    assert "lane 1" in first.stdout and ("changed: nev" in first.stdout or "unchanged: nev" in first.stdout)
    second = nev("lane", "install", "--lane", "1", env=env)
    assert second.returncode == 0, second.stderr
    assert "unchanged: nev" in second.stdout

    # An install whose files no longer match its key's manifest is built anew, not reused.
    from lanes import selfinstall

    key = selfinstall.source_key()
    inst = box.lanes[1].host_home / selfinstall.install_dir(key)
    edited = next(inst.glob("lib/python*/site-packages/lanes/__init__.py"))
    good = edited.read_bytes()
    with edited.open("ab") as f:
        f.write(b"import os  # planted\n")
    third = nev("lane", "install", "--lane", "1", env=env)
    assert third.returncode == 0, third.stderr
    assert "differs (lanes/__init__.py changed); moved it aside, installing it anew" in third.stderr
    assert f"changed: nev {key} installed" in third.stdout
    assert next(inst.glob("lib/python*/site-packages/lanes/__init__.py")).read_bytes() == good

    # A gate on that lane finds `nev` on PATH (the lane's own install, not the dev box's).
    wt = tmp_path / "wt"
    subprocess.run(["git", "init", "-q", "-b", "main", str(wt)], check=True)
    (wt / "a.txt").write_text("x\n")
    subprocess.run(["git", "-C", str(wt), "add", "."], check=True)
    subprocess.run(["git", "-C", str(wt), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"], check=True)
    r = nev("lane", "run", "--lane", "1", str(wt), "sh", "-c", "command -v nev && nev --version", env=env)
    assert r.returncode == 0, r.stderr
    assert "/.local/bin/nev" in r.stdout and "nev, version" in r.stdout
