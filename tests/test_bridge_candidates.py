"""Candidate batches: written, compiled in one go, run over the inputs, judged; a verdict for every candidate."""

import json

import pytest

from crates_bridge import candidates, corpus, diagnostics
from crates_bridge.errors import BridgeError
from crates_bridge.samples import BROKEN, GOOD, batch_of

pytestmark = pytest.mark.parts  # starts the Rust compiler on candidate crates here


# `ws` (the example engine, built): tests/conftest.py


@pytest.fixture(scope="module")
def block_corpus(ws, tmp_path_factory):
    return corpus.write_reference_corpus(ws, "block_width", tmp_path_factory.mktemp("c") / "block_width", 200)


def test_batch_of_64_candidates_gets_the_right_verdict_each(ws, block_corpus, tmp_path):
    batch = batch_of(64)
    result = candidates.probe(ws, "block_width", [s for _, s, _ in batch], block_corpus, tmp_path / "probe",
                              timeout_ms=1500)
    assert result.mode == "single" and len(result.verdicts) == 64
    for (want, _, why), v in zip(batch, result.verdicts, strict=True):
        assert v.status == want, (v.index, want, v.status, v.error, v.run_error)
        if want == "compile-error":
            assert why in v.error, (v.index, v.error)
            # Named as the model wrote it, not by the probe's file layout.
            assert "generated/c0" not in v.error
            assert v.error.startswith("error") or v.error.startswith("the probe cannot call `block_width`")
        if want == "passed":
            assert v.cases_passed == v.cases_run == 200
        if want == "failed":
            assert 0 <= v.cases_passed < v.cases_run == 200
            bad = [c for c in v.cases if not c.passed]
            assert bad and all(c.diff or c.error for c in bad)
    # The panicking candidate failed its cb_width 0 cases with the panic message, and only those.
    panicky = result.verdicts[8]
    assert panicky.status == "failed" and any(c.error == "panicked: no room" for c in panicky.cases)
    assert result.verdicts[-1].run_error == "timed out after 1500 ms"
    # Lexer errors found first (each candidate alone), then one batch round for every other
    # error, then the build: never a round per broken candidate.
    unclosed = sum(1 for _, _, why in batch if why == "unclosed delimiter")
    broken = sum(1 for w, _, _ in batch if w == "compile-error")
    assert result.rounds == 3 and [len(d) for d in result.dropped] == [unclosed, broken - unclosed]
    counts = {k: len(v) for k, v in result.by_status().items()}
    assert counts == {"passed": 19, "failed": 20, "compile-error": 24, "run-error": 1}


def test_one_crate_per_candidate_gives_the_same_verdicts(ws, block_corpus, tmp_path):
    batch = [(w, s, why) for w, s, why in batch_of(16) if w != "run-error"]
    srcs = [s for _, s, _ in batch]
    single = candidates.probe(ws, "block_width", srcs, block_corpus, tmp_path / "a", mode="single")
    crates = candidates.probe(ws, "block_width", srcs, block_corpus, tmp_path / "b", mode="crates")
    assert [v.status for v in crates.verdicts] == [w for w, _, _ in batch]
    assert [(v.status, v.cases_passed) for v in crates.verdicts] == \
           [(v.status, v.cases_passed) for v in single.verdicts]
    for (_, _, why), v in zip(batch, crates.verdicts, strict=True):
        if why:
            assert why in v.error and "block_width.rs" in v.error


def test_first_error_names_the_function_file_and_line(ws, block_corpus, tmp_path):
    src, _ = BROKEN[1]
    result = candidates.probe(ws, "block_width", [GOOD, src], block_corpus, tmp_path)
    err = result.verdicts[1].error
    assert "--> block_width.rs:" in err and "expected `i32`, found `f64`" in err
    assert result.verdicts[0].status == "passed"


def test_unknown_function_kind_is_refused_before_compiling(ws, block_corpus, tmp_path):
    with pytest.raises(BridgeError, match="function_kind!"):
        candidates.probe(ws, "block_height", [GOOD], block_corpus, tmp_path)


