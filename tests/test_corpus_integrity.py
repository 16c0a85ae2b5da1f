"""A corpus altered after it was published is never ground truth: the floors refuse it (exit 11),
the builder names it and renders it anew (in the copy and in the shared store), and a candidate
probe refuses to score against it. Engines that count their renders stand in for the browsers."""

from __future__ import annotations

import pytest

from bench.oracle import store
from bench.oracle.truth import NoGroundTruth, check_folders
from crates_bridge import corpus
from crates_bridge.errors import BridgeError
from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit
from tests.test_oracle_shared import Counts, copy_build


def _tamper(folder) -> None:
    f = folder / "cases.jsonl"
    f.write_bytes(f.read_bytes().replace(b"1", b"2", 1))


def test_a_published_corpus_changed_afterwards_is_refused_as_ground_truth(tmp_path):
    counts = Counts()
    copy = tmp_path / "copy"
    r = copy_build(counts, copy, tmp_path / "share")
    check_folders(["block_width"], copy / "corpus", require=True)  # as published: ground truth
    _tamper(r.folder)
    with pytest.raises(NoGroundTruth) as e:
        check_folders(["block_width"], copy / "corpus", require=True)
    assert e.value.exit_code == Exit.NO_GROUND_TRUTH
    assert str(r.folder) in str(e.value) and "no longer match the content hashes" in str(e.value)
    assert "nothing was scored" in str(e.value)


def test_the_builder_names_an_altered_corpus_and_builds_it_anew(tmp_path, capsys):
    counts = Counts()
    share = tmp_path / "share"
    copy = tmp_path / "copy"
    r = copy_build(counts, copy, share, quiet=False)
    rendered = counts.rendered
    entry = r.shared
    # the store's entry altered (a sandbox cannot; anything else writing the share could)
    _tamper(entry)
    _tamper(r.folder)
    capsys.readouterr()
    r2 = copy_build(counts, copy, share, quiet=False)
    err = capsys.readouterr().err
    assert f"{r.folder} is not ground truth: its bytes no longer match" in err
    assert f"{entry} is not ground truth: its bytes no longer match" in err
    assert counts.rendered > rendered  # rendered anew, not copied
    assert store.verify(r2.folder) is None and store.verify(entry) is None
    check_folders(["block_width"], copy / "corpus", require=True)


def test_a_probe_refuses_a_corpus_whose_cases_changed(tmp_path):
    folder = corpus.write_corpus(
        tmp_path / "block_width",
        "block_width",
        [{"id": "a", "seed": 1, "input": {}, "expected": {}}],
        {"reference": "1"},
    )
    corpus.check_content(folder)
    _tamper(folder)
    (folder / "cases.jsonl").write_bytes(b'{"id": "b"}\n')
    with pytest.raises(BridgeError) as e:
        corpus.check_content(folder)
    assert str(folder) in str(e.value) and "no longer matches the content hash" in str(e.value)
    assert "nothing was scored" in str(e.value)


def test_the_ground_truth_service_builds_what_a_verify_asks_and_refuses_what_it_does_not_know(
    tmp_path, monkeypatch
):
    """The protocol between a verify in the sandbox and nev's builder outside (the builder here
    is a stand-in writing a published corpus through the store's writer; the socket is real)."""
    from bench.oracle import truth_service

    asked = []

    def build(names, count, folder):
        asked.append((names, count))
        for n in names:
            w = store.Writer(folder, n)
            w.write(
                {
                    "key": f"k-{n}-{count}",
                    "cases": 1,
                    "engines": {"chromium": "1", "firefox": "1", "webkit": "1"},
                },
                b'{"id":"a"}\n',
                b"{}\n",
            )
            w.publish()

    svc = truth_service.Service(build, say=lambda line: None)
    try:
        for k, v in svc.env.items():
            monkeypatch.setenv(k, v)
        root = tmp_path / "copy" / "corpus"
        truth_service.request(["block_width"], 30, root)
        assert asked == [(["block_width"], 30)]
        assert store.read_manifest(root / "block_width").key == "k-block_width-30"
        assert store.verify(root / "block_width") is None
        for names, count, words in (
            (["no_such_corpus"], 30, "no_such_corpus"),
            (["../x"], 30, "names"),
            (["block_width"], 0, "count"),
        ):
            with pytest.raises(NevError) as e:
                truth_service.request(names, count, root)
            assert words in str(e.value)
        assert asked == [(["block_width"], 30)]  # nothing refused was built
    finally:
        svc.close()
    assert not svc.dir.exists()
