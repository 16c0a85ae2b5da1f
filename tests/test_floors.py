"""Floors, Betterer-style: a fixture repository per case, scored by the real runner.

Each fixture is a git repository holding a copy of the example engine, its
floor and provenance files, and reference corpora. The scorer is the real
`generated_score_check` (one build of the identical example engine, shared);
`test_cli_*` builds the fixture's own engine through `nev` itself.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import floors, scores
from bench.oracle import engines as oengines
from bench.oracle import store as ostore
from bench.oracle import truth
from crates_bridge import corpus, runner
from crates_bridge.registry import Floor, GeneratedFunction, Provenance
from crates_bridge.workspace import EXAMPLE_ENGINE, Workspace
from lanes.base.errors import NevError, NoLaneError
from lanes.base.gitrun import Repo, init

N = 120
ROOT = Path(__file__).resolve().parents[1]
GEN = "crates_bridge/engine/crates/layout/src/generated"


@pytest.fixture(scope="module")
def built():
    ws = Workspace(EXAMPLE_ENGINE)
    ws.build()
    return ws


@pytest.fixture(scope="module")
def corpora(built, tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for f in ("block_width", "abspos_width"):
        corpus.write_reference_corpus(built, f, root / f, N)
    got = {s.function: s for s in runner.score_generated(built, root, cases=True)}
    return root, got


@pytest.fixture
def fixture(tmp_path, corpora):
    """A repository on main: the engine (no target/), floors 0/0, corpora under corpus/ (ignored)."""
    src_root, _ = corpora
    repo_dir = tmp_path / "repo"
    shutil.copytree(EXAMPLE_ENGINE, repo_dir / "crates_bridge/engine", ignore=shutil.ignore_patterns("target"))
    shutil.copytree(src_root, repo_dir / "corpus")
    (repo_dir / ".gitignore").write_text("target/\n/corpus/\n")
    repo = init(repo_dir)
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "fixture")
    return repo


@pytest.fixture
def scorer(built):
    return floors.local_scorer(builder=built)


@pytest.fixture
def K(corpora):
    return corpora[1]["abspos_width"].cases_passed


def req(repo: Repo) -> floors.Scoring:
    return floors.scoring_for(repo.path, {})


def set_floor(repo: Repo, name: str, passed: int, run: int, commit: bool = True) -> None:
    p = repo.path / GEN / f"{name}.floor.json"
    p.write_text(json.dumps({"cases_passed": passed, "cases_run": run}))
    if commit:
        repo.git("commit", "-q", "-am", f"floor {name}")


def floor_of(repo: Repo, name: str):
    p = repo.path / GEN / f"{name}.floor.json"
    return json.loads(p.read_text()) if p.exists() else None


def commits(repo: Repo) -> int:
    return int(repo.out("rev-list", "--count", "HEAD"))


def run_check(repo, scorer):
    lines: list[str] = []
    try:
        floors.check(req(repo), scorer, echo=lines.append)
    except NevError as e:
        return str(e), lines
    return None, lines


# ---- the eight fixtures of the issue ----

def test_better_score_raise_writes_the_floors_in_one_commit(fixture, scorer, K):
    before = commits(fixture)
    out: list[str] = []
    assert floors.raise_floors(req(fixture), scorer, print_raises=True, echo=out.append) == 0
    assert floor_of(fixture, "block_width") == {"cases_passed": N, "cases_run": N}
    assert floor_of(fixture, "abspos_width") == {"cases_passed": K, "cases_run": N}
    assert commits(fixture) == before + 1 and fixture.is_clean()
    changed = fixture.out("show", "--name-only", "--format=", "HEAD").split()
    assert sorted(changed) == [f"{GEN}/abspos_width.floor.json", f"{GEN}/block_width.floor.json"]
    assert f"block_width: 0/0 -> {N}/{N}" in out and f"abspos_width: 0/0 -> {K}/{N}" in out


def test_same_score_changes_nothing(fixture, scorer, K):
    set_floor(fixture, "block_width", N, N)
    set_floor(fixture, "abspos_width", K, N)
    head = fixture.rev("HEAD")
    out: list[str] = []
    assert floors.raise_floors(req(fixture), scorer, echo=out.append) == 0
    assert out == ["floors: no floor to raise"] and fixture.rev("HEAD") == head and fixture.is_clean()
    err, lines = run_check(fixture, scorer)
    assert err is None and all(" ok " in x for x in lines)


def test_worse_score_fails_the_check(fixture, scorer, K):
    set_floor(fixture, "abspos_width", K + 3, N)
    err, lines = run_check(fixture, scorer)
    assert err is not None and "abspos_width drop" in err and f"passes {K} cases, below its floor's {K + 3}" in err
    assert "block_width" not in err


def test_shrunk_corpus_with_the_same_passes_fails(fixture, scorer, corpora, K):
    set_floor(fixture, "abspos_width", K, N)
    # Drop one failing case: the corpus shrinks, the passing count holds.
    _, got = corpora
    failing = next(c.id for c in got["abspos_width"].cases if not c.passed)
    folder = fixture.path / "corpus/abspos_width"
    kept = [x for x in (folder / "cases.jsonl").read_text().splitlines() if json.loads(x)["id"] != failing]
    corpus.write_corpus(folder, "abspos_width", [json.loads(x) for x in kept], {"reference": "test"})
    err, _ = run_check(fixture, scorer)
    assert err is not None and "abspos_width shrunk" in err and f"holds {N - 1} cases, fewer than the floor's {N}" in err


def test_zero_passes_fail_even_with_a_zero_floor(fixture, scorer):
    assert floor_of(fixture, "block_width") == {"cases_passed": 0, "cases_run": 0}
    folder = fixture.path / "corpus/block_width"
    cases = [json.loads(x) for x in (folder / "cases.jsonl").read_text().splitlines()]
    for c in cases:  # a lane that lost a browser: nothing agrees with the function any more
        c["expected"]["width"] += 10
    corpus.write_corpus(folder, "block_width", cases, {"reference": "test"})
    err, _ = run_check(fixture, scorer)
    assert err is not None and "block_width zero" in err and f"passes no case of {N}" in err
    head = fixture.rev("HEAD")
    with pytest.raises(NevError, match="not raising: block_width zero"):
        floors.raise_floors(req(fixture), scorer)
    assert fixture.rev("HEAD") == head and floor_of(fixture, "abspos_width") == {"cases_passed": 0, "cases_run": 0}


def test_new_function_without_floor_is_held_to_its_provenance(fixture, scorer, K):
    gen = fixture.path / GEN
    (gen / "abspos_width.floor.json").unlink()
    prov = json.loads((gen / "abspos_width.provenance.json").read_text())
    prov["verification"]["cases_passed"] = K + 1
    (gen / "abspos_width.provenance.json").write_text(json.dumps(prov))
    fixture.git("commit", "-q", "-am", "new function")
    err, _ = run_check(fixture, scorer)
    assert err is not None and f"below its provenance record's {K + 1}" in err
    # Recorded at or below what it scores: it passes, and the raise creates its floor file.
    prov["verification"]["cases_passed"] = K
    (gen / "abspos_width.provenance.json").write_text(json.dumps(prov))
    fixture.git("commit", "-q", "-am", "record")
    assert run_check(fixture, scorer)[0] is None
    floors.raise_floors(req(fixture), scorer, echo=lambda _: None)
    assert floor_of(fixture, "abspos_width") == {"cases_passed": K, "cases_run": N}


def test_raise_refuses_on_a_dirty_tree(fixture, scorer):
    (fixture.path / GEN / "block_width.rs").write_text("// edited\n")
    head = fixture.rev("HEAD")
    with pytest.raises(NevError, match="uncommitted changes; commit or stash them first; nothing was written"):
        floors.raise_floors(req(fixture), scorer)
    assert fixture.rev("HEAD") == head
    assert floor_of(fixture, "block_width") == {"cases_passed": 0, "cases_run": 0}


def test_raise_never_lowers_a_number(fixture, scorer, K):
    # A person's floor: fewer passes than now, but a bigger corpus than now.
    set_floor(fixture, "abspos_width", K - 5, N + 10)
    set_floor(fixture, "block_width", N, N)
    assert run_check(fixture, scorer)[0] is None  # more passes than the floor: holds
    assert floors.raise_floors(req(fixture), scorer, echo=lambda _: None) == 0
    assert floor_of(fixture, "abspos_width") == {"cases_passed": K - 5, "cases_run": N + 10}
    assert floor_of(fixture, "block_width") == {"cases_passed": N, "cases_run": N}


# ---- the scoring step and its failures ----

def test_no_lane_answering_writes_nothing_exit_3(fixture):
    head = fixture.rev("HEAD")
    with pytest.raises(NoLaneError) as e:
        floors.raise_floors(req(fixture), floors.default_scorer({}))
    assert e.value.exit_code == 3 and "nothing was written" in str(e.value)
    assert fixture.rev("HEAD") == head and fixture.is_clean()


def test_a_failed_score_writes_nothing(fixture, scorer):
    shutil.rmtree(fixture.path / "corpus/abspos_width")
    head = fixture.rev("HEAD")
    with pytest.raises(NevError, match="no corpus for abspos_width"):
        floors.raise_floors(req(fixture), scorer)
    assert fixture.rev("HEAD") == head and fixture.is_clean()


def test_corpus_provider_is_asked_for_every_listed_cache(fixture, built):
    asked: list[tuple[list[str], Path]] = []
    sc = floors.local_scorer(builder=built, corpora=lambda names, root: asked.append((names, root)))
    assert run_check(fixture, sc)[0] is None
    assert asked == [(["block_width", "abspos_width"], fixture.path / "corpus")]


def test_raise_refuses_off_main(fixture, scorer):
    fixture.git("checkout", "-q", "-b", "track/x")
    with pytest.raises(NevError, match="not main"):
        floors.raise_floors(req(fixture), scorer)


def test_scores_table_and_json_round_trip(fixture, scorer, K):
    set_floor(fixture, "abspos_width", K, N)
    js = scores.to_json(floors.evaluate(req(fixture), scorer))
    table = scores.table(floors.evaluate(req(fixture), scorer))
    assert table[0].split() == ["function", "passed/run", "floor", "batch", "status"]
    assert table[1].split() == ["abspos_width", f"{K}/{N}", f"{K}/{N}", "example-handwritten", "ok"]
    assert table[2].split() == ["block_width", f"{N}/{N}", "0/0", "example-handwritten", "better"]
    back = {s.function: (s.cases_passed, s.cases_run) for s in scores.from_json(json.dumps(js))}
    assert back == {"abspos_width": (K, N), "block_width": (N, N)}


# ---- fresh ground truth (bench/oracle/truth.py) ----

def test_only_a_corpus_of_the_three_browsers_is_ground_truth():
    three = {"chromium": "1", "firefox": "2", "webkit": "3"}
    assert truth.not_ground_truth(ostore.StoreManifest.of({"engines": three})) is None
    two = ostore.StoreManifest.of({"engines": {"chromium": "1", "firefox": "2"}})
    assert truth.not_ground_truth(two) == \
        "it was built with chromium, firefox only (no webkit)"
    assert truth.not_ground_truth(ostore.StoreManifest.of({"engines": {"reference": "x"}})) == \
        "it was built with reference only (no chromium, firefox, webkit)"
    none = ostore.StoreManifest.of({"function": "f"})
    assert truth.not_ground_truth(none) == "its manifest names no engines"
    assert truth.not_ground_truth(None) == "it has no readable manifest.json"


def _two_browser_corpus(root: Path, name: str) -> None:
    w = ostore.Writer(root, name)
    w.write({"format": 1, "function": name, "engines": {"chromium": "156", "firefox": "153"}, "key": "k2"}, b"", b"")
    w.publish()


def test_a_corpus_built_with_two_browsers_is_refused_exit_11_and_left_in_place(tmp_path):
    root = tmp_path / "corpus"
    _two_browser_corpus(root, "abspos_width")
    provide = truth.fresh_corpora(count=5, store_root=tmp_path / "store")
    with pytest.raises(truth.NoGroundTruth) as e:
        provide(["block_width", "abspos_width"], root)
    assert e.value.exit_code == 11
    assert str(e.value).startswith(f"{root}/abspos_width is not ground truth for the floors: it was built with "
                                   "chromium, firefox only (no webkit)")
    assert "remove it and score again" in str(e.value) and "nothing was scored" in str(e.value)
    assert sorted(p.name for p in root.iterdir()) == ["abspos_width"]  # nothing built, nothing moved
    assert not (tmp_path / "store").exists()


def test_a_missing_browser_is_refused_exit_11_naming_it_and_its_package(tmp_path, monkeypatch):
    monkeypatch.setattr(oengines, "FIREFOX_BIN", str(tmp_path / "no-firefox-esr"))
    provide = truth.fresh_corpora(count=5, store_root=tmp_path / "store")
    with pytest.raises(truth.NoGroundTruth) as e:
        provide(["block_width"], tmp_path / "corpus")
    msg = str(e.value)
    assert e.value.exit_code == 11 and msg.startswith("firefox is not installed on ")
    assert "install firefox-esr (on a lane: nev lane provision)" in msg and "nothing was scored" in msg
    assert not (tmp_path / "corpus").exists() and not (tmp_path / "store").exists()


# ---- the decisions, directly ----

def fn(floor: Floor | None, prov_passed: int = 0) -> GeneratedFunction:
    p = Path("/x/f.provenance.json")
    return GeneratedFunction("f", Path("/x/f.rs"), p, Path("/x/f.floor.json"),
                             Provenance("f", "b1", prov_passed, None, None, {}), floor)


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50), st.integers(0, 50), st.integers(0, 60))
def test_raise_to_never_lowers_and_the_raised_floor_holds(fp, fr, sp, sr, prov):
    floor = Floor(min(fp, fr), fr)
    score = runner.Score("f", cases_run=sr, cases_passed=min(sp, sr))
    new = floors.raise_to(fn(floor, prov), score)
    if new is not None:
        assert new.cases_passed >= floor.cases_passed and new.cases_run >= floor.cases_run
        assert new.cases_passed >= prov
        # The raised floor never fails the very score that raised it.
        assert floors.judge(fn(new, prov), score).status == "ok"


def test_judge_zero_floor_zero_passes_fails():
    assert floors.judge(fn(Floor(0, 0)), runner.Score("f", cases_run=10, cases_passed=0)).status == "zero"


def test_judge_held_to_provenance_when_floor_is_lower():
    j = floors.judge(fn(Floor(3, 10), prov_passed=7), runner.Score("f", cases_run=10, cases_passed=5))
    assert j.status == "drop" and j.held_passed == 7


# ---- the commands, end to end (the fixture's own engine is built by nev) ----

def nev(*args, cwd, env):
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.parts
def test_cli_scores_raise_and_check_on_a_lane_build_fresh_three_browser_corpora(fixture, tmp_path):
    """On a lane (NEV_ON_LANE) the scoring step refuses corpora not made by the three browsers (the
    fixture's reference corpora), then builds each listed corpus with Chromium, Firefox and WebKit
    (this machine's), scores on them, raises and checks; a second run finds them up to date."""
    n = 60
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NEV_ON_LANE": "1", "CARGO_TARGET_DIR": str(tmp_path / "target"),
           "NEV_CORPUS_CASES": str(n), "NEV_CORPUS_STORE": str(tmp_path / "store")}
    r = nev("scores", "--json", cwd=fixture.path, env=env)
    assert r.returncode == 11, r.stderr
    assert "corpus/block_width is not ground truth for the floors: it was built with reference only " \
           "(no chromium, firefox, webkit)" in r.stderr and r.stdout == ""
    assert (fixture.path / "corpus/block_width/manifest.json").exists()  # left for a person to remove
    shutil.rmtree(fixture.path / "corpus")
    r = nev("scores", "--json", cwd=fixture.path, env=env)
    assert r.returncode == 0, r.stderr
    rows = {x["function"]: x for x in json.loads(r.stdout)}
    for f in ("block_width", "abspos_width"):
        man = json.loads((fixture.path / "corpus" / f / "manifest.json").read_text())
        assert sorted(man["engines"]) == ["chromium", "firefox", "webkit"] and man["generated"] == n
        assert rows[f]["cases_run"] == man["cases"] and rows[f]["status"] == "better"
        assert f"corpus/{f}: {man['cases']} agreed of {n} generated" in r.stderr
    K, R = rows["abspos_width"]["cases_passed"], rows["abspos_width"]["cases_run"]
    r = nev("floors", "raise", "--print-raises", cwd=fixture.path, env=env)
    assert r.returncode == 0, r.stderr
    assert f"abspos_width: 0/0 -> {K}/{R}" in r.stdout and "floors: raised 2 in" in r.stdout
    assert "up to date" in r.stderr and "agreed of" not in r.stderr  # nothing rendered again
    r = nev("floors", "check", cwd=fixture.path, env=env)
    assert r.returncode == 0, r.stderr
    bw = rows["block_width"]
    set_floor(fixture, "block_width", bw["cases_passed"], bw["cases_run"] + 1)
    r = nev("floors", "check", cwd=fixture.path, env=env)
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1].startswith("nev: floors broken: block_width shrunk")


