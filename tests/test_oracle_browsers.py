"""The oracle against the three real browsers: batching, disagreement, store, shards, render."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.oracle import engines as eng
from bench.oracle import reference, store
from bench.oracle.build import build
from bench.oracle.cases import Case, Generator, Shard, generator_for
from bench.oracle.engines import ENGINES
from bench.oracle.fleet import Fleet
from bench.oracle.vote import DEFAULT_TOLERANCE

pytestmark = pytest.mark.parts  # starts Chromium, Firefox and WebKit here

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def fleet():
    f = Fleet(ENGINES)
    with f:
        yield f
    for pids in f.pids().values():
        assert pids == []


def nev(*args, cwd, env=None, timeout=300):
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout)


def test_engines_report_their_versions(fleet):
    versions = fleet.versions()
    assert set(versions) == set(ENGINES)
    for n, v in versions.items():
        probed = eng.probe_version(n)
        assert probed is not None and probed.startswith(v), (n, v, probed)


def test_batched_rendering_equals_one_fresh_document_per_case(fleet):
    sample = [generator_for("block_width").case(s) for s in range(30)] + \
             [generator_for("abspos_width").case(s) for s in range(30)]
    docs = [c.html for c in sample]
    batched = fleet.render(docs)
    fresh = fleet.render_fresh(docs)
    assert set(fresh) == set(ENGINES)
    for name in ENGINES:
        for i in range(len(docs)):
            assert batched[name][i] == fresh[name][i], (name, sample[i].id)  # bit for bit, every number


class FontText(Generator):
    """Test-only: text whose box depends on each engine's font metrics."""

    name = function = "font_text"
    version = "1"
    voted_rects = ("t",)
    STYLES = ["font:13.7px serif;display:inline-block", "font:17px monospace"]

    def case(self, seed):
        html = (f'<!DOCTYPE html><html><body style="margin:0"><div id="t" style="{self.STYLES[seed]}">'
                "Hamburgefonstiv quick</div></body></html>")
        return Case(self.case_id(seed), seed, {"style": self.STYLES[seed]}, html)

    def expected(self, case, m):
        return {"width": m["t"][2], "height": m["t"][3]}


def test_font_dependent_case_is_recorded_as_not_agreed(fleet, tmp_path):
    r = build("font_text", root=tmp_path, count=2, extra_generators={"font_text": FontText},
              fleet=fleet, quiet=True)
    votes = store.load_votes(r.folder)
    assert len(votes) == 2 and store.load_cases(r.folder) == []
    assert r.manifest.cases == 0
    for v in votes:
        assert v["agreement"] != "3/3" and "expected" not in v
        answers = {n: (e["expected"]["width"], e["expected"]["height"]) for n, e in v["engines"].items()}
        assert set(answers) == set(ENGINES) and len(set(answers.values())) > 1, answers


class Restless(Generator):
    """Test-only: a page whose layout changes on every load (a script picks the width)."""

    name = function = "restless"
    version = "1"
    voted_rects = ("t",)

    def case(self, seed):
        html = ('<!DOCTYPE html><html><body style="margin:0"><div id="t" style="height:5px"></div>'
                "<script>document.getElementById('t').style.width = (1 + Math.random() * 300) + 'px'"
                "</script></body></html>")
        return Case(self.case_id(seed), seed, {}, html)

    def expected(self, case, m):
        return {"width": m["t"][2]}


def test_a_case_that_changes_between_two_renders_is_quarantined(fleet, tmp_path):
    r = build("restless", root=tmp_path, count=3, extra_generators={"restless": Restless},
              fleet=fleet, quiet=True)
    assert r.manifest.quarantined == 3 and r.manifest.cases == 0
    for v in store.load_votes(r.folder):
        assert v["quarantined"] and set(v["changed"]) == set(ENGINES) and "expected" not in v


def _rows(folder):
    return sorted(store.load_cases(folder), key=lambda c: c["seed"])