def test_attribution_maps_main_lines_to_candidates():
    text, where = candidates.probe_main("block_width", [0, 3, 7])
    lines = text.splitlines()
    assert {lines[n - 1].strip() for n in where} == {
        f'("c{i:03d}", generated::c{i:03d}::block_width),' for i in (0, 3, 7)}
    diag = {"level": "error", "message": "mismatched types", "spans": [
        {"file_name": "/x/single/src/main.rs", "line_start": max(where), "is_primary": True}]}
    assert diagnostics.attribute(diag, where) == 7
    diag = {"level": "error", "message": "m", "spans": [
        {"file_name": "/rustc/lib/macros.rs", "line_start": 1, "is_primary": True,
         "expansion": {"span": {"file_name": "/x/single/src/generated/c042.rs", "line_start": 9}}}]}
    assert diagnostics.attribute(diag, where) == 42
    assert not diagnostics.is_error({"level": "error", "message": "aborting due to 2 previous errors", "spans": []})
    # a part's own main file in a search after the compile budget
    diag = {"level": "error", "message": "mismatched types", "rendered": "--> /x/single/src/main_r3_1.rs:9",
            "spans": [{"file_name": "/x/single/src/main_r3_1.rs", "line_start": max(where), "is_primary": True}]}
    assert diagnostics.attribute(diag, where) == 7
    firsts, _ = diagnostics.split_errors([json.dumps(diag)], where, "block_width")
    assert firsts[7].startswith("the probe cannot call `block_width` from this candidate")


@pytest.mark.parametrize("src,why", [
    ("fn f() { let s = \"(\"; let c = '{'; let l: &'a str = r#\"}\"#; /* ( /* ) */ */ }", None),
    ("fn f<'a>(x: &'a u8) -> char { '\\'' }", None),
    ("fn f() { let c = '\\u{1F600}'; let b = b'('; let s = \"a\\\"b(\"; }", None),
    ("fn f() { (", "unclosed delimiter"),
    ("fn f() { ] }", "unexpected or mismatched closing delimiter"),
    ("fn f() { \"abc }", "unterminated double quote string"),
    ("fn f() { /* }", "unterminated block comment"),
    ("fn f() { r#\"abc\" }", "unterminated raw string"),
])
def test_lexer_precheck_finds_what_stops_rustc(src, why):
    assert diagnostics.lex_suspect(src) == why


def test_candidates_clashing_only_in_the_shared_crate_are_judged_alone(ws, block_corpus, tmp_path):
    macro = GOOD + "\n#[macro_export]\nmacro_rules! helper { () => {} }\n"
    twice = GOOD + "\nfn solve() {}\n"  # a clash inside one candidate is its own error
    result = candidates.probe(ws, "block_width", [macro, macro, twice], block_corpus, tmp_path)
    assert [v.status for v in result.verdicts] == ["passed"] * 2 + ["compile-error"]
    assert "defined multiple times" in result.verdicts[2].error
    assert result.mode == "single+crates"


def test_a_candidate_exporting_a_symbol_is_refused_as_unsafe_code(ws, block_corpus, tmp_path):
    # `#[no_mangle]` (like `#[link_section]` or a global allocator) could run code before the
    # runner's lock or reach into its neighbours: every candidate module forbids unsafe code.
    exported = GOOD + '\n#[no_mangle]\npub extern "C" fn nev_probe_dup() {}\n'
    result = candidates.probe(ws, "block_width", [exported, GOOD], block_corpus, tmp_path)
    assert [v.status for v in result.verdicts] == ["compile-error", "passed"]
    assert "unsafe" in result.verdicts[0].error


def test_candidates_that_never_return_are_timed_out_and_the_rest_still_scored(ws, block_corpus, tmp_path):
    from crates_bridge.samples import LOOPS
    srcs = [GOOD, LOOPS, GOOD + "\n// b\n", "// c\n" + LOOPS, GOOD + "\n// d\n"]
    result = candidates.probe(ws, "block_width", srcs, block_corpus, tmp_path, timeout_ms=700)
    assert [v.status for v in result.verdicts] == ["passed", "run-error", "passed", "run-error", "passed"]
    assert result.verdicts[1].run_error == result.verdicts[3].run_error == "timed out after 700 ms"
    # A process of its own each: no spinning thread slows the others (each timed from outside,
    # well under the 700 ms the loops were given).
    assert all(v.ns_per_case * v.cases_run < 0.5e9 for v in result.verdicts if v.status == "passed")
