"""A conformance suite run in the three real browsers of this machine: exactly the expected
failure (Firefox on `flex/moz-available.html`), and "no change" once the expectations file
says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import lane_helpers as h
from tests.helpers.suite_repo import FAILING, TESTS, declare, make_suite_repo
from tests.test_oracle_suites import nev

pytestmark = pytest.mark.parts  # starts Chromium, Firefox and WebKit here


def test_a_suite_run_reports_exactly_the_expected_failures_then_no_change(tmp_path):
    bare, pin = make_suite_repo(tmp_path / "forge")
    track = tmp_path / "track"
    track.mkdir()
    h.git(track, "init", "-q", "-b", "main")
    declare(track, "mini", f"file://{bare}", pin)
    env = {"NEV_SUITE_STORE": str(tmp_path / "share" / "suites")}
    assert nev(["oracle", "suites", "fetch"], track, env).returncode == 0

    # no expectations file: every test is expected to pass, so Firefox's failure is a change
    r = nev(["oracle", "suite", "run", "mini", "--json"], track, env, timeout=300)
    assert r.returncode == 1, r.stderr
    rep = json.loads(r.stdout)
    assert sorted(rep["tests"]) == TESTS and set(rep["engines"]) == set(FAILING)
    failing = {n: sorted(t for t, row in rep["tests"].items() if not row[n]["pass"])
               for n in FAILING}
    assert failing == FAILING
    (check,) = rep["tests"]["flex/moz-available.html"]["firefox"]["failures"]
    assert check["check"] == "data-expected-width" and check["want"] == 0 and check["got"] == 200
    assert rep["changes"]["firefox"] == {"new_failures": ["flex/moz-available.html"],
                                         "new_passes": []}
    written = Path(rep["written"])
    assert written.parent == track / "oracle" / "suites" / "results" / "mini"
    assert json.loads(written.read_text())["tests"] == rep["tests"]

    # the expectations file beside the declaration: the same run is "no change", exit 0
    declare(track, "mini", f"file://{bare}", pin, failing=FAILING)
    r = nev(["oracle", "suite", "run", "mini"], track, env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "no change" in lines
    assert not [x for x in lines if x.startswith(("new failure", "new pass"))]
    assert any(x.split()[:3] == ["firefox", "3", "1"] for x in lines), lines


def test_on_a_lane_the_run_writes_to_the_shares_suite_results(tmp_path):
    """Through the real gate and lane agent (a local lane): the record lands in
    archive/suite-results/<lane copy>/ on the share, through the copy's results link."""
    import os

    from tests.helpers.local_lane import LocalLane, make_repo

    lane = LocalLane(tmp_path / "lane")
    lane.install_nev()
    # the forge where a gate's jail can read it (its /tmp is its own): a folder of the share
    bare, pin = make_suite_repo(tmp_path / "share" / "forge")
    wt = make_repo(tmp_path / "wt")
    declare(wt, "mini", f"file://{bare}", pin, failing=FAILING)
    h.git(wt, "add", "-A")
    h.git(wt, "commit", "-qm", "declare the suite")
    share = tmp_path / "share"
    share.mkdir(exist_ok=True)
    env = {"NEV_LANE_SHARED": str(share)}
    assert lane.nev(["oracle", "suites", "fetch", "--lane", "0"], cwd=wt, **env).returncode == 0
    r = lane.nev(["oracle", "suite", "run", "mini", "--lane", "0"], cwd=wt, timeout=300, **env)
    assert r.returncode == 0 and "no change" in r.stdout.splitlines(), r.stdout + r.stderr
    copy = lane.copy("wt")
    assert os.readlink(copy / "oracle" / "suites" / "results") == \
        str(share / "archive" / "suite-results" / copy.name)
    (written,) = (share / "archive" / "suite-results" / copy.name / "mini").glob("*.json")
    rep = json.loads(written.read_text())
    assert not rep["changed"] and rep["expectations"] == "oracle/suites/mini.expected.json"