def test_two_shards_together_equal_the_unsharded_corpus(fleet, tmp_path):
    whole = build("block_width", root=tmp_path, count=200, fleet=fleet, quiet=True)
    parts = [build("block_width", root=tmp_path, count=200, shard=Shard(i, 2), fleet=fleet, quiet=True)
             for i in range(2)]
    assert [p.folder.name for p in parts] == ["block_width.shard-0-of-2", "block_width.shard-1-of-2"]
    assert {c["seed"] % 2 for c in store.load_cases(parts[1].folder)} == {1}
    assert sorted(_rows(parts[0].folder) + _rows(parts[1].folder), key=lambda c: c["seed"]) == _rows(whole.folder)
    assert whole.manifest.generated == 200 and whole.manifest.cases >= 180


def test_rebuild_with_the_same_engines_writes_nothing(fleet, tmp_path):
    first = build("abspos_width", root=tmp_path, count=60, fleet=fleet, quiet=True)
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in first.folder.iterdir()}
    again = build("abspos_width", root=tmp_path, count=60, fleet=fleet, quiet=True)
    assert not again.written and again.manifest.key == first.manifest.key
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in first.folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abspos_width"]


def test_example_engine_reference_passes_nearly_every_agreed_case(fleet, tmp_path, capsys):
    """The crates_bridge runner reads the corpora as written; the example engine's hand-written
    functions (and the oracle's own CSS 2.1 reference) are scored on them; failures are listed."""
    from crates_bridge.runner import score_generated
    from crates_bridge.workspace import Workspace

    root = tmp_path / "corpus"
    built = {f: build(f, root=root, count=200, fleet=fleet, quiet=True) for f in ("block_width", "abspos_width")}
    scores = {s.function: s for s in score_generated(Workspace(ROOT / "crates_bridge" / "engine"), root, cases=True)}
    for function, r in built.items():
        agreed = store.load_cases(r.folder)
        s = scores[function]
        assert s.error is None and s.corpus == function
        assert s.cases_run == len(agreed) == r.manifest.cases >= 180
        rust_fails = [c for c in s.cases if not c.passed]
        py_fails = reference.failures(function, agreed, DEFAULT_TOLERANCE)
        with capsys.disabled():
            print(f"\n{function}: example engine passes {s.cases_passed}/{s.cases_run}; "
                  f"oracle's CSS 2.1 reference fails {len(py_fails)}")
            for c in rust_fails:
                print(f"  example engine fails {c.id}: " + ", ".join(
                    f"{k} oracle {e} engine {g}" for k, (e, g) in c.diff.items()))
            for f in py_fails:
                print(f"  reference fails {f['id']} {json.dumps(f['input'])} oracle {f['expected']} reference {f['reference']}")
        assert s.cases_passed >= 0.9 * s.cases_run
        assert len(py_fails) <= 0.05 * len(agreed)


