"""A lane's nev installs are versioned and swapped atomically: the install script run for real
(`sh`, under a temporary HOME, as the lane user's session runs it), two different nevs installed
one after the other while a run of the first goes on; the sweep's survey and removal as the lane
agent does them. The "nev" installed is a wheel made here: nev's real entry (`rig/cli.py`, which
holds the install's in-use lock and pins the run) over a small command tree of its own."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from lanes import selfinstall, sweep
from lanes.agent import installs, layout, root
from lanes.agent.messages import RemoveRequest, RemoveResult, SurveyRequest

ROOT = Path(__file__).resolve().parent.parent
KEY_A, KEY_B = "aaaaaaaaaaaaaaa1", "bbbbbbbbbbbbbbb2"

# The command tree of the test's nev: `hold GO OUT` writes where it runs from, waits for the file
# GO, then calls `nev where` (found on PATH, as a job's stage calls it) and writes where that ran.
COMMANDS = """
import os, subprocess, sys, time
VERSION = {version!r}

def main(args):
    if args[0] == "where":
        print(VERSION, sys.prefix, os.environ.get("NEV_INSTALL", ""))
        return 0
    go, out = args[1], args[2]
    with open(out, "w") as f:
        f.write(f"started {{VERSION}} {{sys.prefix}}\\n")
    end = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < end:
        time.sleep(0.05)
    child = subprocess.run(["nev", "where"], capture_output=True, text=True).stdout.strip()
    mine = open(__file__).read()          # its own files are still there
    with open(out, "a") as f:
        f.write(f"child {{child}}\\nown-files {{'VERSION' in mine}}\\nfinished\\n")
    return 0
"""
MODULES = (
    "rig/__init__.py",
    "rig/cli.py",
    "lanes/__init__.py",
    "lanes/agent/__init__.py",
    "lanes/agent/layout.py",
    "lanes/base/__init__.py",
    "lanes/base/settings.py",
    "lanes/base/config.py",
    "lanes/base/errors.py",
    "lanes/base/exitcodes.py",
    "lanes/base/termsafe.py",
)


def _wheel(folder: Path, version: str) -> None:
    """A wheel named `nev` in `folder`: the entry `nev = rig.cli:run` and its commands."""
    files = {m: (ROOT / m).read_bytes() for m in MODULES}
    files["rig/commands.py"] = COMMANDS.format(version=version).encode()
    info = f"nev-{version}.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: nev\nVersion: {version}\n".encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{info}/entry_points.txt"] = b"[console_scripts]\nnev = rig.cli:run\n"
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(folder / f"nev-{version}-py3-none-any.whl", "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)


@pytest.fixture
def lane(tmp_path):
    """A lane user's home and its session's environment (this machine's python3 first on PATH)."""
    home = tmp_path / "home"
    home.mkdir()
    path = f"{Path(sys.base_prefix) / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    return home, {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8"}


def _tar(tmp_path: Path, version: str) -> bytes:
    house = tmp_path / f"house-{version}"
    house.mkdir()
    _wheel(house, version)
    return selfinstall.wheel_tar(house)


