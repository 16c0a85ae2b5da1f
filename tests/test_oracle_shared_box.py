"""Corpora once per rig, on the rig-in-a-box: two lane copies on two LXC lanes ask for the same
corpus at once; the lanes' own browsers start once for both, both copies get the same bytes
from the corpus store on the share, and a corpus with another key is rendered anew."""

from __future__ import annotations

import json
import re

import pytest

from bench.oracle import store
from tests.helpers import lane_helpers as h
from tests.helpers import lane_rig as rigs

pytestmark = pytest.mark.parts   # the three browsers run on the lanes
STARTING = "starting chromium, firefox, webkit ..."


@pytest.fixture(scope="module")
def two_lanes(box, tmp_path_factory):
    """Both box lanes in one lanes file, each with its own installed nev."""
    rig = rigs.on_box(box, tmp_path_factory.mktemp("corpstore"))
    try:
        data = json.loads(box.lanes_file.read_text())
        data["git_url"] = rig.env["NEV_LANE_GIT_URL"]
        assert len(data["lanes"]) == 2
        lanes = rig.tmp / "two-lanes.json"
        lanes.write_text(json.dumps(data))
        env = dict(rig.env, NEV_LANES_FILE=str(lanes))
        for i in ("0", "1"):
            inst = h.nev(["lane", "install", "--lane", i], env, timeout=900)
            assert inst.returncode == 0, inst.stderr[-3000:]
        yield rig, env
    finally:
        rig.stop()


def build_on(env, lane: str, wt, store_name: str, cases: int):
    # a store of this test's own on the share: a kept box's earlier runs never answer for it
    return h.nev_popen(["lane", "on", "--lane-only", "--lane", lane, "--pull", "corpus/block_width", str(wt),
                        "sh", "-c", f'NEV_CORPUS_STORE="$NEV_LANE_SHARED/{store_name}" '
                                    f"nev oracle build block_width --cases {cases}"],
                       env, text=True)


def test_two_copies_on_two_lanes_render_one_corpus_once_and_another_key_anew(two_lanes):
    rig, env = two_lanes
    store_name = "corpora-test" + rig.tag
    a = h.clone_worktree(rig.clone_url, rig.tmp / ("copy-a" + rig.tag), rig.push_env)
    b = h.clone_worktree(rig.clone_url, rig.tmp / ("copy-b" + rig.tag), rig.push_env)
    procs = [build_on(env, "0", a, store_name, 60), build_on(env, "1", b, store_name, 60)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-3000:] + out[-2000:]
        outs.append(out + err)
    # one start of the three browsers between the two lanes; the other copy copied
    assert sum(o.count(STARTING) for o in outs) == 1, outs
    renderer = next(o for o in outs if STARTING in o)
    copier = next(o for o in outs if STARTING not in o)
    assert "agreed of 60 generated" in renderer
    m = re.search(r"/corpus/block_width: copied from the corpus store \S+/(block_width-[0-9a-f]{16}) "
                  r".*nothing rendered", copier)
    assert m, copier
    entry = m.group(1)
    shared = rig.nas / store_name
    assert sorted(p.name for p in shared.iterdir()) == [entry, f"{entry}.lock"]
    for name in ("manifest.json", "cases.jsonl", "votes.jsonl"):
        data = (shared / entry / name).read_bytes()
        assert (a / "corpus" / "block_width" / name).read_bytes() == data
        assert (b / "corpus" / "block_width" / name).read_bytes() == data
    man = store.read_manifest(a / "corpus" / "block_width")
    assert man is not None and man.key is not None and man.key[:16] == entry[-16:]
    assert man.generated == 60 and man.cases is not None and man.cases >= 50
    key = man.key

    # another key (other seeds: the lanes' browsers are one version) is rendered anew, beside
    p = build_on(env, "1", b, store_name, 61)
    out, err = p.communicate(timeout=900)
    assert p.returncode == 0, err[-3000:]
    assert (out + err).count(STARTING) == 1 and "agreed of 61 generated" in out + err
    new = store.read_manifest(b / "corpus" / "block_width")
    assert new is not None and new.key is not None and new.key != key and new.generated == 61
    assert sorted(p.name for p in shared.iterdir() if not p.name.endswith(".lock")) == \
        sorted(f"block_width-{k[:16]}" for k in (key, new.key))
    assert store.up_to_date(shared / entry, key)
