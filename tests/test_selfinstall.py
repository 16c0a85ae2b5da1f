"""nev's own install on a lane: the wheelhouse is built by one builder at a time, and the lane's
install script takes a lock so two installs on one lane do not build or flip at once."""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import time
from pathlib import Path

from lanes import selfinstall


def test_two_builders_of_one_wheelhouse_take_turns_and_the_second_finds_it_built(tmp_path, monkeypatch):
    root = tmp_path / "src"
    for pkg in selfinstall.PACKAGES:
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text("[project]\nname = 'nev'\n")
    (root / "build").mkdir()
    running, most, calls = [0], [0], []
    lock = threading.Lock()

    def fake_run(cmd, **_kw):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            calls.append(cmd[3])
        time.sleep(0.2)
        if cmd[3] == "wheel":
            assert not (root / "build").exists()      # emptied by this builder, not under another
            (Path(cmd[cmd.index("--wheel-dir") + 1]) / "nev-0-py3-none-any.whl").write_bytes(b"w")
        with lock:
            running[0] -= 1
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(selfinstall.subprocess, "run", fake_run)
    cache = tmp_path / "cache"
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(selfinstall.wheelhouse(cache, root))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(got) == 2 and got[0] == got[1]
    house, key = got[0]
    assert (house / ".complete").read_text() == key + "\n"
    assert most[0] == 1 and calls == ["wheel", "download"]   # built once, never two at a time


def test_the_lanes_install_script_waits_for_another_install_on_the_same_lane(tmp_path):
    home = tmp_path / "home"
    key = "0123456789abcdef"
    inst = home / selfinstall.install_dir(key)
    (inst / "bin").mkdir(parents=True)
    (inst / "bin" / "nev").write_text("#!/bin/sh\n")
    (inst / "bin" / "nev").chmod(0o755)
    (inst / ".in-use").write_text("")
    os.symlink(f"installs/{key}", home / selfinstall.CURRENT)
    (home / ".local/bin").mkdir(parents=True)
    os.symlink(f"{home}/{selfinstall.CURRENT}/bin/nev", home / selfinstall.LINK)
    lockfile = home / ".local/share/nev/install.lock"
    fd = os.open(lockfile, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)                      # another install is under way
    try:
        proc = subprocess.Popen(["sh", "-c", selfinstall.remote_script(key)], env={**os.environ, "HOME": str(home)},
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()   # still waiting for the lock
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.strip() == f"unchanged: nev {key} already installed"


def test_a_wheel_made_from_an_installed_distribution_installs_the_same_files(tmp_path):
    """A client install's wheelhouse (lanes/installwheels.py): click's wheel made from its files in
    this virtualenv, installed by pip with no index, puts exactly those files in place, and the
    lane's manifest (`selfinstall.manifest`) names each with its hash."""
    import sys
    from importlib import metadata

    from lanes import installwheels

    click = metadata.distribution("click")
    house = tmp_path / "house"
    house.mkdir()
    whl = installwheels.rebuild(click, house)
    assert whl.name.startswith(f"click-{click.version}-py3-none-any")
    target = tmp_path / "target"
    cp = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                         "--no-compile", "--target", str(target), str(whl)],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    want = selfinstall.manifest(house)
    made = dict(installwheels.files(click))
    assert set(want) == set(made) and any(n.endswith("/METADATA") for n in want)
    for name, src in made.items():
        assert (target / name).read_bytes() == src.read_bytes(), name


def test_the_client_wheelhouse_holds_nevs_requirements_and_not_its_extras():
    """What a client install sends the lanes: nev and what it needs here (the requirements'
    requirements too), not what its extras (dev, gateway) would add."""
    from lanes import installwheels

    names = {installwheels._norm(d.metadata["Name"]) for d in installwheels._closure()}
    assert {"nev", "click", "paramiko", "playwright", "pyyaml", "cryptography", "cffi",
            "pycparser", "idna"} <= names
    assert not names & {"pytest", "ruff", "mypy", "litellm", "ansible-core", "hypothesis"}
    assert installwheels._tags("Tag: cp311-cp311-manylinux_2_17_x86_64\n"
                               "Tag: cp311-cp311-manylinux2014_x86_64\n") \
        == "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64"


