"""The example engine workspace and the runner protocol, against real cargo and rustc."""

import hashlib
import json
import shutil
import subprocess

import pytest

from crates_bridge import corpus, registry, runner
from crates_bridge.errors import BridgeError
from crates_bridge.workspace import no_wrapper_env

N = 200


# `ws` (the example engine, built): tests/conftest.py


@pytest.fixture(scope="module")
def corpora(ws, tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for f in ("block_width", "abspos_width"):
        corpus.write_reference_corpus(ws, f, root / f, N)
    return root


def test_example_workspace_rust_tests_pass(ws):
    cp = subprocess.run(["cargo", "test", "--workspace", "--quiet", "--target-dir", str(ws.target_dir)],
                        cwd=ws.root, env=no_wrapper_env(), capture_output=True, text=True, timeout=900)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    passed = sum(int(line.split()[3]) for line in cp.stdout.splitlines() if line.startswith("test result: ok."))
    assert passed >= 15


def test_list_caches_names_every_registered_corpus(ws):
    assert runner.list_caches(ws) == ["block_width", "abspos_width"]
    assert runner.registry(ws) == {"block_width": "block_width", "abspos_width": "abspos_width"}


def test_reference_corpus_is_in_the_agreed_format(ws, corpora):
    folder = corpora / "block_width"
    m = json.loads((folder / "manifest.json").read_text())
    body = (folder / "cases.jsonl").read_bytes()
    assert m["format"] == 1 and m["function"] == "block_width" and m["cases"] == N
    assert m["engines"] == {"reference": "layout-0.1.0"}
    assert m["content_sha256"] == hashlib.sha256(body).hexdigest()
    first = json.loads(body.splitlines()[17])
    assert first["id"] == "block_width-000017" and first["seed"] == 17
    assert set(first["input"]) == {"cb_width", "width", "margin_left", "margin_right", "padding_left",
                                   "padding_right", "border_left", "border_right"}
    assert set(first["expected"]) == {"width", "margin_left", "margin_right"}
    # Deterministic from seeds: a second corpus from the same seeds is byte-identical.
    again = corpus.write_reference_corpus(ws, "block_width", corpora / "again", N)
    assert (again / "cases.jsonl").read_bytes() == body


def test_generated_functions_are_scored_against_their_own_corpus(ws, corpora):
    scores = {s.function: s for s in runner.score_generated(ws, corpora)}
    assert scores["block_width"].cases_passed == N == scores["block_width"].cases_run
    # The example's abspos_width ignores "unless this would make them negative" (§10.3.7).
    ab = scores["abspos_width"]
    assert ab.cases_run == N and 0 < ab.cases_passed < N
    # timed by the judge's side around the whole process (start, inputs, every call), not by it
    assert ab.ns_per_case is not None and 0 < ab.ns_per_case * N < 5e9


def test_failing_case_reports_the_box_geometry_difference(ws, corpora):
    [ab] = runner.score_generated(ws, corpora, only="abspos_width", cases=True)
    failed = [c for c in ab.cases if not c.passed]
    assert len(failed) == ab.cases_run - ab.cases_passed
    c = failed[0]
    assert c.diff and set(c.diff) <= {"left", "width", "margin_left", "margin_right"}
    lines = {json.loads(x)["id"]: json.loads(x) for x in (corpora / "abspos_width" / "cases.jsonl").read_text().splitlines()}
    for field, (expected, got) in c.diff.items():
        assert expected == pytest.approx(lines[c.id]["expected"][field])
        assert abs(expected - got) > 1 / 30
    # The broken rule: both margins auto with left, width and right set, and no room.
    inp = lines[c.id]["input"]
    assert inp["margin_left"] == inp["margin_right"] == "auto"


def test_provenance_record_without_registry_entry_fails_with_the_instruction(ws, corpora, tmp_path):
    gen = tmp_path / "generated"
    shutil.copytree(ws.generated_dir, gen)
    (gen / "block_height.rs").write_text("// generated\n")
    (gen / "block_height.provenance.json").write_text(json.dumps(
        {"function": "block_height", "verification": {"cases_passed": 0}}))
    with pytest.raises(BridgeError) as e:
        runner.score_generated(ws, corpora, generated_dir=gen)
    msg = str(e.value)
    assert "block_height" in msg and "FUNCTIONS" in msg and "generated_score_check.rs" in msg
    assert "add one naming its runner and its corpus" in msg


def test_missing_corpus_is_reported_per_function_naming_the_oracle(ws, corpora, tmp_path):
    root = tmp_path / "corpus"
    shutil.copytree(corpora / "block_width", root / "block_width")
    scores = {s.function: s for s in runner.score_generated(ws, root)}
    assert scores["block_width"].ok and scores["block_width"].cases_passed == N
    assert not scores["abspos_width"].ok
    assert "nev oracle build" in scores["abspos_width"].error


def test_corpus_of_another_function_is_refused(ws, corpora, tmp_path):
    root = tmp_path / "corpus"
    shutil.copytree(corpora / "block_width", root / "abspos_width")
    shutil.copytree(corpora / "block_width", root / "block_width")
    scores = {s.function: s for s in runner.score_generated(ws, root)}
    assert "holds cases of `block_width`" in scores["abspos_width"].error


def test_manifest_case_count_mismatch_is_refused(ws, corpora, tmp_path):
    root = tmp_path / "corpus"
    shutil.copytree(corpora / "block_width", root / "block_width")
    cases = root / "block_width" / "cases.jsonl"
    cases.write_text("".join(cases.read_text().splitlines(keepends=True)[:-3]))
    [s] = runner.score_generated(ws, root, only="block_width")
    assert "is not ground truth" in s.error and "nothing was scored" in s.error
    # its content hash made to match, the count still does not
    man = json.loads((root / "block_width" / "manifest.json").read_text())
    man["content_sha256"] = hashlib.sha256(cases.read_bytes()).hexdigest()
    (root / "block_width" / "manifest.json").write_text(json.dumps(man))
    [s] = runner.score_generated(ws, root, only="block_width")
    assert "manifest says 200 cases" in s.error


def test_registry_discovers_functions_from_provenance_records(ws):
    fns = {f.name: f for f in registry.discover(ws.generated_dir)}
    assert set(fns) == {"block_width", "abspos_width"}
    assert fns["block_width"].provenance.batch == "example-handwritten"
    assert fns["block_width"].floor == registry.Floor(0, 0)


def test_malformed_provenance_names_the_file_and_field(tmp_path):
    (tmp_path / "f.rs").write_text("")
    (tmp_path / "f.provenance.json").write_text(json.dumps({"function": "f", "verification": {"cases_passed": -1}}))
    with pytest.raises(BridgeError) as e:
        registry.discover(tmp_path)
    assert "f.provenance.json" in str(e.value) and "verification.cases_passed" in str(e.value)


def test_floor_above_its_own_corpus_size_is_refused(tmp_path):
    p = tmp_path / "f.floor.json"
    p.write_text(json.dumps({"cases_passed": 5, "cases_run": 3}))
    with pytest.raises(BridgeError, match="above cases_run"):
        registry.load_floor(p)
