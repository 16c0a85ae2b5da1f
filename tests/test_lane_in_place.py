"""Already on a lane (NEV_ON_LANE), `nev lane run` runs its command in place, as `nev lane on` does."""

from __future__ import annotations

import os

import pytest

from tests.helpers.job_helpers import ROOT, make_checkout, nev


def _env(tmp_path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update({"PYTHONPATH": str(ROOT), "NEV_LANES_FILE": str(tmp_path / "no-lanes.json"), **extra})
    return env


@pytest.mark.parametrize("verb", ["run", "on"])
def test_on_a_lane_the_command_runs_in_the_worktree_and_its_status_is_the_runs(tmp_path, verb):
    wt = tmp_path / "wt"
    make_checkout(wt)
    r = nev(["lane", verb, ".", "sh", "-c", "pwd > made-here.txt; exit 7"], _env(tmp_path, NEV_ON_LANE="1"), cwd=wt)
    assert r.returncode == 7, r.stderr
    assert (wt / "made-here.txt").read_text().strip() == str(wt)


def test_on_a_lane_run_reads_no_lane_settings_and_ignores_pull(tmp_path):
    wt = tmp_path / "wt"
    make_checkout(wt)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    env = _env(tmp_path, NEV_ON_LANE="1", NEV_LANES_FILE=str(broken), NEV_LANE_SSH="lane@127.0.0.1:1")
    r = nev(["lane", "run", "--lane", "5", "--pull", "out", str(wt), "sh", "-c", "exit 0"], env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "--pull ignored" in r.stderr


def test_off_a_lane_run_with_no_lane_runs_nothing_here_and_exits_3(tmp_path):
    wt = tmp_path / "wt"
    make_checkout(wt)
    r = nev(["lane", "run", ".", "sh", "-c", "touch made-here.txt"], _env(tmp_path), cwd=wt)
    assert r.returncode == 3 and "nothing ran" in r.stderr
    assert not (wt / "made-here.txt").exists()
