"""Conformance suites without a browser: the declaration in tracks.json, the lane copy's links, the
fetch into a share (real git, a local bare repository, a `git` on PATH that logs every call),
two fetches at once, and what a run reports against the known failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.oracle import suites as s
from jobs import tracks
from lanes.agent import links
from lanes.base.errors import NevError
from tests.helpers import lane_helpers as h
from tests.helpers.suite_repo import FAILING, TESTS, declare, make_suite_repo

ROOT = Path(__file__).resolve().parent.parent
PIN = "a" * 40


def nev(args, cwd, env, timeout=120):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    full.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=timeout)


def _tracks(tmp_path, suites) -> Path:
    p = tmp_path / "tracks.json"
    p.write_text(json.dumps({"verify": "true", "suites": suites}))
    return p


# --- the declaration ----------------------------------------------------------------------------

def test_tracks_json_declares_suites_with_a_default_expectations_file(tmp_path):
    mini = {"url": "u", "commit": PIN, "expectations": "x/m.json"}
    t = tracks.load(_tracks(tmp_path, {"wpt-layout": {"url": "http://forge/wpt.git", "commit": PIN},
                                       "mini": mini}))
    assert t.suites["wpt-layout"] == s.Suite("wpt-layout", "http://forge/wpt.git", PIN,
                                             "oracle/suites/wpt-layout.expected.json")
    assert t.suites["mini"].expectations == "x/m.json"
    assert t.suites["mini"].folder == f"mini-{PIN}"
    assert tracks.load(_tracks(tmp_path, {})).suites == {}


@pytest.mark.parametrize("suites, field", [
    ({"w": {"url": "u", "commit": "abc123"}}, "suites.w.commit"),
    ({"w": {"url": "u", "commit": PIN.upper()}}, "suites.w.commit"),
    ({"w": {"url": "", "commit": PIN}}, "suites.w.url"),
    ({"w": {"commit": PIN}}, "suites.w.url"),
    ({"w": {"url": "u", "commit": PIN, "pin": "x"}}, "suites.w.pin"),
    ({"../w": {"url": "u", "commit": PIN}}, "suites.../w"),
    ({"w": {"url": "u", "commit": PIN, "expectations": "../x.json"}}, "suites.w.expectations"),
    ({"w": "http://forge/w.git"}, "suites.w"),
])
def test_a_bad_suite_declaration_is_one_line_naming_the_field(tmp_path, suites, field):
    with pytest.raises(NevError) as e:
        tracks.load(_tracks(tmp_path, suites))
    msg = str(e.value)
    assert "\n" not in msg and f"field {field} " in msg and "tracks.json" in msg, msg


def test_the_lane_copy_links_each_declared_suite_to_its_pinned_folder_without_making_it(tmp_path):
    copy, share = tmp_path / "copy", tmp_path / "share"
    copy.mkdir()
    (copy / "tracks.json").write_text(json.dumps(
        {"verify": "true", "suites": {"mini": {"url": "u", "commit": PIN}, "bad": "x"}}))
    pins = links.read_pins(str(copy))
    assert pins == {"mini": PIN}
    plan = links.plan("track-a", pins, True, False)
    made = links.apply_links(str(copy), str(share), plan)
    assert len(made) == 2
    link = copy / "oracle" / "suites" / "checkouts" / "mini"
    assert os.readlink(link) == str(share / "suites" / f"mini-{PIN}")
    assert not (share / "suites" / f"mini-{PIN}").exists()          # a fetch's rename makes it
    assert (share / "archive" / "suite-results" / "track-a").is_dir()
    # a copy declaring suites gets the results link without an oracle/ folder of its own
    assert [link.path for link in links.plan("t", pins, False, False)] == [
        "oracle/suites/checkouts/mini", "oracle/suites/results"]
    assert links.plan("t", {}, False, False) == []


# --- the fetch ----------------------------------------------------------------------------------

@pytest.fixture
def suite_env(tmp_path):
    """A suite's bare repository, a track declaring it, a share, and a `git` that logs its calls."""
    bare, pin = make_suite_repo(tmp_path / "forge")
    track = tmp_path / "track"
    track.mkdir()
    h.git(track, "init", "-q", "-b", "main")
    declare(track, "mini", f"file://{bare}", pin, failing=FAILING)
    h.git(track, "add", "-A")
    h.git(track, "commit", "-qm", "declare the suite")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "git-calls.log"
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True,
                          text=True).stdout.strip()
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\necho "$$ $*" >> {log}\n'
                       f'case " $* " in *" fetch "*) sleep "${{SLOW_FETCH:-0}}";; esac\n'
                       f'exec {real} "$@"\n')
    wrapper.chmod(0o755)
    store = tmp_path / "share" / "suites"
    env = {"NEV_SUITE_STORE": str(store), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return {"bare": bare, "pin": pin, "track": track, "store": store, "env": env, "log": log}


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _where_and_what(argv: list[str]) -> tuple[str | None, str | None]:
    """(the -C folder, the subcommand) of a git command line, past nev's `-c KEY=VALUE` options
    (every git nev runs turns hooks and config-driven commands off on its command line)."""
    where, i = None, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in ("-C", "-c"):
            where = argv[i + 1] if argv[i] == "-C" else where
            i += 2
        else:
            i += 1
    return where, (argv[i] if i < len(argv) else None)


def test_fetch_publishes_the_pinned_checkout_by_rename_and_a_second_fetch_runs_no_git(suite_env):
    e = suite_env
    first = nev(["oracle", "suites", "fetch", "--json"], e["track"], e["env"])
    assert first.returncode == 0, first.stderr
    row = json.loads(first.stdout)[0]
    folder = e["store"] / f"mini-{e['pin']}"
    assert row == {"suite": "mini", "commit": e["pin"], "folder": str(folder), "fetched": True,
                   "seconds": row["seconds"]}
    assert h.git(folder, "rev-parse", "HEAD") == e["pin"]           # the pin, not the later tip
    assert (folder / "flex" / "moz-available.html").is_file() and not (folder / "README").exists()
    assert sorted(p.name for p in e["store"].iterdir()) == [folder.name, f"{folder.name}.lock"]
    assert any(" fetch " in f" {c} " for c in _calls(e["log"]))

    e["log"].unlink()
    e["bare"].rename(e["bare"].with_name("gone.git"))                # the forge is not there now
    second = nev(["oracle", "suites", "fetch"], e["track"], e["env"])
    assert second.returncode == 0, second.stderr
    assert f"mini {e['pin'][:12]}: found (already published)" in second.stdout
    # git ran only to find the track's own checkout; nothing in the store, nothing remote
    calls = [_where_and_what(c.split()[1:]) for c in _calls(e["log"])]   # (dir, subcommand)
    assert calls and all(w is not None and what == "rev-parse" and str(e["store"]) not in w
                         for w, what in calls), calls


def test_two_fetches_of_one_pin_at_once_fetch_it_once(suite_env):
    e = suite_env
    env = dict(e["env"], SLOW_FETCH="2")
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    full.update(env, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "rig.cli", "oracle", "suites", "fetch", "--json"]
    procs = [subprocess.Popen(argv, cwd=e["track"], env=full, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    fetched = sorted(json.loads(out)[0]["fetched"] for out, _ in outs)
    assert fetched == [False, True]
    waiter = next(err for (out, err) in outs if not json.loads(out)[0]["fetched"])
    assert "another fetch of this suite holds" in waiter and "waiting for it" in waiter
    fetching_pids = {c.split()[0] for c in _calls(e["log"]) if " fetch " in f" {c} "}
    assert len(fetching_pids) >= 1
    folder = e["store"] / f"mini-{e['pin']}"
    assert h.git(folder, "rev-parse", "HEAD") == e["pin"]
    assert not [p for p in e["store"].iterdir() if p.name.startswith(".tmp-")]


def test_a_pin_the_repository_lacks_publishes_nothing(suite_env):
    e = suite_env
    declare(e["track"], "mini", f"file://{e['bare']}", "b" * 40)
    r = nev(["oracle", "suites", "fetch"], e["track"], e["env"])
    assert r.returncode == 1
    err = r.stderr.strip()
    assert err.startswith("nev: ") and "\n" not in err and "fix the pin in tracks.json" in err, err
    assert [p.name for p in e["store"].iterdir()] == [f"mini-{'b' * 40}.lock"]


def test_a_repository_that_is_not_there_is_one_line_and_publishes_nothing(suite_env):
    e = suite_env
    declare(e["track"], "mini", f"file://{e['bare']}-missing", e["pin"])
    r = nev(["oracle", "suites", "fetch"], e["track"], e["env"])
    assert r.returncode == 1
    err = r.stderr.strip()
    assert err.startswith("nev: suite mini: fetching it failed (") and "\n" not in err, err
    assert err.endswith("check its url in tracks.json and the forge credential")
    assert [p.name for p in e["store"].iterdir()] == [f"mini-{e['pin']}.lock"]


def test_off_a_lane_without_a_store_the_commands_go_to_a_lane_and_none_answers(suite_env, tmp_path):
    e = suite_env
    env = {"PATH": e["env"]["PATH"], "NEV_LANES_FILE": str(tmp_path / "no-lanes.json")}
    for args in (["oracle", "suites", "fetch"], ["oracle", "suite", "run", "mini"]):
        r = nev(args, e["track"], env)
        assert r.returncode == 3, (args, r.stdout, r.stderr)
    assert not [c for c in _calls(e["log"]) if " fetch " in f" {c} "]
    assert not e["store"].exists()


def test_a_suite_not_declared_is_a_usage_error(suite_env):
    r = nev(["oracle", "suite", "run", "nope"], suite_env["track"], suite_env["env"])
    assert r.returncode == 2
    assert "suite 'nope' is not declared" in r.stderr and "declared: mini" in r.stderr


def test_run_before_fetch_says_to_fetch(suite_env):
    r = nev(["oracle", "suite", "run", "mini"], suite_env["track"], suite_env["env"])
    assert r.returncode == 1 and "run `nev oracle suites fetch` first" in r.stderr


# --- tests, expectations, changes ---------------------------------------------------------------

def test_the_suite_tests_are_the_pages_calling_check_layout(tmp_path):
    bare, pin = make_suite_repo(tmp_path)
    co = tmp_path / "co"
    h.git(tmp_path, "clone", "-q", str(bare), str(co))
    h.git(co, "checkout", "-q", pin)
    assert s.collect_tests(co, []) == TESTS
    assert s.collect_tests(co, ["flex"]) == ["flex/grow.html", "flex/moz-available.html"]
    with pytest.raises(NevError, match="not inside the suite's checkout"):
        s.collect_tests(co, ["../.."])
    with pytest.raises(NevError, match="no check-layout tests"):
        s.collect_tests(co, ["flex/support"])


def _results(failing: dict[str, set[str]]):
    return {t: {n: s.Outcome(t not in failing.get(n, set())) for n in FAILING} for t in TESTS}


def test_changes_are_the_new_failures_and_new_passes_against_the_known_failures():
    known = s.Expectations({"firefox": frozenset({"flex/moz-available.html"}),
                            "webkit": frozenset({"flex/grow.html", "not/run.html"})})
    now = _results({"firefox": {"flex/moz-available.html"}, "chromium": {"block/offsets.html"}})
    ch = s.changes(now, known, list(FAILING))
    assert ch == {"chromium": {"new_failures": ["block/offsets.html"], "new_passes": []},
                  "firefox": {"new_failures": [], "new_passes": []},
                  "webkit": {"new_failures": [], "new_passes": ["flex/grow.html"]}}
    assert s.changed(ch)
    exact = s.changes(_results({"firefox": {"flex/moz-available.html"}}),
                      s.Expectations({"firefox": frozenset({"flex/moz-available.html"})}),
                      list(FAILING))
    assert not s.changed(exact)


def test_an_expectations_file_naming_an_unknown_engine_is_refused(tmp_path):
    p = tmp_path / "mini.expected.json"
    p.write_text(json.dumps({"failures": {"chromium": [], "safari": ["x.html"]}}))
    with pytest.raises(NevError, match="field failures.safari is not a known key"):
        s.load_expectations(p, list(FAILING))
    assert s.load_expectations(tmp_path / "none.json", list(FAILING)) == s.Expectations()


def test_the_report_table_says_no_change_when_the_failures_are_the_expected_ones():
    suite = s.Suite("mini", "u", PIN, "e.json")
    moz = "flex/moz-available.html"
    run = s.SuiteRun({n: "1" for n in FAILING}, _results({"firefox": {moz}}))
    rep = s.report(suite, run, s.Expectations({"firefox": frozenset({moz})}, "e.json"),
                   list(FAILING))
    lines = s.format_report(rep)
    assert lines[-1] == "no change" and not rep.changed
    assert rep.summary["firefox"] == {"pass": 3, "fail": 1, "new_failures": 0, "new_passes": 0}
    assert rep.to_json()["tests"][moz]["firefox"] == {"pass": False, "failures": []}
    rep2 = s.report(suite, run, s.Expectations(), list(FAILING))
    assert rep2.changed and s.format_report(rep2)[-1] == "changed"
    assert any(line.startswith(f"new failure  firefox   {moz}") for line in s.format_report(rep2))


def test_a_suite_store_of_this_machine_does_not_travel_to_a_lane():
    from bench import onlane

    assert onlane.forwarded_env({"NEV_SUITE_STORE": "/here/suites", "NEV_CORPUS_CASES": "5"}) == \
        {"NEV_CORPUS_CASES": "5"}


def test_on_a_lane_without_its_share_the_fetch_says_so(suite_env, tmp_path):
    env = {"PATH": suite_env["env"]["PATH"], "NEV_ON_LANE": "1",
           "NEV_LANE_SHARED": str(tmp_path / "no-share")}
    r = nev(["oracle", "suites", "fetch"], suite_env["track"], env)
    assert r.returncode == 1 and r.stderr.strip() == (
        f"nev: the share {tmp_path / 'no-share'} is not there; mount it (NEV_LANE_SHARED) or set "
        "NEV_SUITE_STORE")
    assert not (tmp_path / "no-share").exists()


def test_through_the_gate_a_lane_fetches_into_its_share_and_the_copys_link_resolves(tmp_path):
    """The real gate and lane agent (a local lane, tests/helpers/local_lane.py): the lane copy's
    link is made before the fetch and points at the published checkout after it."""
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
    fetch = ["oracle", "suites", "fetch", "--lane", "0"]
    first = lane.nev(fetch, cwd=wt, NEV_LANE_SHARED=str(share))
    assert first.returncode == 0, first.stderr
    assert f"mini {pin[:12]}: fetched in" in first.stdout
    link = lane.copy("wt") / "oracle" / "suites" / "checkouts" / "mini"
    assert os.readlink(link) == str(share / "suites" / f"mini-{pin}")
    assert (link / "flex" / "grow.html").is_file()
    second = lane.nev(fetch, cwd=wt, NEV_LANE_SHARED=str(share))
    assert second.returncode == 0, second.stderr
    assert f"mini {pin[:12]}: found (already published)" in second.stdout
