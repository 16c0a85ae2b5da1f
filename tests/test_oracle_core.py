"""The oracle's decisions without a browser: vote, shards, generators, store, page checks."""

import json
import os
import socket
import subprocess
import sys

import pytest

from bench.oracle import cases, reference, store
from bench.oracle.build import judge
from bench.oracle.cases import Shard, generator_for
from bench.oracle.measured import Measured, measured_page
from bench.oracle.render import check_page, collect_pages
from bench.oracle.vote import DEFAULT_TOLERANCE, flatten, vote
from bench.oracle.wire import EngineError
from lanes.base.errors import NevError

TOL = DEFAULT_TOLERANCE


def test_vote_agrees_across_the_60th_and_64th_pixel_grids():
    # Gecko's 1/60 px grid against Blink's and WebKit's 1/64 px: within 1/30 px.
    a = {"w": 172.15625}
    v = vote({"chromium": a, "webkit": a, "firefox": {"w": 172.15000915527344}}, TOL)
    assert v.agreed and v.agreement == "3/3"
    assert v.value == {"w": 172.15625}  # the median is one engine's own number


def test_vote_names_the_single_dissenter():
    v = vote({"chromium": {"w": 0.0}, "firefox": {"w": 0.0}, "webkit": {"w": -5.0}}, TOL)
    assert (v.agreement, v.agreed, v.value) == ("2/3:webkit", False, None)


def test_vote_three_way_split_and_missing_answer_are_none():
    assert vote({"a": {"w": 0.0}, "b": {"w": 1.0}, "c": {"w": 2.0}}, TOL).agreement == "none"
    assert vote({"a": {"w": 0.0}, "b": {"w": 0.0}, "c": None}, TOL).agreement == "none"


def test_vote_tolerance_is_explicit():
    a, b = {"w": 10.0}, {"w": 10.0 + 1 / 29}
    assert not vote({"x": a, "y": b}, TOL).agreed
    assert vote({"x": a, "y": b}, 1 / 20).agreed


def test_shards_partition_the_seeds_without_overlap():
    whole = list(Shard.parse(None).seeds(0, 101))
    parts = [list(Shard(i, 3).seeds(0, 101)) for i in range(3)]
    assert parts[1][:3] == [1, 4, 7]
    assert sorted(s for p in parts for s in p) == whole == list(range(101))
    assert list(Shard.parse("1/2").seeds(10, 10)) == [11, 13, 15, 17, 19]


@pytest.mark.parametrize("spec", ["2/2", "x", "1/0", "-1/3", "1/2/3"])
def test_bad_shard_is_a_usage_error(spec):
    with pytest.raises(NevError) as e:
        Shard.parse(spec)
    assert e.value.exit_code == 2 and spec in e.value.message


def test_generators_are_deterministic_across_processes():
    code = ("from bench.oracle.cases import generator_for;"
            "print([generator_for(n).case(s).html for n in ('block_width','abspos_width') for s in (0, 7)])")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout for h in (1, 2)]
    assert runs[0] == runs[1]
    g = generator_for("block_width-big")
    assert g.case(5) == g.case(5) and g.case(5) != g.case(6)
    assert g.case(5).id == "block_width-000005"


def test_generator_inputs_follow_the_corpus_format():
    c = generator_for("abspos_width").case(3)
    assert set(c.input) == {"cb_width", "left", "right", "width", "margin_left", "margin_right",
                            "padding_left", "padding_right", "border_left", "border_right", "content_width"}
    b = generator_for("block_width").case(3)
    assert set(b.input) == {"cb_width", "width", "margin_left", "margin_right", "padding_left",
                            "padding_right", "border_left", "border_right"}
    assert 'id="cb"' in b.html and 'id="el"' in b.html


def test_unknown_corpus_names_the_generators():
    with pytest.raises(NevError) as e:
        generator_for("float_width")
    assert "block_width" in e.value.message and e.value.exit_code == 2


def test_block_width_reads_margins_from_rects():
    g = cases.BlockWidth()
    c = g.case(0)
    m = {"cb": [0, 0, 500, 10, 0, 0, None, None], "el": [20, 0, 300, 10, 0, 0, None, None],
         "w": [30, 0, 280, 0, 0, 0, None, None]}
    assert g.expected(c, m) == {"width": 280, "margin_left": 20, "margin_right": 180}


def test_a_case_whose_answer_changed_is_quarantined():
    g = cases.BlockWidth()
    c = g.case(1)
    m = {"cb": [0, 0, 500, 10, 0, 0, None, None], "el": [20, 0, 300, 10, 0, 0, None, None],
         "w": [30, 0, 280, 0, 0, 0, None, None]}
    moved = json.loads(json.dumps(m))
    moved["w"][2] = 279
    first = {"chromium": m, "firefox": m, "webkit": m}
    row = judge(g, c, first, {**first, "firefox": moved}, TOL).to_json()
    assert row["quarantined"] and row["changed"] == ["firefox"] and "expected" not in row
    assert row["agreement"] == "3/3"  # agreed once, but not stable: never ground truth
    ok = judge(g, c, first, first, TOL).to_json()
    assert not ok["quarantined"] and ok["expected"] == {"width": 280, "margin_left": 20, "margin_right": 180}