def test_cli_scores_and_check_off_a_lane_go_to_a_lane_and_with_none_answering_exit_3(fixture, tmp_path):
    lanes = tmp_path / "lanes.json"
    lanes.write_text(json.dumps({"lanes": [{"ssh": "lane@127.0.0.1:1", "root": "/srv/lane"}]}))
    env = {k: v for k, v in os.environ.items() if k not in ("NEV_ON_LANE", "GENERA_ON_LANE")}
    env.update(PYTHONPATH=str(ROOT), NEV_LANES_FILE=str(lanes))
    for args in (("floors", "check"), ("scores",), ("scores", "--json")):
        r = nev(*args, cwd=fixture.path, env=env)
        assert r.returncode == 3, r.stderr
        assert "no build lane answered" in r.stderr and "nothing ran, here or there" in r.stderr
        assert r.stdout == "" and not (fixture.path / "target").exists()
    assert fixture.is_clean()


def test_cli_raise_off_a_lane_scores_on_a_lane_and_with_none_answering_writes_nothing_exit_3(fixture, tmp_path):
    lanes = tmp_path / "lanes.json"
    lanes.write_text(json.dumps({"lanes": [{"ssh": "lane@127.0.0.1:1", "root": "/srv/lane"}]}))
    env = {k: v for k, v in os.environ.items() if k not in ("NEV_ON_LANE", "GENERA_ON_LANE")}
    env.update(PYTHONPATH=str(ROOT), NEV_LANES_FILE=str(lanes))
    head = fixture.git("rev-parse", "HEAD").stdout
    r = nev("floors", "raise", cwd=fixture.path, env=env)
    assert r.returncode == 3, r.stderr
    assert "no build lane answered to score the floors; nothing was written" in r.stderr
    assert fixture.is_clean() and fixture.git("rev-parse", "HEAD").stdout == head


