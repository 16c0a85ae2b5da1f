"""Conformance suites on the rig-in-a-box: a suite repository on the box's forge (check-layout
pages written for these tests, tests/helpers/suite_repo.py) is fetched once for two lanes (the
second lane's fetch never reaches the forge: its access log says so), run on a lane in the lane's
three browsers, and reports per engine exactly the expected failures: "no change" with the
expectations file, the Firefox failure as new without it."""

from __future__ import annotations

import json

import pytest

from tests.helpers import lane_helpers as h
from tests.helpers import lane_rig as rigs
from tests.helpers.suite_repo import FAILING, declare, make_suite_repo

pytestmark = pytest.mark.parts   # the three browsers run on the lanes


@pytest.fixture(scope="module")
def two_lanes(box, tmp_path_factory):
    """Both box lanes in one lanes file, each with its own installed nev."""
    rig = rigs.on_box(box, tmp_path_factory.mktemp("suites"))
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


def test_a_suite_is_fetched_once_for_two_lanes_and_run_on_a_lane(box, two_lanes):
    from rig.box.forge import create_repo

    rig, env = two_lanes
    name = "mini" + rig.tag
    url = create_repo(box, f"{name}.git")             # the rig address: what the lanes fetch
    bare, pin = make_suite_repo(rig.tmp / "suite")
    h.git(bare, "push", "-q", box.dev_url(url), "main", env=rig.push_env)

    def forge_reads() -> int:
        log = box.forge_access_log.read_text() if box.forge_access_log.exists() else ""
        return sum(1 for line in log.splitlines()
                   if f"/{name}.git/" in line and "git-upload-pack" in line)

    wt = h.clone_worktree(rig.clone_url, rig.tmp / ("suites" + rig.tag), rig.push_env)
    declare(wt, name, url, pin, failing=FAILING)
    (wt / ".env").write_text(f"NEV_FORGE_TOKEN={box.forge_token_file.read_text().strip()}\n")
    h.git(wt, "add", "tracks.json", "oracle")
    h.git(wt, "commit", "-qm", "declare the suite")
    assert forge_reads() == 0

    first = h.nev(["oracle", "suites", "fetch", "--lane", "0"], env, cwd=wt, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"{name} {pin[:12]}: fetched in" in first.stdout + first.stderr
    reads = forge_reads()
    assert reads > 0
    published = rig.nas / "suites" / f"{name}-{pin}"
    assert (published / ".git" / "HEAD").read_text().strip() == pin
    assert (published / "flex" / "moz-available.html").is_file()

    second = h.nev(["oracle", "suites", "fetch", "--lane", "1"], env, cwd=wt, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"{name} {pin[:12]}: found (already published)" in second.stdout + second.stderr
    assert forge_reads() == reads                        # lane 1 never reached the forge

    # the run on lane 1, from the published checkout: exactly the expected failures
    run = h.nev(["oracle", "suite", "run", name, "--lane", "1"], env, cwd=wt, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "no change" in lines and not [x for x in lines if x.startswith(("new failure", "new pass"))]
    results = rig.nas / "archive" / "suite-results" / h.copy_name(wt) / name
    (written,) = list(results.glob("*.json"))
    rep = json.loads(written.read_text())
    failing = {n: sorted(t for t, row in rep["tests"].items() if not row[n]["pass"])
               for n in FAILING}
    assert failing == FAILING and len(rep["tests"]) == 4

    # without the expectations file the same failure is a change: exit 1, listed
    (wt / "oracle" / "suites" / f"{name}.expected.json").unlink()
    h.git(wt, "commit", "-qam", "no expectations")
    run = h.nev(["oracle", "suite", "run", name, "--lane", "0"], env, cwd=wt, timeout=900)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert any(x.startswith("new failure  firefox   flex/moz-available.html")
               for x in run.stdout.splitlines()), run.stdout
    assert forge_reads() == reads