def test_missing_element_is_no_answer():
    g = cases.BlockWidth()
    m = {"cb": [0, 0, 500, 10, 0, 0, None, None], "el": [20, 0, 300, 10, 0, 0, None, None]}
    row = judge(g, g.case(2), {"chromium": m}, {"chromium": m}, TOL).to_json()
    assert row["agreement"] == "none" and "expected" not in row


def test_flatten_keeps_expected_and_box_numbers():
    f = flatten({"width": 1.0}, {"el": [1, 2, 3, 4, 9, 9]}, ["el"])
    assert f == {"expected.width": 1.0, "el.x": 1.0, "el.y": 2.0, "el.w": 3.0, "el.h": 4.0}


def test_corpus_key_changes_with_any_engine_version():
    base = dict(function="block_width", generator={"name": "block_width", "version": "1"},
                tolerance=TOL, seeds={"start": 0, "count": 10, "shard": "0/1"})
    k1 = store.corpus_key(engines={"chromium": "156.0", "firefox": "153.8.0esr"}, **base)
    k2 = store.corpus_key(engines={"chromium": "157.0", "firefox": "153.8.0esr"}, **base)
    assert k1 != k2 and k1 == store.corpus_key(engines={"firefox": "153.8.0esr", "chromium": "156.0"}, **base)


def _write(root, key, cases_rows=(b'{"id":"a"}\n',)):
    w = store.Writer(root, "block_width")
    man = w.write({"key": key, "cases": len(cases_rows)}, b"".join(cases_rows), b"{}\n")
    return w, man


def test_store_publishes_once_and_moves_an_older_version_aside(tmp_path):
    w, man = _write(tmp_path, "k1")
    import hashlib
    # as the runner's corpora
    assert man.content_sha256 == hashlib.sha256(b'{"id":"a"}\n').hexdigest()
    assert man.votes_sha256 == hashlib.sha256(b"{}\n").hexdigest()
    assert not (tmp_path / "block_width").exists()  # nothing visible before publish
    assert w.publish() is None
    folder = tmp_path / "block_width"
    assert store.up_to_date(folder, "k1") and not store.up_to_date(folder, "k2")
    w2, _ = _write(tmp_path, "k2")
    moved = w2.publish()
    assert moved is not None and moved.parent == tmp_path / ".superseded" / "block_width"
    assert store.read_manifest(moved).key == "k1"
    assert store.up_to_date(folder, "k2")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []


def test_store_detects_content_not_matching_its_manifest(tmp_path):
    w, _ = _write(tmp_path, "k1")
    w.publish()
    f = tmp_path / "block_width" / "cases.jsonl"
    f.write_bytes(b'{"id":"b"}\n')
    assert "cases.jsonl does not match manifest content_sha256" in store.verify(tmp_path / "block_width")
    assert not store.up_to_date(tmp_path / "block_width", "k1")


def test_stale_temporary_folder_of_a_dead_build_is_removed(tmp_path):
    p = subprocess.Popen(["true"])
    p.wait()
    stale = tmp_path / f".tmp-block_width-{p.pid}"
    stale.mkdir()
    live = tmp_path / f".tmp-block_width-{os.getpid()}"
    live.mkdir()
    assert store.clean_stale_tmp(tmp_path) == [stale]
    assert live.exists() and not stale.exists()


def _el(rect, offset, expect, client=(0, 0), scroll=(0, 0)):
    raw = {"rect": rect, "offset": offset, "client": list(client), "scroll": list(scroll)}
    return Measured.from_json({**raw, "expect": expect}, "test")


def test_page_check_follows_check_layout_semantics_per_engine():
    exp_a = {"data-expected-width": "100", "data-offset-x": "8"}
    exp_b = {"data-expected-rect-height": "20", "data-tolerance": "0.5", "data-expected-margin-top": "3"}
    pages = {
        "chromium": {"#a": _el([8, 8, 100.4, 10], [8, 8, 100, 10], exp_a), "@7": _el([8, 18, 100, 20.4], [8, 18, 100, 20], exp_b)},
        "firefox": {"#a": _el([8, 8, 100.4, 10], [8, 8, 100, 10], exp_a), "@7": _el([8, 18, 100, 20.0], [8, 18, 100, 20], exp_b)},
        "webkit": {"#a": _el([8, 8, 99, 10], [8, 8, 99, 10], exp_a), "@7": _el([8, 18, 100, 20.0], [8, 18, 100, 20], exp_b)},
    }
    r = check_page(pages, TOL).to_json()
    assert r["expectation_failures"] == ["#a"]
    a = r["elements"]["#a"]
    # offsetWidth, an integer, with tolerance 0 by default: only WebKit's 99 fails
    assert a["checks"]["data-expected-width"]["failed_in"] == ["webkit"]
    assert a["checks"]["data-offset-x"]["failed_in"] == []
    assert a["agreement"] == "2/3:webkit"
    b = r["elements"]["@7"]
    assert b["checks"]["data-expected-rect-height"]["failed_in"] == [] and b["agreement"] == "2/3:chromium"
    assert b["not_checked"] == ["data-expected-margin-top"]