def test_render_folder_of_pages_with_known_geometry(tmp_path):
    pages = tmp_path / "pages"
    pages.mkdir()
    head = '<!DOCTYPE html><html><head><style>body{margin:0}</style></head><body>'
    (pages / "block.html").write_text(
        head + '<div id="cb" style="width:400px" data-expected-width="400">'
        '<div id="el" style="width:50%;margin:0 auto;padding:0 10px" data-expected-width="220" '
        'data-offset-x="90"></div></div></body></html>')
    (pages / "abspos.html").write_text(
        head + '<div style="position:relative;width:300px;height:40px">'
        '<div id="a" style="position:absolute;left:10px;right:20px;height:5px" data-expected-width="270" '
        'data-offset-x="10" data-expected-height="5"></div></div></body></html>')
    (pages / "sub").mkdir()
    # check-layout style: no id, a script that changes the layout before it is measured
    (pages / "sub" / "float.html").write_text(
        head + '<div class="t" style="float:right;width:33.3px;height:7px" data-expected-rect-x="766.7" '
        'data-expected-rect-width="33.3" data-expected-width="33" data-tolerance="0.02"></div>'
        "<script>document.querySelector('.t').style.height = '9px'</script>"
        '<p data-expected-height="9" data-offset-y="0" style="margin:0;height:9px"></p></body></html>')
    r = nev("oracle", "render", str(pages), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    results = json.loads(r.stdout)
    assert [Path(x["page"]).name for x in results] == ["abspos.html", "block.html", "float.html"]
    checks = [(x["page"], k, attr, c) for x in results for k, e in x["elements"].items()
              for attr, c in e.get("checks", {}).items()]
    assert len(checks) == 11
    for page, key, attr, c in checks:
        assert c["failed_in"] == [] and set(c["got"]) == set(ENGINES), (page, key, attr, c)
    float_page = results[2]["elements"]
    assert set(float_page) == {"@4", "@6"} and float_page["@4"]["engines"]["webkit"][3] == 9
    text = nev("oracle", "render", str(pages / "block.html"), cwd=tmp_path)
    assert text.returncode == 0 and "#el 3/3" in text.stdout and "data-offset-x=90: ok" in text.stdout


def test_render_exits_1_when_a_page_expectation_fails(tmp_path):
    p = tmp_path / "wrong.html"
    p.write_text('<body style="margin:0"><div id="x" style="width:100px" data-expected-width="99"></div>')
    r = nev("oracle", "render", str(p), "--engines", "webkit", cwd=tmp_path)
    assert r.returncode == 1 and "data-expected-width=99: FAIL in webkit (webkit 100)" in r.stdout


def test_engines_command_prints_versions_and_that_each_starts(tmp_path):
    r = nev("oracle", "engines", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = {row["engine"]: row for row in json.loads(r.stdout)}
    assert set(rows) == set(ENGINES) and all(row["starts"] for row in rows.values())
    assert rows["firefox"]["version"].endswith("esr")


def test_a_new_generator_version_writes_a_new_corpus_and_keeps_the_old_one(fleet, tmp_path):
    old = build("block_width", root=tmp_path, count=20, fleet=fleet, quiet=True)

    class BlockWidthNext(type(generator_for("block_width"))):
        version = "1-next"

    new = build("block_width", root=tmp_path, count=20, fleet=fleet, quiet=True,
                extra_generators={"block_width": BlockWidthNext})
    assert new.written and new.manifest.key != old.manifest.key
    assert new.manifest.doc["generator"] == {"name": "block_width", "version": "1-next"}
    assert new.superseded is not None and store.read_manifest(new.superseded).key == old.manifest.key
    assert store.verify(new.superseded) is None  # the old corpus is kept whole, not reused


def test_engine_reporting_another_version_than_installed_stops_the_build(fleet, tmp_path, monkeypatch):
    first = build("block_width", root=tmp_path, count=10, fleet=fleet, quiet=True)
    real = eng.probe_version
    monkeypatch.setattr(eng, "probe_version", lambda n: "2.52.0" if n == "webkit" else real(n))
    with pytest.raises(eng.EngineError) as e:
        build("block_width", root=tmp_path, count=10, fleet=fleet, quiet=True)
    assert "webkit reports version" in e.value.message and "2.52.0" in e.value.message
    assert store.up_to_date(first.folder, first.manifest.key)  # the published corpus untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["block_width"]


def test_an_error_inside_a_fleet_stops_every_engine_process():
    from lanes.base.procgroup import alive as group_alive

    groups = []
    with pytest.raises(RuntimeError, match="a failing test"):
        with Fleet(["webkit"]) as f:
            groups = f.pids()["webkit"]
            assert len(groups) == 2 and all(group_alive(g) for g in groups)  # Xvfb, driver (+MiniBrowser)
            raise RuntimeError("a failing test")
    assert groups and not any(group_alive(g) for g in groups)
