"""A corpus built on a rig-in-a-box lane (real sshd, real gate) and pulled home with --pull."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import tempfile
from pathlib import Path

import pytest

from bench.oracle import store
from tests.helpers import lane_helpers as h
from tests.helpers import lane_rig as rigs

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def lane_python():
    """A Python the lane user can run, seeing this worktree's packages: a stand-in for the lane's
    installed nev (`nev lane install`), without installing it there."""
    base = Path(tempfile.mkdtemp(prefix="nev-lanepy-", dir="/tmp"))
    base.chmod(0o755)
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(base / "v")], check=True)
    sp = next(Path(p) for p in site.getsitepackages() if p.endswith("site-packages"))
    pth = next((base / "v" / "lib").glob("python3*/site-packages")) / "nev.pth"
    pth.write_text(f"{sp}\n{ROOT}\n")
    yield base / "v" / "bin" / "python"
    shutil.rmtree(base, ignore_errors=True)


def test_corpus_builds_on_a_box_lane_and_comes_back_with_pull(box, lane_python, tmp_path_factory):
    rig = rigs.on_box(box, tmp_path_factory.mktemp("oraclelane"))
    try:
        wt = h.clone_worktree(rig.clone_url, rig.tmp / ("oracle" + rig.tag), rig.push_env)
        r = h.nev(["lane", "on", "--lane-only", "--pull", "corpus/block_width", str(wt),
                   str(lane_python), "-m", "rig.cli", "oracle", "build", "block_width", "--cases", "200"],
                  rig.env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-2000:]
        assert "agreed of 200 generated" in r.stdout + r.stderr and "agreement: " in r.stdout + r.stderr
        home = wt / "corpus" / "block_width"
        man = store.read_manifest(home)
        assert man is not None and man["generated"] == 200 and man["cases"] >= 180
        assert store.verify(home) is None
        on_lane = rig.lane_root / wt.name / "corpus" / "block_width"
        assert (on_lane / "cases.jsonl").read_bytes() == (home / "cases.jsonl").read_bytes()
        assert os.stat(on_lane / "cases.jsonl").st_uid != 0  # written by the lane user, on the lane
    finally:
        rig.stop()