def test_page_check_refuses_a_non_numeric_expectation():
    pages = {"webkit": {"#a": _el([0, 0, 1, 1], [0, 0, 1, 1], {"data-expected-width": "wide"})}}
    with pytest.raises(NevError) as e:
        check_page(pages, TOL)
    assert "data-expected-width='wide' on #a" in e.value.message


def test_an_engines_page_measurement_is_read_with_checked_reads():
    import json

    good = {"#a": {"rect": [8, 8.5, 100, 10], "offset": [8, 8, 100, None], "client": [0, 0],
                   "scroll": [0, 0], "expect": {"data-expected-width": "100"}}}
    m = measured_page(json.dumps(good), "webkit")["#a"]
    assert m.rect == (8, 8.5, 100, 10) and m.offset[3] is None
    assert m.expect == {"data-expected-width": "100"}
    elements = check_page({"webkit": {"#a": m}}, TOL).to_json()["elements"]
    assert elements["#a"]["engines"] == {"webkit": [8, 8.5, 100, 10]}   # the numbers as answered
    for bad, field in ((dict(good["#a"], rect=[8, None, 1, 1]), "#a.rect"),
                       (dict(good["#a"], client=[0]), "#a.client"),
                       (dict(good["#a"], expect={"data-tolerance": 1}), "#a.expect")):
        with pytest.raises(EngineError) as e:
            measured_page(json.dumps({"#a": bad}), "webkit")
        assert "\n" not in e.value.message and e.value.message.startswith(f"webkit: {field}: ")
    with pytest.raises(EngineError, match="webkit: the page's measurement is not JSON"):
        measured_page("{", "webkit")


def test_render_refuses_a_missing_page(tmp_path):
    with pytest.raises(NevError) as e:
        collect_pages([str(tmp_path / "nope.html")])
    assert e.value.exit_code == 2 and "nope.html" in e.value.message
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "p.html").write_text("<p id=x>")
    assert collect_pages([str(tmp_path / "d")]) == [tmp_path / "d" / "p.html"]


def test_reference_follows_css21_examples():
    # §10.3.3: both margins auto centre; over-constrained: margin-right absorbs.
    assert reference.block_width({"cb_width": 500, "width": "300px", "margin_left": "auto",
                                  "margin_right": "auto", "padding_left": "0px", "padding_right": "0px",
                                  "border_left": "0px", "border_right": "0px"}) == \
        {"width": 300, "margin_left": 100, "margin_right": 100}
    assert reference.block_width({"cb_width": 500, "width": "300px", "margin_left": "50px",
                                  "margin_right": "50px", "padding_left": "10%", "padding_right": "0px",
                                  "border_left": "0px", "border_right": "0px"})["margin_right"] == 100
    # §10.3.7: left, width, right all auto: static left 0, shrink-to-fit width.
    assert reference.abspos_width({"cb_width": 400, "left": "auto", "right": "auto", "width": "auto",
                                   "margin_left": "auto", "margin_right": "5px", "padding_left": "0px",
                                   "padding_right": "0px", "border_left": "0px", "border_right": "0px",
                                   "content_width": 120}) == \
        {"left": 0, "width": 120, "margin_left": 0, "margin_right": 5}


def _nev(*args, cwd, env=None):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": root, **(env or {})}, timeout=60)


def test_build_refuses_an_unknown_engine_as_usage_error(tmp_path):
    r = _nev("oracle", "build", "block_width", "--engines", "chromium,opera", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("nev: --engines 'chromium,opera': unknown opera")
    assert not (tmp_path / "corpus").exists()


def test_build_names_a_missing_engine_and_writes_nothing(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    r = _nev("oracle", "build", "block_width", "--cases", "5", cwd=tmp_path, env={"PATH": str(empty)})
    assert r.returncode == 1, r.stderr
    assert f"engine firefox, webkit not found on {socket.gethostname()}" in r.stderr
    assert "packages firefox-esr webkit2gtk-driver xvfb" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "corpus" / "block_width").exists()


def test_build_refuses_a_corpus_without_generator(tmp_path):
    r = _nev("oracle", "build", "grid_width", cwd=tmp_path)
    assert r.returncode == 2 and "names no generator" in r.stderr


def test_missing_engines_are_found_without_starting_a_browser(monkeypatch):
    from bench.oracle import engines

    assert engines.missing() == []  # all three are installed on every machine that runs the tests
    monkeypatch.setenv("PATH", "/nonexistent")
    assert engines.missing() == ["firefox", "webkit"]  # chromium is found by its absolute path
