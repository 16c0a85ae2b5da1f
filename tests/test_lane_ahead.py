"""`lanes.ahead`: which arguments of `nev lane run|on` start the gate's channel before nev loads."""

import pytest

from lanes import ahead


@pytest.mark.parametrize("args,want", [
    (["wt", "true"], (True, None)),
    (["--lane", "2", "wt", "make", "-j", "2"], (True, 2)),
    (["--lane=1", "--pull", "out", "--lane-only", "wt", "true"], (True, 1)),
    (["--pull=out", "wt", "sh", "-c", "x"], (True, None)),
    (["wt"], (False, None)),                     # no command: the CLI says so, nothing started
    (["--help"], (False, None)),
    (["--lane", "x", "wt", "true"], (False, None)),
    (["--frob", "wt", "true"], (False, None)),
    ([], (False, None)),
])
def test_only_the_plain_gate_is_guessed(args, want):
    assert ahead.lane_index(args) == want


def test_nothing_starts_on_a_lane_or_without_lanes(monkeypatch, tmp_path):
    from lanes.base import ssh

    monkeypatch.setenv("NEV_ON_LANE", "1")
    assert ahead.start(["wt", "true"]) is False
    monkeypatch.delenv("NEV_ON_LANE")
    monkeypatch.delenv("NEV_LANE_SSH", raising=False)
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "none.json"))
    assert ahead.start(["wt", "true"]) is False
    (tmp_path / "bad.json").write_text("{not json")
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "bad.json"))
    assert ahead.start(["wt", "true"]) is False and ssh._AHEAD == {}
