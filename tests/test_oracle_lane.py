"""A corpus built on a rig-in-a-box lane (real sshd, real gate) with the lane's own browsers and
its installed nev (`nev lane install`), pulled home with --pull, and equal byte for byte to one
built here with the same engine versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.oracle import build as oracle_build
from bench.oracle import store
from tests.helpers import lane_helpers as h
from tests.helpers import lane_rig as rigs

ROOT = Path(__file__).resolve().parent.parent
CASES = "200"


@pytest.fixture(scope="module")
def lane_corpus(box, tmp_path_factory):
    """`nev lane install`, then `nev oracle build` through a gate on lane 0 with the lane's nev."""
    rig = rigs.on_box(box, tmp_path_factory.mktemp("oraclelane"))
    try:
        inst = h.nev(["lane", "install", "--lane", "0"], rig.env, timeout=900)
        assert inst.returncode == 0, inst.stderr[-3000:]
        wt = h.clone_worktree(rig.clone_url, rig.tmp / ("oracle" + rig.tag), rig.push_env)
        # `nev` on the lane is the lane's own install (the gate puts ~/.local/bin first); nothing
        # of this machine's Python is visible there.
        r = h.nev(["lane", "on", "--lane-only", "--pull", "corpus/block_width", str(wt), "sh", "-c",
                   f"command -v nev && python3 -c 'import sys; print(sys.prefix)' && "
                   # a corpus store of this test's own: the lane renders even on a kept box
                   f'NEV_CORPUS_STORE="$NEV_LANE_SHARED/corpora-test{rig.tag}" '
                   f"nev oracle build block_width --cases {CASES}"],
                  rig.env, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-2000:]
        yield rig, wt, r
    finally:
        rig.stop()


def test_corpus_builds_on_a_box_lane_with_its_installed_nev_and_comes_back_with_pull(lane_corpus):
    rig, wt, r = lane_corpus
    out = r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == "/home/lane/.local/bin/nev", r.stdout[:500]
    assert "agreed of 200 generated" in out and "agreement: " in out
    home = wt / "corpus" / "block_width"
    man = store.read_manifest(home)
    assert man is not None and man.generated == 200 and man.cases >= 180
    assert sorted(man.engines or {}) == ["chromium", "firefox", "webkit"]
    assert store.verify(home) is None
    on_lane = rig.lane_root / h.copy_name(wt) / "corpus" / "block_width"
    assert (on_lane / "cases.jsonl").read_bytes() == (home / "cases.jsonl").read_bytes()
    assert os.stat(on_lane / "cases.jsonl").st_uid != 0  # written by the lane user, on the lane


def test_a_corpus_built_on_a_lane_equals_one_built_here_with_the_same_engines(lane_corpus, tmp_path):
    _rig, wt, _r = lane_corpus
    lane_dir = wt / "corpus" / "block_width"
    lane_man = store.read_manifest(lane_dir)
    assert lane_man is not None
    here = oracle_build.probe_versions(("chromium", "firefox", "webkit"))
    if here != lane_man.engines:
        # The corpus key holds the versions: corpora of other engine versions are different
        # corpora, so they are not compared byte for byte. Say which differ.
        diff = {n: ((lane_man.engines or {}).get(n), v) for n, v in here.items() if (lane_man.engines or {}).get(n) != v}
        pytest.fail(f"engine versions differ (lane, here): {diff}; the image's apt sources must be this "
                    "machine's (lanes/create.py ImageRecipe.sources); not compared")
    corpus_root = tmp_path / "corpus"
    cp = subprocess.run([sys.executable, "-m", "rig.cli", "oracle", "build", "block_width", "--cases", CASES],
                        cwd=tmp_path, capture_output=True, text=True, timeout=900,
                        env={**os.environ, "PYTHONPATH": str(ROOT), "NEV_CORPUS_DIR": str(corpus_root)})
    assert cp.returncode == 0, cp.stderr[-3000:]
    here_dir = corpus_root / "block_width"
    names = sorted(p.name for p in here_dir.iterdir())
    assert names == sorted(p.name for p in lane_dir.iterdir()) == ["cases.jsonl", "manifest.json", "votes.jsonl"]
    for name in names:
        assert (here_dir / name).read_bytes() == (lane_dir / name).read_bytes(), (
            f"{name} differs between the lane's corpus and this machine's "
            f"(keys {str(lane_man.key)[:12]} and {json.loads((here_dir / 'manifest.json').read_text())['key'][:12]})")
