"""Provenance (bench/provenance.py, bench/keep.py, jobs/regen.py, `nev provenance`): a kept
version's record names its inputs; `stale` recomputes them from a real git checkout's main and
names exactly what a change invalidates; today's records read as incomplete; the bill of
materials validates against its schema; a change is regenerated at most once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import batch, keep, prompt
from bench import provenance as prov
from bench.answers import Candidate
from bench.gateway import CallRecord
from bench.verdicts import Judged
from crates_bridge.corpus import write_corpus
from crates_bridge.workspace import Workspace
from jobs import regen
from lanes.base.errors import NevError

ROOT = Path(__file__).resolve().parents[1]
ENGINE = "crates_bridge/engine"
FN = "abspos_width"
ENGINES = {"chromium": "131.0", "firefox": "128.5", "webkit": "2.46"}


def ONE(env: object) -> list[int | None]:
    """The lanes regeneration jobs go to: the default lane only (no lane is asked)."""
    return [None]


def into(sent: list) -> regen.Submit:
    """A submit that keeps each manifest path it is given."""

    def submit(manifest: Path, repo: Path, lane: int | None) -> int:
        sent.append(manifest)
        return 0

    return submit


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def write_corpus_of(root: Path, engines: dict[str, str]) -> None:
    write_corpus(
        root / "corpus" / FN,
        FN,
        [{"id": f"{FN}-000000", "seed": 0, "input": {}, "expected": {}}],
        engines,
    )


def keep_version(root: Path, batch_id: str, supersede: bool = False) -> dict:
    """A passing version of FN kept the way a batch keeps it, with its complete record."""
    engine = root / ENGINE
    spec = prompt.load_spec(FN, root / "bench" / "specs")
    ws = Workspace(engine)
    sig = batch.signature_of(ws, FN)
    css = (engine / prov.CSS_RS).read_text()
    cfg = batch.RunConfig(
        function=FN,
        shares=[],
        escalation=None,
        escalate_after=1,
        max_batches=1,
        engine_dir=engine,
        corpus_dir=root / "corpus" / FN,
        workdir=root / "target",
        ledger_path=root / "target" / "ledger.jsonl",
        specs_dir=root / "bench" / "specs",
        root=root,
    )
    calls = [
        CallRecord("qwen-fast", 2, 7, served_model="qwen3.8-27b-fast", fingerprint="stand-in-gpu0"),
        CallRecord("qwen-fast", 2, 8, served_model="qwen3.8-27b-fast"),
    ]
    inputs = batch.provenance_inputs(
        cfg,
        spec,
        sig,
        css,
        prompt.interfaces(css, sig),
        batch.corpus_manifest(cfg),
        ["a" * 64],
        "15",
        calls,
    )
    src = (engine / "crates/layout/src/generated" / f"{FN}.rs").read_text()
    win = Judged("h1", src, "passed", 1, 1, None, (), ())
    run_dir = root / "target" / batch_id
    run_dir.mkdir(parents=True, exist_ok=True)
    keep.keep(
        ws,
        spec,
        sig,
        batch_id,
        win,
        [Candidate("qwen-fast", 1, src, "h1")],
        {"h1": win},
        [],
        cfg.corpus_dir,
        run_dir,
        inputs=inputs,
        supersede=supersede,
    )
    return json.loads(
        (engine / "crates/layout/src/generated" / f"{FN}.provenance.json").read_text()
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A git checkout holding the example engine, the spec texts and FN's corpus (not in git), with
    FN kept by a batch (a complete record) on main; block_width keeps today's placeholder record."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / ENGINE, root / ENGINE, ignore=shutil.ignore_patterns("target"))
    shutil.copytree(ROOT / "bench" / "specs", root / "bench" / "specs")
    (root / ".gitignore").write_text("corpus/\ntarget/\n")
    (root / "specs").mkdir()
    (root / regen.track_spec(FN)).write_text(
        f"---\ntouches:\n  - {ENGINE}/crates/layout/src/generated/{FN}.rs\n"
        f"  - {ENGINE}/crates/layout/src/generated/{FN}.provenance.json\n---\n# {FN}\n"
    )
    write_corpus_of(root, ENGINES)
    keep_version(root, "batch-1")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "engine")
    return root


def commit(root: Path, rel: str, text: str) -> None:
    (root / rel).write_text(text)
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", f"edit {rel}")


def findings(root: Path) -> dict[str, prov.Finding]:
    _, found = regen.stale_here(root, {"NEV_STATE_DIR": str(root / "state")})
    return {f.function: f for f in found}


def test_kept_record_names_every_input(tree: Path) -> None:
    rec = json.loads(
        (tree / ENGINE / "crates/layout/src/generated" / f"{FN}.provenance.json").read_text()
    )
    assert rec["format"] == 2 and prov.missing(rec) == []
    assert rec["spec"]["file"] == f"bench/specs/{FN}.md" and rec["spec"]["section"] == "10.3.7"
    assert {"Len", "Len::resolve", "AbsposWidthInput"} <= set(rec["definitions"])
    assert "BlockWidthInput" not in rec["definitions"]
    assert rec["models"] == [
        {
            "alias": "qwen-fast",
            "model_ids": ["qwen3.8-27b-fast"],
            "system_fingerprints": ["stand-in-gpu0"],
            "recipe": None,
            "image_digest": None,
        }
    ]
    assert rec["seeds"] == {"base": "15", "calls": {"qwen-fast": [7, 8]}}
    assert rec["corpus"]["engines"] == ENGINES and len(rec["corpus"]["key"]) == 64


def test_fresh_tree_names_only_the_incomplete_placeholder(tree: Path) -> None:
    found = findings(tree)
    assert FN not in found
    assert found["block_width"].action == prov.INCOMPLETE
    assert (
        found["block_width"].reasons[0].text.startswith("incomplete provenance: spec.text_sha256")
    )


def test_spec_change_on_main_names_the_function_with_its_section(tree: Path) -> None:
    spec = tree / "bench" / "specs" / f"{FN}.md"
    commit(tree, f"bench/specs/{FN}.md", spec.read_text().replace("roughly", "approximately"))
    f = findings(tree)[FN]
    assert f.action == prov.REGENERATE
    assert [r.kind for r in f.reasons] == ["spec"]
    assert f.reasons[0].text.startswith("spec section 10.3.7 changed since ")


def test_spec_change_only_in_the_working_tree_is_not_main(tree: Path) -> None:
    spec = tree / "bench" / "specs" / f"{FN}.md"
    spec.write_text(spec.read_text().replace("roughly", "approximately"))
    assert FN not in findings(tree)
    _, wt = regen.stale_here(tree, {}, None)
    assert [f.function for f in wt if f.action == prov.REGENERATE] == [FN]


def test_used_definition_change_names_it(tree: Path) -> None:
    css = tree / ENGINE / prov.CSS_RS
    commit(
        tree,
        f"{ENGINE}/{prov.CSS_RS}",
        css.read_text().replace("Some(cb_width * p / 100.0)", "Some(p * cb_width / 100.0)"),
    )
    f = findings(tree)[FN]
    assert f.action == prov.REGENERATE
    assert [r.text for r in f.reasons] == ["definition `Len::resolve` changed"]


def test_unused_definition_change_names_nothing(tree: Path) -> None:
    css = tree / ENGINE / prov.CSS_RS
    text = css.read_text()
    assert "pub struct BlockWidthInput" in text
    commit(
        tree,
        f"{ENGINE}/{prov.CSS_RS}",
        text.replace(
            "pub struct BlockWidthInput {", "pub struct BlockWidthInput {\n    pub unused: f64,"
        ),
    )
    assert FN not in findings(tree)


def test_corpus_key_change_asks_for_a_redump_not_a_regeneration(tree: Path) -> None:
    write_corpus_of(tree, {**ENGINES, "firefox": "128.6"})
    f = findings(tree)[FN]
    assert f.action == prov.REDUMP
    assert [r.text for r in f.reasons] == ["corpus key changed: firefox 128.5 → 128.6"]


def test_old_format_record_is_incomplete_never_fresh_never_an_error() -> None:
    raw = json.loads(
        (ROOT / ENGINE / "crates/layout/src/generated" / f"{FN}.provenance.json").read_text()
    )
    e = prov.Entry(FN, prov.Record.of(raw), None)
    (f,) = prov.stale([e], prov.Current())
    assert f.action == prov.INCOMPLETE and "definitions" in f.reasons[0].text
    assert prov.bom_row(e)["provenance"] == "incomplete"


def test_bom_validates_against_its_schema_with_nulls_for_unknowns(tree: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "provenance-bom.schema.json").read_text())
    out = subprocess.run(
        [sys.executable, "-m", "rig.cli", "provenance", "bom", "--json", "--repo", str(tree)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    jsonschema.validate(rows, schema)
    old = next(r for r in rows if r["function"] == "block_width")
    assert (
        old["definitions"] is None
        and old["corpus"]["key"] is None
        and old["prompt"]["rounds"] is None
    )
    new = next(r for r in rows if r["function"] == FN)
    assert new["provenance"] == "complete" and new["models"][0]["recipe"] is None
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            [{**new, "spec": {k: v for k, v in new["spec"].items() if k != "file"}}], schema
        )


def test_stale_json_is_an_empty_list_when_nothing_is_stale(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    (root / ENGINE / "crates/layout/src/generated").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    for cmd in ("stale", "list", "bom"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "rig.cli",
                "provenance",
                cmd,
                "--json",
                "--worktree",
                "--repo",
                str(root),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert out.returncode == 0 and json.loads(out.stdout) == [], (cmd, out.stderr)


def test_a_new_version_gets_a_new_record_naming_the_one_it_supersedes(tree: Path) -> None:
    with pytest.raises(NevError, match="never rewritten"):
        keep_version(tree, "batch-2")
    rec = keep_version(tree, "batch-2", supersede=True)
    assert rec["batch"]["id"] == "batch-2" and rec["supersedes"]["batch"] == "batch-1"
    assert rec["spec"]["commit"] == git(tree, "rev-parse", "HEAD")    # kept in git: its commit
    git(tree, "add", "-A")
    git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "batch-2")
    spec = tree / "bench" / "specs" / f"{FN}.md"
    commit(tree, f"bench/specs/{FN}.md", spec.read_text().replace("roughly", "approximately"))
    (reason,) = findings(tree)[FN].reasons
    assert reason.text == f"spec section 10.3.7 changed since {rec['spec']['commit'][:8]}…"
    with pytest.raises(NevError, match="never rewritten"):
        keep_version(tree, "batch-2", supersede=True)


def test_regen_submits_a_change_once_and_at_most_n_at_once(tree: Path) -> None:
    env = {"NEV_STATE_DIR": str(tree / "state"), "NEV_REGEN_MAX": "1"}
    sent: list[dict] = []

    def submit(manifest: Path, repo: Path, lane: int | None) -> int:
        import yaml

        sent.append(yaml.safe_load(manifest.read_text()))
        return 0

    spec = tree / "bench" / "specs" / f"{FN}.md"
    commit(tree, f"bench/specs/{FN}.md", spec.read_text().replace("roughly", "approximately"))
    assert regen.regen(tree, spread=ONE, env=env, submit=submit) == 0
    assert [m["spec"] for m in sent] == [f"specs/{FN}.md"]
    assert sent[0]["stages"][0]["command"].endswith(
        f"git checkout -- {ENGINE}/crates/layout/src/generated/{FN}.floor.json"
    )
    assert sent[0]["stages"][0]["command"].startswith(f"nev batch run {FN} --supersede")
    assert (
        sent[0]["stages"][0]["models"] == ["qwen-fast"] and sent[0]["stages"][1]["kind"] == "verify"
    )
    state = json.loads((tree / "state" / "regen.json").read_text())
    (why,) = state.values()
    assert why["job"] == sent[0]["name"] and why["reasons"][0].startswith(
        "spec section 10.3.7 changed"
    )
    assert regen.regen(tree, spread=ONE, env=env, submit=submit) == 0
    assert len(sent) == 1  # never twice for the same change
    commit(tree, f"bench/specs/{FN}.md", spec.read_text().replace("approximately", "about"))
    assert regen.regen(tree, spread=ONE, env=env, submit=submit) == 0
    assert len(sent) == 1  # a new change waits: one job runs (NEV_REGEN_MAX 1)
    assert regen.regen(tree, spread=ONE, env={**env, "NEV_REGEN_MAX": "2"}, submit=submit) == 0
    assert len(sent) == 2 and sent[1]["name"] != sent[0]["name"]


def test_a_failed_submit_is_not_recorded_and_is_tried_again(tree: Path) -> None:
    env = {"NEV_STATE_DIR": str(tree / "state")}
    spec = tree / "bench" / "specs" / f"{FN}.md"
    commit(tree, f"bench/specs/{FN}.md", spec.read_text().replace("roughly", "approximately"))

    def refused(manifest: Path, repo: Path, lane: int | None) -> int:
        raise NevError("no lane answered", 3)

    assert regen.regen(tree, spread=ONE, env=env, submit=refused) == 3
    assert json.loads((tree / "state" / "regen.json").read_text()) == {}
    assert regen.regen(tree, spread=ONE, env=env, submit=lambda m, r, lane: 0) == 0
    assert len(json.loads((tree / "state" / "regen.json").read_text())) == 1


def test_plan_table() -> None:
    r = prov.Reason("spec", "s#1", "a", "b", "spec section 1 changed since a")
    f = prov.Finding("f", prov.REGENERATE, (r,), "1")
    d = prov.Finding(
        "g", prov.REDUMP, (prov.Reason("corpus", "g", "k", "l", "corpus key changed: x"),), "2"
    )
    p = regen.plan([f, d], {}, 0, 2)
    assert p.submit == [f] and p.lines == [
        "g: re-dump the ground truth and re-score (corpus key changed: x)"
    ]
    assert regen.plan([f], {f.key(): {"job": "j"}}, 0, 2).submit == []
    assert regen.plan([f], {}, 2, 2).submit == []
    assert regen.plan([f], {}, 0, 2, only="g").submit == []


def test_tick_regen_does_nothing_unless_enabled(tree: Path) -> None:
    spec = tree / "bench" / "specs" / f"{FN}.md"
    commit(tree, f"bench/specs/{FN}.md", spec.read_text().replace("roughly", "approximately"))
    env = {"NEV_STATE_DIR": str(tree / "state")}
    assert regen.tick_regen(tree, env) == 0
    assert not (tree / "state" / "regen.json").exists()


def test_no_track_spec_on_main_submits_nothing(tree: Path) -> None:
    git(tree, "rm", "-q", regen.track_spec(FN))
    spec = tree / "bench" / "specs" / f"{FN}.md"
    commit(tree, f"bench/specs/{FN}.md", spec.read_text().replace("roughly", "approximately"))
    sent: list[Path] = []
    env = {"NEV_STATE_DIR": str(tree / "state")}
    assert regen.regen(tree, spread=ONE, env=env, submit=into(sent)) == 0
    assert sent == [] and not (tree / "state" / "regen.json").exists()


def test_regen_again_by_hand_submits_a_started_change_once_more(tree: Path) -> None:
    env = {"NEV_STATE_DIR": str(tree / "state")}
    spec = tree / "bench" / "specs" / f"{FN}.md"
    commit(tree, f"bench/specs/{FN}.md", spec.read_text().replace("roughly", "approximately"))
    sent: list[Path] = []
    assert regen.regen(tree, spread=ONE, env=env, submit=into(sent)) == 0
    assert regen.regen(tree, spread=ONE, env=env, only=FN, submit=into(sent)) == 0
    assert len(sent) == 1
    assert regen.regen(tree, spread=ONE, env=env, only=FN, submit=into(sent), again=True) == 0
    assert len(sent) == 2 and len(json.loads((tree / "state" / "regen.json").read_text())) == 1


def test_lanes_for_regeneration_jobs_least_busy_first_one_lane_when_distributed() -> None:
    assert regen.spread_over([0, 1], distributed=False) == [0, 1]
    assert regen.spread_over([0, 1], distributed=True) == [None]  # the coordinator's queue
    assert regen.spread_over([0], distributed=False) == [None]
    # NEV_DAGU_LANE=1: one job goes where it went before, lane 1; the next to lane 2, then 0
    assert regen.spread_over([0, 1, 2], distributed=False, first=1) == [1, 2, 0]
    assert regen.pick_lane([0, 1], {}) == 0
    assert regen.pick_lane([0, 1], {0: 1}) == 1
    assert regen.pick_lane([0, 1], {0: 1, 1: 1}) == 0
    assert regen.pick_lane([0, 1], {0: 2, 1: 1}) == 1
    assert regen.pick_lane([None], {None: 5}) is None


def test_one_configured_lane_asks_no_lane_which_mode_its_dagu_runs_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # NEV_LANE_SSH names the one lane; port 1 answers nothing, so asking it would fail
    monkeypatch.setenv("NEV_LANE_SSH", "nobody@127.0.0.1:1")
    assert regen._spread({}) == [None]


def test_regeneration_jobs_go_to_the_least_busy_of_the_lanes(tree: Path) -> None:
    env = {"NEV_STATE_DIR": str(tree / "state"), "NEV_REGEN_MAX": "3"}
    lanes: list[int | None] = []

    def submit(manifest: Path, repo: Path, lane: int | None) -> int:
        lanes.append(lane)
        return 0

    spec = tree / "bench" / "specs" / f"{FN}.md"
    words = ("roughly", "approximately", "about", "nearly")
    for was, word in zip(words, words[1:], strict=False):
        commit(tree, f"bench/specs/{FN}.md", spec.read_text().replace(was, word))
        assert regen.regen(tree, env, spread=lambda e: [0, 1], submit=submit) == 0
    # none has ended (no job record yet): lane 0, then the idle lane 1, then lane 0 again
    assert lanes == [0, 1, 0]
    state = json.loads((tree / "state" / "regen.json").read_text())
    assert sorted(s["lane"] for s in state.values()) == [0, 0, 1]


def test_a_spread_that_cannot_tell_the_lanes_submits_to_the_default_lane(tree: Path) -> None:
    env = {"NEV_STATE_DIR": str(tree / "state")}
    lanes: list[int | None] = []

    def unknown(env: object) -> list[int | None]:
        raise NevError("no build lane configured", 3)

    def submit(manifest: Path, repo: Path, lane: int | None) -> int:
        lanes.append(lane)
        return 0

    spec = tree / "bench" / "specs" / f"{FN}.md"
    commit(tree, f"bench/specs/{FN}.md", spec.read_text().replace("roughly", "approximately"))
    assert regen.regen(tree, env, spread=unknown, submit=submit) == 0
    assert lanes == [None]


def _scores(passed: int):
    """A re-score (the edge: a lane's `nev scores`) giving FN `passed` of 1 cases, judged by the
    floors' own rules against the tree's floor and record."""
    from bench import floors
    from crates_bridge.registry import discover
    from crates_bridge.runner import Score

    calls: list[int] = []

    def rescore(root: Path, env) -> list:
        calls.append(1)
        fns = discover(root / ENGINE / "crates/layout/src/generated")
        return floors.judge_all(fns, [Score(FN, cases_run=1, cases_passed=passed, corpus=FN)])

    return rescore, calls


def test_a_corpus_change_is_rescored_once_and_regenerates_nothing_while_the_floor_holds(
    tree: Path,
) -> None:
    write_corpus_of(tree, {**ENGINES, "firefox": "128.6"})
    env = {"NEV_STATE_DIR": str(tree / "state")}
    sent: list[Path] = []
    rescore, calls = _scores(1)
    assert regen.regen(tree, spread=ONE, env=env, submit=into(sent), rescore=rescore) == 0
    assert regen.regen(tree, spread=ONE, env=env, submit=into(sent), rescore=rescore) == 0
    assert sent == [] and len(calls) == 1
    (entry,) = json.loads((tree / "state" / "regen.json").read_text()).values()
    assert entry["job"] is None and "holds its floor after the re-dump" in entry["rescored"]


def test_a_corpus_change_that_breaks_the_floor_is_regenerated(tree: Path) -> None:
    write_corpus_of(tree, {**ENGINES, "firefox": "128.6"})
    env = {"NEV_STATE_DIR": str(tree / "state")}
    sent: list[Path] = []
    rescore, calls = _scores(0)
    assert regen.regen(tree, spread=ONE, env=env, submit=into(sent), rescore=rescore) == 0
    assert len(sent) == 1 and len(calls) == 1
    state = json.loads((tree / "state" / "regen.json").read_text())
    (job,) = [s for s in state.values() if s["job"]]
    assert job["reasons"][0] == "corpus key changed: firefox 128.5 → 128.6"
    assert job["reasons"][1].startswith("after the re-dump it no longer holds its floor: ")
    assert regen.regen(tree, spread=ONE, env=env, submit=into(sent), rescore=rescore) == 0
    assert len(sent) == 1 and len(calls) == 1


def test_a_rescore_that_cannot_run_is_tried_again(tree: Path) -> None:
    write_corpus_of(tree, {**ENGINES, "firefox": "128.6"})
    env = {"NEV_STATE_DIR": str(tree / "state")}

    def no_lane(root: Path, env) -> list:
        raise NevError("no lane answered", 3)

    assert regen.regen(tree, spread=ONE, env=env, submit=lambda m, r, lane: 0, rescore=no_lane) == 0
    assert not (tree / "state" / "regen.json").exists()
    rescore, calls = _scores(1)
    assert regen.regen(tree, spread=ONE, env=env, submit=lambda m, r, lane: 0, rescore=rescore) == 0
    assert len(calls) == 1