def test_raise_refuses_when_main_moves_while_scoring(fixture, scorer):
    def moving(r):
        (fixture.path / "NOTES").write_text("landed meanwhile\n")
        fixture.git("add", "NOTES")
        fixture.git("commit", "-q", "-m", "another landing")
        return scorer(r)
    with pytest.raises(NevError, match="changed while scoring; run the raise again; nothing was written"):
        floors.raise_floors(req(fixture), moving)
    assert floor_of(fixture, "block_width") == {"cases_passed": 0, "cases_run": 0}


def test_a_refused_commit_leaves_the_floor_files_as_they_were(fixture, scorer):
    (fixture.path / GEN / "abspos_width.floor.json").unlink()
    fixture.git("commit", "-q", "-am", "no abspos floor yet")
    # main's ref held by another git (its lock there): the commit is refused, the add is not
    # (nev's git runs no hook of the repository, so a pre-commit hook cannot refuse it)
    lock = fixture.path / ".git/refs/heads/main.lock"
    lock.write_text("")
    head = fixture.rev("HEAD")
    with pytest.raises(NevError, match="git commit failed"):
        floors.raise_floors(req(fixture), scorer)
    lock.unlink()
    assert fixture.rev("HEAD") == head and fixture.is_clean()
    assert floor_of(fixture, "block_width") == {"cases_passed": 0, "cases_run": 0}
    assert floor_of(fixture, "abspos_width") is None
