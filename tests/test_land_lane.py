"""`nev land` through a real build lane of the rig-in-a-box: the gate runs on the lane (over
SSH, from the box's forge), strict or not, and the no-lane refusals with a lane file that
names lanes which do not answer."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import pytest

from rig.box.forge import create_repo

pytest.register_assert_rewrite("tests.helpers.landkit")

from tests.helpers.landkit import Kit, check_invariant  # noqa: E402

ON_LANE_GATE = 'test "$NEV_ON_LANE" = 1 && echo "gated-on-lane $(git rev-parse HEAD)"'


def lane_kit(box, tmp_path: Path, lanes: list[dict] | None = None, tracks: dict | None = None) -> tuple[Kit, str]:
    tag = secrets.token_hex(2)
    name = f"lt{tag}"
    k = Kit.create(tmp_path, tracks=tracks or {"verify": ON_LANE_GATE, "landChecks": [],
                                               "specWatch": {"pollEnv": {"NEV_LANE_STRICT": "1"}}})
    k.spec(name, ["src/**"])
    k.commit_main({f"specs/{name}.md": (k.primary / f"specs/{name}.md").read_text()}, "spec")
    url = create_repo(box, f"land-{tag}.git")
    askpass = {"GIT_ASKPASS": str(box.forge_askpass)}
    git_env = {**k.env(), **askpass}
    import subprocess

    subprocess.run(["git", "-C", str(k.primary), "push", "-q", box.dev_url(url), "main"], check=True, env=git_env,
                   capture_output=True)
    lanes_file = tmp_path / "lanes.json"
    data = json.loads(box.lanes_file.read_text())
    if lanes is not None:
        data["lanes"] = lanes
    data["git_url"] = url
    lanes_file.write_text(json.dumps(data))
    k.extra_env = {**box.env, **askpass, "NEV_LANES_FILE": str(lanes_file), "NEV_LANE_GIT_URL": url,
                   "NEV_ON_LANE": ""}
    return k, name


def gated_on_lane(text: str) -> list[str]:
    return re.findall(r"gated-on-lane ([0-9a-f]{40})", text)


def test_strict_landing_runs_the_gate_on_a_real_lane_and_lands_that_tip(box, tmp_path: Path) -> None:
    k, name = lane_kit(box, tmp_path)
    old = k.rev("main")
    k.track(name, {"src/on-lane.txt": "gated there\n"})
    tip = k.rev(name)
    r = k.land(name, NEV_LANE_STRICT="1")
    assert r.rc == 0, r.text
    shas = gated_on_lane(r.text)
    assert len(shas) == 1  # the gate ran once, on the lane (NEV_ON_LANE=1 there)
    assert k.rev("main") == shas[0]
    assert k.show("main", "src/on-lane.txt") == "gated there\n"
    assert k.rev(f"refs/tags/spec/{name}/{k.spec_sha(name)}") == shas[0]
    (k.ctl / "gate.log").write_text(f"{shas[0]} pass\n")  # the lane's word for the invariant
    check_invariant(k, old, name, tip, landed=True)


def test_the_tick_lands_through_the_lane_with_poll_env(box, tmp_path: Path) -> None:
    k, name = lane_kit(box, tmp_path)
    old = k.rev("main")
    k.track(name)
    tip = k.rev(name)
    assert k.nev("approve", name).rc == 0
    r = k.nev("--approved")
    assert r.rc == 0, r.text
    assert "NEV_LANE_STRICT=1" in r.err
    shas = gated_on_lane(r.text)
    assert shas and k.rev("main") == shas[-1]
    (k.ctl / "gate.log").write_text(f"{shas[-1]} pass\n")
    check_invariant(k, old, name, tip, landed=True)


def test_strict_with_no_lane_answering_refuses_exit_3_and_runs_nothing(box, tmp_path: Path) -> None:
    dead = [{"ssh": f"lane@{box.lanes[0].addr}:2", "root": "/srv/lane"}]
    k, name = lane_kit(box, tmp_path, lanes=dead)
    old = k.rev("main")
    k.track(name)
    tip = k.rev(name)
    r = k.land(name, NEV_LANE_STRICT="1")
    assert r.rc == 1
    assert "verify failed on the tip (exit 3: no build lane answered" in r.err
    assert gated_on_lane(r.text) == []
    check_invariant(k, old, name, tip, landed=False)


def test_not_strict_with_no_lane_answering_verify_refuses_exit_3_and_runs_nothing_here(box, tmp_path: Path) -> None:
    """Acceptance (#21): verify stays on a lane whether or not strict mode is set; with no lane
    answering and NEV_LANE_STRICT unset it does not fall back to this box."""
    dead = [{"ssh": f"lane@{box.lanes[0].addr}:2", "root": "/srv/lane"}]
    ran = tmp_path / "verify-ran-here"
    k, name = lane_kit(box, tmp_path, lanes=dead, tracks={
        "verify": f"touch {ran}; {ON_LANE_GATE}", "landChecks": [], "specWatch": {"pollEnv": {}}})
    old = k.rev("main")
    k.track(name)
    tip = k.rev(name)
    r = k.land(name, NEV_LANE_STRICT="")
    assert r.rc == 1
    assert "verify failed on the tip (exit 3: no build lane answered; nothing of the gate ran here)" in r.err
    assert not ran.exists() and gated_on_lane(r.text) == []
    check_invariant(k, old, name, tip, landed=False)


def test_sigkill_during_a_lane_gate_then_a_rerun_lands(box, tmp_path: Path) -> None:
    k, name = lane_kit(box, tmp_path)
    t = {"verify": 'test "$NEV_ON_LANE" = 1 && sleep 2 && echo "gated-on-lane $(git rev-parse HEAD)"',
         "landChecks": [], "specWatch": {"pollEnv": {"NEV_LANE_STRICT": "1"}}}
    k.commit_main({"tracks.json": json.dumps(t)})
    old = k.rev("main")
    k.track(name)
    tip, sha = k.rev(name), k.spec_sha(name)
    r = k.land(name, NEV_LANE_STRICT="1", NEV_LAND_FAULT="gate")
    assert r.rc == -9 and "NEV_LAND_FAULT=gate" in r.err
    assert k.rev("main") == old and k.rev(name) == tip
    rr = k.land(name, tip=tip, spec_sha=sha, NEV_LANE_STRICT="1")
    assert rr.rc == 0, rr.text
    shas = gated_on_lane(rr.text)
    assert shas and k.rev("main") == shas[-1]
    assert k.rev(f"refs/tags/spec/{name}/{sha}") == shas[-1]
    (k.ctl / "gate.log").write_text(f"{shas[-1]} pass\n")
    check_invariant(k, old, name, tip, landed=True)


def test_a_landing_sweeps_the_tracks_copy_off_the_lane(box, tmp_path: Path) -> None:
    """The after-step `lanes.sweep.after_landing` (its "skipped" path, with no lane configured, is
    tested in test_land_scenarios): a `--check` leaves the gate's copy on the lane it ran on; the
    landing that follows removes it from every lane."""
    from lanes.base.gitrun import Repo
    from lanes.payload import copy_name_of

    k, name = lane_kit(box, tmp_path)
    old = k.rev("main")
    k.track(name, {"src/swept.txt": "landed, then swept\n"})
    tip = k.rev(name)
    # the gate ships the landing's private worktree, <git-dir>/nev/land-wt/<name>: its copy's name
    copy = copy_name_of(Repo(k.primary), folder=name)
    c = k.land(name, "--check", NEV_LANE_STRICT="1")
    assert c.rc == 0, c.text
    assert len(gated_on_lane(c.text)) == 1
    holders = [ln for ln in box.lanes if (ln.host_root / copy).is_dir()]
    assert len(holders) == 1, [str(ln.host_root) for ln in box.lanes]
    r = k.land(name, NEV_LANE_STRICT="1")
    assert r.rc == 0, r.text
    assert f"removed {copy}" in r.out
    assert "lane copies: skipped" not in r.text and "lane copies: failed" not in r.text
    assert [ln for ln in box.lanes if (ln.host_root / copy).exists()] == []
    shas = gated_on_lane(r.text)
    assert shas and k.rev("main") == shas[-1]
    (k.ctl / "gate.log").write_text(f"{shas[-1]} pass\n")
    check_invariant(k, old, name, tip, landed=True)