def test_wheels_a_lane_cannot_install_are_named_before_anything_is_sent(tmp_path):
    """A laptop's Python or machine that is not the lanes': the wheels built for it are named
    (pure ones and abi3 ones old enough fit any lane)."""
    for name in ("click-8.1-py3-none-any.whl", "bcrypt-5.0-cp39-abi3-manylinux_2_34_x86_64.whl",
                 "pyyaml-6.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                 "cffi-2.1-cp312-cp312-manylinux_2_17_x86_64.whl"):
        (tmp_path / name).write_bytes(b"")
    assert selfinstall.unfit_wheels(tmp_path, "311", "x86_64") == ["cffi"]
    assert selfinstall.unfit_wheels(tmp_path, "312", "x86_64") == ["pyyaml"]
    assert selfinstall.unfit_wheels(tmp_path, "311", "aarch64") == ["bcrypt", "cffi", "pyyaml"]
    assert selfinstall.unfit_wheels(tmp_path, "", "") == []       # no python3 answered there


def test_a_lane_whose_python_the_wheels_do_not_fit_is_refused_with_nothing_sent(tmp_path,
                                                                                monkeypatch):
    from types import SimpleNamespace

    import pytest

    from lanes.base.errors import NevError

    (tmp_path / "pyyaml-6.0-cp312-cp312-manylinux_2_17_x86_64.whl").write_bytes(b"")
    monkeypatch.setattr(selfinstall, "wheelhouse", lambda *a, **k: (tmp_path, "0" * 16))
    ran: list[str] = []

    class Lane:
        target = "lane@10.0.0.11"

        def run(self, cmd, stdin=None, timeout=None):
            ran.append(cmd)
            return SimpleNamespace(out="python=311/x86_64\n", err="", exit_status=0)

    with pytest.raises(NevError) as e:
        selfinstall.install(Lane(), tmp_path)          # type: ignore[arg-type]
    assert "lane@10.0.0.11's python3 is 3.11 on x86_64" in str(e.value)
    assert "(pyyaml)" in str(e.value) and "--python python3.11" in str(e.value)
    assert len(ran) == 1                               # the probe only: nothing was sent


def test_a_client_installs_key_is_its_files_not_where_its_virtualenv_is(tmp_path, monkeypatch):
    """The key of a client install's wheelhouse: the same files give the same key wherever the
    virtualenv is (a console script's RECORD hash holds its shebang's path: not counted), and
    a changed file of nev's gives another."""
    from importlib import metadata

    from lanes import installwheels

    def dist(site: Path, name: str, module: str, script_hash: str) -> metadata.Distribution:
        info = site / f"{name}-0.1.dist-info"
        info.mkdir(parents=True)
        (site / module).mkdir()
        (site / module / "cli.py").write_text("print(1)\n")
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        (info / "WHEEL").write_text("Wheel-Version: 1.0\nTag: py3-none-any\n")
        (info / "RECORD").write_text(f"{module}/cli.py,sha256=x,9\n{name}-0.1.dist-info/METADATA,,\n"
                                     f"{name}-0.1.dist-info/WHEEL,,\n../../bin/{name},{script_hash},99\n"
                                     f"{name}-0.1.dist-info/RECORD,,\n")
        return metadata.PathDistribution(info)

    def venv(where: Path, script_hash: str) -> list[metadata.Distribution]:
        site = where / "lib" / "site-packages"
        return [dist(site, "nev", "rig", script_hash), dist(site, "dep", "dep", script_hash)]

    a, b = venv(tmp_path / "a", "sha256=aaa"), venv(tmp_path / "b", "sha256=bbb")
    keys = []
    for dists in (a, b):
        monkeypatch.setattr(installwheels, "distributions", lambda d=dists: d)
        keys.append(installwheels.key())
    assert keys[0] == keys[1]
    (tmp_path / "b" / "lib" / "site-packages" / "rig" / "cli.py").write_text("print(2)\n")
    assert installwheels.key() != keys[0]
    whl = installwheels.rebuild(b[0], tmp_path)
    assert whl.name == "nev-0.1-py3-none-any.whl"
    assert set(selfinstall.manifest(tmp_path)) == {"rig/cli.py", "nev-0.1.dist-info/METADATA",
                                                   "nev-0.1.dist-info/WHEEL"}
