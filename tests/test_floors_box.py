"""Floors on fresh ground truth, on a rig-in-a-box lane: `nev floors check` and `nev scores` from
this (dev) box run on the lane (its installed nev, its own three browsers), which builds each corpus
the engine lists with Chromium, Firefox and WebKit; a corpus built with two browsers is refused as
ground truth, and a lane missing a browser fails the check naming it (exit 11 both)."""

from __future__ import annotations

import json
import shutil

import pytest

from bench import floors, scores
from crates_bridge.workspace import EXAMPLE_ENGINE
from lanes.base.errors import NevError
from rig.box.netns import run_in
from tests.helpers import lane_helpers as h
from tests.helpers import lane_rig as rigs

CASES = 100
HIDDEN = "/usr/bin/firefox-esr.hidden-by-nev-test"


@pytest.fixture(scope="module")
def lane_engine(box, tmp_path_factory):
    """A dev worktree holding the example engine (floors 0/0, no corpus), lane 0 with this tree's nev."""
    rig = rigs.on_box(box, tmp_path_factory.mktemp("floorsbox"))
    try:
        inst = h.nev(["lane", "install", "--lane", "0"], rig.env, timeout=900)
        assert inst.returncode == 0, inst.stderr[-3000:]
        wt = h.clone_worktree(rig.clone_url, rig.tmp / ("floors" + rig.tag), rig.push_env)
        shutil.copytree(EXAMPLE_ENGINE, wt / "crates_bridge" / "engine", ignore=shutil.ignore_patterns("target"))
        with open(wt / ".gitignore", "a") as f:
            f.write("target/\n/corpus/\n")
        h.git(wt, "add", "-A")
        h.git(wt, "commit", "-qm", "the example engine")
        lane = box.lanes[0]
        # a corpus store of this module's own (NEV_* settings travel to the lane), so the lane renders
        env = {**rig.env, "NEV_CORPUS_CASES": str(CASES), "NEV_CORPUS_STORE": f"{lane.shared}/corpora-floors{rig.tag}"}
        env.pop("NEV_ON_LANE", None)
        yield rig, wt, env, lane
    finally:
        rig.stop()


def _engines_on_lane(rig, wt, name: str) -> dict:
    out = rig.lane_git(h.copy_name(wt), f"cat corpus/{name}/manifest.json")
    return json.loads(out)


def test_a_corpus_built_with_two_browsers_is_refused_as_ground_truth_on_a_lane(lane_engine):
    rig, wt, env, lane = lane_engine
    two = h.nev(["lane", "on", "--lane-only", str(wt), "sh", "-c",
                 f"NEV_CORPUS_STORE={env['NEV_CORPUS_STORE']} nev oracle build block_width --engines chromium,firefox "
                 "--cases 40"], env, timeout=900)
    assert two.returncode == 0, two.stderr[-3000:]
    assert sorted(_engines_on_lane(rig, wt, "block_width")["engines"]) == ["chromium", "firefox"]
    r = h.nev(["floors", "check", "--repo", str(wt)], env, timeout=1800)
    assert r.returncode == 11, r.stdout[-2000:] + r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("nev: /srv/lane/") and "corpus/block_width is not ground truth for the floors: it was " \
        "built with chromium, firefox only (no webkit)" in last and "remove it and score again" in last, last
    assert r.stdout == ""   # nothing scored
    assert sorted(_engines_on_lane(rig, wt, "block_width")["engines"]) == ["chromium", "firefox"]  # left as it was
    # removed by a person: the scoring step builds every listed corpus with the three browsers
    rig.lane_git(h.copy_name(wt), "rm -rf corpus/block_width")
    s = h.nev(["scores", "--json", "--repo", str(wt)], env, timeout=1800)
    assert s.returncode == 0, s.stderr[-3000:]
    rows = {x["function"]: x for x in json.loads(s.stdout)}
    assert set(rows) == {"block_width", "abspos_width"}
    for f, row in rows.items():
        man = _engines_on_lane(rig, wt, f)
        assert sorted(man["engines"]) == ["chromium", "firefox", "webkit"] and man["generated"] == CASES
        assert row["cases_run"] == man["cases"] > 0 and row["cases_passed"] > 0 and row["status"] == "better"
        assert f"corpus/{f}: {man['cases']} agreed of {CASES} generated" in s.stderr


def test_a_lane_missing_a_browser_fails_the_floors_check_naming_it(box, lane_engine, monkeypatch):
    rig, wt, env, lane = lane_engine
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    hide = run_in(box, lane.name, ["sh", "-c", f"mv /usr/bin/firefox-esr {HIDDEN} && ! command -v firefox-esr"])
    assert hide.returncode == 0, hide.stderr
    try:
        r = h.nev(["floors", "check", "--repo", str(wt)], env, timeout=1800)
        assert r.returncode == 11, r.stdout[-2000:] + r.stderr[-3000:]
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("nev: firefox is not installed on ") and "install firefox-esr" in last, last
        assert "chromium" not in last.split(":")[1] and r.stdout == ""
        # the landing's scorer (the after-landing raise) fails with the lane's line and its code
        with pytest.raises(NevError) as e:
            scores.lane_scorer(floors.scoring_for(wt, env), env)
        assert e.value.exit_code == 11 and "exited 11: firefox is not installed on " in str(e.value)
        assert str(e.value).endswith("nothing was written")
    finally:
        back = run_in(box, lane.name, ["sh", "-c", f"mv {HIDDEN} /usr/bin/firefox-esr && command -v firefox-esr"])
        assert back.returncode == 0, back.stderr
    # Firefox back: the same check passes (every function above its 0/0 floor)
    ok = h.nev(["floors", "check", "--repo", str(wt)], env, timeout=1800)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert [ln.split()[0] for ln in ok.stdout.splitlines()] == ["abspos_width", "block_width"]
    assert all(" better " in ln for ln in ok.stdout.splitlines())