def _install(env: dict, key: str, tar: bytes) -> str:
    cp = subprocess.run(
        ["sh", "-c", selfinstall.remote_script(key)],
        input=tar,
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert cp.returncode == 0, cp.stderr.decode()
    return cp.stdout.decode().strip().splitlines()[-1]


def _survey(home: Path, monkeypatch) -> list[sweep.Decision]:
    monkeypatch.setenv("HOME", str(home))
    lane_root = home / "lane-root"
    lane_root.mkdir(exist_ok=True)
    facts = root.survey(SurveyRequest(root=str(lane_root)))
    return sweep.decide_installs(list(facts.installs), keep=1)


def _remove(home: Path, names: list[str], monkeypatch) -> RemoveResult:
    monkeypatch.setenv("HOME", str(home))
    return root.remove(RemoveRequest(root=str(home / "lane-root"), names=[], stamp="t", installs=names))


def _wait_for(path: Path, text: str, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(
        f"{text!r} never appeared in {path}: {path.read_text() if path.exists() else '-'}"
    )


def test_a_second_install_flips_the_link_and_a_running_nev_finishes_on_its_own(
    lane, tmp_path, monkeypatch
):
    home, env = lane
    tar_a, tar_b = _tar(tmp_path, "1.0"), _tar(tmp_path, "2.0")
    assert _install(env, KEY_A, tar_a).startswith(f"changed: nev {KEY_A} installed")
    share = home / layout.NEV_SHARE
    inst_a, inst_b = home / selfinstall.install_dir(KEY_A), home / selfinstall.install_dir(KEY_B)
    assert os.readlink(share / "current") == f"installs/{KEY_A}"
    assert os.readlink(home / selfinstall.LINK) == f"{home}/{selfinstall.CURRENT}/bin/nev"
    script = (inst_a / "bin" / "nev").read_text()  # names its interpreter by the final folder
    assert f"{inst_a}/bin/python" in script.splitlines()[1 if script.startswith("#!/bin/sh") else 0]
    assert layout.INSTALL_TMP not in script

    out, go = tmp_path / "run-a.txt", tmp_path / "go"
    run_a = subprocess.Popen(
        [str(home / selfinstall.LINK), "hold", str(go), str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(out, "started")
        assert out.read_text().split()[1:] == ["1.0", str(inst_a)]

        assert _install(env, KEY_B, tar_b).startswith(f"changed: nev {KEY_B} installed")
        assert os.readlink(share / "current") == f"installs/{KEY_B}"
        assert (share / "installed").read_text().strip() == KEY_B
        now = subprocess.run(
            [str(home / selfinstall.LINK), "where"], env=env, capture_output=True, text=True
        )
        assert now.stdout.split()[:2] == ["2.0", str(inst_b)], now.stderr

        # A runs on: the sweep keeps its install (its in-use lock is held), even asked by name.
        kept = {d.name: d for d in _survey(home, monkeypatch)}
        assert not kept[KEY_A].remove and "in use" in kept[KEY_A].why, kept[KEY_A]
        assert not kept[KEY_B].remove and kept[KEY_B].why == "the current install"
        forced = _remove(home, [KEY_A], monkeypatch)
        assert (
            forced.installs_removed == [] and "lock is held" in forced.installs_failed[KEY_A]
        )
        assert (inst_a / "bin" / "nev").exists()
    finally:
        go.touch()
        stdout, stderr = run_a.communicate(timeout=60)
    assert run_a.returncode == 0, stderr
    lines = out.read_text().splitlines()
    # its child `nev`, started after the flip, ran A too (pinned), and A's files were all there
    assert lines[1:] == [f"child 1.0 {inst_a} {inst_a}", "own-files True", "finished"], lines

    # A ended: the sweep removes it now (one install kept, the current one), never B.
    plan = {d.name: d.remove for d in _survey(home, monkeypatch)}
    assert plan == {KEY_A: True, KEY_B: False}
    done = _remove(home, [KEY_A], monkeypatch)
    assert done.installs_removed == [KEY_A] and not inst_a.exists()
    assert sorted(p.name for p in (share / "installs").iterdir()) == [KEY_B]

    # Installing B again builds nothing (no tar needed); installing A again builds it anew.
    assert _install(env, KEY_B, b"") == f"unchanged: nev {KEY_B} already installed"
    assert _install(env, KEY_A, tar_a).startswith(f"changed: nev {KEY_A} installed")
    assert _install(env, KEY_B, b"").startswith(f"unchanged: nev {KEY_B} already installed in ")
    assert os.readlink(share / "current") == f"installs/{KEY_B}"


def test_a_nev_started_by_path_under_a_pinned_run_hands_over_to_the_pinned_install(lane, tmp_path):
    """A stage that calls `~/.local/bin/nev` by its path (not through PATH) after the link flipped
    still runs the install its job's run started with."""
    home, env = lane
    _install(env, KEY_A, _tar(tmp_path, "1.0"))
    _install(env, KEY_B, _tar(tmp_path, "2.0"))
    inst_a = home / selfinstall.install_dir(KEY_A)
    cp = subprocess.run(
        [str(home / selfinstall.LINK), "where"],
        env={**env, "NEV_INSTALL": str(inst_a)},
        capture_output=True,
        text=True,
    )
    assert cp.stdout.split() == ["1.0", str(inst_a), str(inst_a)], cp.stderr
    alone = subprocess.run(
        [str(home / selfinstall.LINK), "where"], env=env, capture_output=True, text=True
    )
    assert alone.stdout.split()[0] == "2.0"


def test_the_sweep_keeps_the_newest_installs_and_the_current_one():
    def ins(name: str, chosen: float, **kw) -> sweep.Install:
        return sweep.Install(
            name, kw.pop("kind", "install"), kw.pop("current", False), chosen=chosen, **kw
        )

    plan = {
        d.name: d.remove
        for d in sweep.decide_installs(
            [
                ins("a" * 16, 1),
                ins("b" * 16, 5, current=True),
                ins("c" * 16, 9),
                ins("d" * 16, 3),
                ins("e" * 16, 0, pids=((7, "nev"),)),
                ins(".tmp-x", 0, kind="tmp", building=True),
                ins(".tmp-y", 0, kind="tmp"),
                ins(".gone-z.1", 0, kind="gone"),
                ins("venv", 0, kind="legacy"),
            ],
            keep=2,
        )
    }
    # kept: the current (b), the newest other (c), the one in use (e), a build under way
    assert plan == {
        "a" * 16: True,
        "b" * 16: False,
        "c" * 16: False,
        "d" * 16: True,
        "e" * 16: False,
        ".tmp-x": False,
        ".tmp-y": True,
        ".gone-z.1": True,
        "venv": True,
    }


def test_the_lanes_old_venv_is_reported_and_removed_once_nothing_runs_from_it(
    tmp_path, monkeypatch
):
    home = tmp_path / "home"
    venv = home / layout.NEV_LEGACY_VENV
    (venv / "bin").mkdir(parents=True)
    (home / ".local/bin").mkdir(parents=True)
    os.symlink(venv / "bin" / "nev", home / ".local/bin/nev")
    monkeypatch.setenv("HOME", str(home))
    facts = installs.facts(str(home), [])
    assert [(f.name, f.current) for f in facts] == [("venv", True)]  # still the lane's nev
    os.unlink(home / ".local/bin/nev")
    assert sweep.decide_installs(
        installs.facts(str(home), []), 2
    )[0].remove
    assert installs.remove(str(home), ["venv"], []) == (["venv"], {}) and not venv.exists()


def test_two_sweeps_removing_the_same_old_install_both_succeed(tmp_path):
    """Two development boxes sweep the lane at once and chose the same old install: one sweep
    removes at a time (the sweep lock), the other finds it gone and counts it removed."""
    home = tmp_path / "home"
    old = home / layout.NEV_INSTALLS / ("a" * 16)
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "nev").write_text("#!/bin/sh\n")
    lock = home / layout.SWEEP_LOCK
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:     # the first sweep is removing it now
        fcntl.flock(held, fcntl.LOCK_EX)
        out: list = []
        second = threading.Thread(
            target=lambda: out.append(installs.remove(str(home), ["a" * 16], [])))
        second.start()
        time.sleep(0.3)
        assert second.is_alive()      # waits for the first sweep's removal
        os.rename(old, old.with_name(layout.INSTALL_GONE + "a" * 16 + ".1"))   # as remove_one does
        shutil.rmtree(old.with_name(layout.INSTALL_GONE + "a" * 16 + ".1"))
    second.join(10)
    assert out == [(["a" * 16], {})]
    assert installs.remove(str(home), [layout.INSTALL_GONE + "x.9"], []) == (
        [layout.INSTALL_GONE + "x.9"], {})      # a `.gone-*` another sweep finished: removed


def _verify(env: dict, key: str, house: Path) -> str:
    import json

    cp = subprocess.run(["sh", "-c", selfinstall.verify_command(key)], env=env, capture_output=True,
                        input=json.dumps(selfinstall.manifest(house)).encode(), timeout=120)
    assert cp.returncode == 0, cp.stderr.decode()
    return cp.stdout.decode().strip()


def test_an_install_whose_files_no_longer_match_its_keys_manifest_is_found_out(lane, tmp_path):
    """The check `nev lane install` makes of an install already there (`selfinstall.VERIFY`),
    against the manifest read from this box's wheels: an edited module, a `.pth` file dropped in
    site-packages, a relinked python or a rewritten `bin/nev` each differ; a compiled file planted
    in `__pycache__` is dropped (it cannot be checked), never run."""
    home, env = lane
    house = tmp_path / "house-1"
    house.mkdir()
    _wheel(house, "1")
    _install(env, KEY_A, selfinstall.wheel_tar(house))
    inst = home / selfinstall.install_dir(KEY_A)
    assert _verify(env, KEY_A, house) == "ok"
    site = next(inst.glob("lib/python*/site-packages"))
    assert not list(site.glob("pip*")), "pip stays in the install: the manifest cannot check it"
    cp = subprocess.run([str(inst / "bin" / "nev"), "where"], env=env, capture_output=True,
                        text=True)
    assert cp.returncode == 0 and cp.stdout.startswith("1 "), cp.stderr     # the launcher runs nev
    planted = site / "rig" / "__pycache__" / "planted.pyc"
    planted.parent.mkdir(exist_ok=True)
    planted.write_bytes(b"x")
    assert _verify(env, KEY_A, house) == "ok" and not planted.exists()
    cmds = site / "rig" / "commands.py"
    good = cmds.read_bytes()
    cmds.write_bytes(good + b"\nimport os\n")
    assert _verify(env, KEY_A, house) == "differs: rig/commands.py changed"
    cmds.write_bytes(good)
    (site / "zz-planted.pth").write_text("import os\n")
    assert _verify(env, KEY_A, house) == "differs: zz-planted.pth is in no wheel"
    (site / "zz-planted.pth").unlink()
    launcher = inst / "bin" / "nev"
    text = launcher.read_text()
    launcher.write_text(text + "import os\n")
    assert _verify(env, KEY_A, house) == "differs: bin/nev"
    launcher.write_text(text)
    (inst / "bin" / "python3").unlink()
    (inst / "bin" / "python3").symlink_to("/bin/sh")
    assert _verify(env, KEY_A, house).startswith("differs: bin/python")
