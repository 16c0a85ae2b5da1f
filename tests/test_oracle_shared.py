"""The shared corpus store without a browser: engines that count their starts and renders stand
in for the three browsers; everything else (keys, lock, store, copies, CLI) is the real code."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.oracle import shared, store
from bench.oracle.build import build, build_many, summary_lines

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("chromium", "firefox", "webkit")
VERSIONS = {"chromium": "156.0.8078.114", "firefox": "153.8.0esr", "webkit": "2.50.6"}


class Counts:
    def __init__(self) -> None:
        self.starts = 0
        self.rendered = 0
        self.lock = threading.Lock()
        self.started = threading.Event()   # an engine is up (a build holds the key's lock)
        self.go = threading.Event()        # the engines may answer
        self.go.set()


class CountingEngine:
    """Answers every block_width case with the same boxes, so every case is agreed."""

    def __init__(self, name: str, counts: Counts, versions=VERSIONS) -> None:
        self.name, self.counts, self.versions = name, counts, versions

    def start(self) -> None:
        with self.counts.lock:
            self.counts.starts += 1
        self.counts.started.set()
        assert self.counts.go.wait(60), "the test never let the engines answer"

    @property
    def version(self) -> str:
        return self.versions[self.name]

    def render(self, docs):
        with self.counts.lock:
            self.counts.rendered += len(docs)
        box = [10.0, 0.0, 300.0, 10.0, 10.0, 90.0, None, None]
        return [{"cb": [0.0, 0.0, 400.0, 10.0, 0.0, 0.0, None, None], "el": box, "w": box} for _ in docs]

    def stop(self) -> None:
        pass

    def kill(self) -> None:
        pass

    def pids(self) -> list[int]:
        return []


def probe(versions=VERSIONS):
    return lambda names: {n: versions[n] for n in names}


def copy_build(counts, copy: Path, store_root: Path, versions=VERSIONS, corpus="block_width", quiet=True):
    return build(corpus, root=copy / "corpus", count=30, quiet=quiet, store_root=store_root,
                 make_engine=lambda n: CountingEngine(n, counts, versions), probe=probe(versions))


def blocked_on(lock_file: Path) -> bool:
    """Some process or thread waits for a flock on this file (/proc/locks marks waiters `->`)."""
    ino = os.stat(lock_file).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if "->" in parts and parts[parts.index("->") + 1] == "FLOCK" and parts[-3].endswith(f":{ino}"):
            return True
    return False


def test_two_copies_building_one_key_at_once_render_it_once_and_get_the_same_corpus(tmp_path, capsys):
    share = tmp_path / "share" / "corpora"
    a, b = tmp_path / "lane0" / "track", tmp_path / "lane1" / "track"
    counts = Counts()
    counts.go.clear()    # the first builder holds the lock with its engines up until the second waits
    results: dict[str, object] = {}

    def run(name: str, copy: Path) -> None:
        try:
            results[name] = copy_build(counts, copy, share, quiet=name == "a")
        except BaseException as e:  # noqa: BLE001 - reported by the assertions below
            results[name] = e

    first = threading.Thread(target=run, args=("a", a))
    first.start()
    assert counts.started.wait(30), "the first builder never started its engines"
    second = threading.Thread(target=run, args=("b", b))
    second.start()
    lock_file = next(share.glob("*.lock"))
    deadline = time.monotonic() + 30
    while not blocked_on(lock_file) and time.monotonic() < deadline:
        time.sleep(0.05)
    waited = blocked_on(lock_file)
    counts.go.set()
    first.join(60)
    second.join(60)
    assert waited, "the second builder did not wait on the key's lock"
    ra, rb = results["a"], results["b"]
    assert not isinstance(ra, BaseException) and not isinstance(rb, BaseException), results
    assert counts.starts == 3 and counts.rendered == 3 * 2 * 30   # one start of each engine, each case twice
    assert ra.rendered and not rb.rendered
    key = ra.manifest.key
    name = f"block_width-{key[:16]}"
    assert rb.manifest.key == key and ra.shared == rb.shared == share / name
    assert sorted(p.name for p in share.iterdir()) == [name, f"{name}.lock"]
    for file in ("manifest.json", "cases.jsonl", "votes.jsonl"):
        data = (share / name / file).read_bytes()
        assert (a / "corpus" / "block_width" / file).read_bytes() == data
        assert (b / "corpus" / "block_width" / file).read_bytes() == data
    assert ra.manifest.cases == 30 and store.verify(b / "corpus" / "block_width") is None
    assert summary_lines(rb)[0].endswith("30 agreed cases); nothing rendered")
    assert f"another build of this corpus holds {share / name}.lock; waiting for it" in capsys.readouterr().err


def test_a_key_with_another_engine_version_is_rendered_anew_beside_the_first(tmp_path):
    share = tmp_path / "corpora"
    counts = Counts()
    old = copy_build(counts, tmp_path / "a", share)
    again = copy_build(counts, tmp_path / "b", share)
    assert counts.starts == 3 and not again.rendered
    newer = dict(VERSIONS, webkit="2.52.0")
    new = copy_build(counts, tmp_path / "b", share, versions=newer)
    assert new.rendered and counts.starts == 6 and counts.rendered == 2 * 3 * 2 * 30
    assert new.manifest.key != old.manifest.key and (new.manifest.engines or {})["webkit"] == "2.52.0"
    for key in (old.manifest.key, new.manifest.key):   # the first key stays whole beside the new
        assert store.up_to_date(share / f"block_width-{key[:16]}", key)
    assert new.superseded is not None and store.read_manifest(new.superseded).key == old.manifest.key


def test_a_build_that_died_before_publishing_leaves_nothing_a_later_builder_takes(tmp_path):
    share = tmp_path / "corpora"
    counts = Counts()
    key = copy_build(counts, tmp_path / "probe", share).manifest.key
    name = shared.entry("block_width", key)
    # as if another lane's builder of this key had died half way: its folder is there, unpublished
    (share / name).rename(share / f"{store.TMP_PREFIX}{name}-999999")
    (share / f"{store.TMP_PREFIX}{name}-999999" / "cases.jsonl").write_bytes(b"half\n")
    r = copy_build(counts, tmp_path / "next", share)
    assert r.rendered and counts.starts == 6
    assert sorted(p.name for p in share.iterdir()) == [name, f"{name}.lock"]
    assert store.verify(share / name) is None


def test_several_corpora_start_the_engines_once_and_none_when_all_are_found(tmp_path):
    share = tmp_path / "corpora"
    counts = Counts()

    def many(copy: Path):
        return build_many(["block_width", "block_width-big", "abspos_width"], root=copy / "corpus", count=20,
                          quiet=True, store_root=share, make_engine=lambda n: CountingEngine(n, counts),
                          probe=probe())

    first = many(tmp_path / "a")
    # block_width-big is block_width's generator with the same seeds: the same key, copied
    assert counts.starts == 3 and [r.rendered for r in first] == [True, False, True]
    assert counts.rendered == 2 * 3 * 2 * 20 and first[0].shared == first[1].shared
    assert sorted((tmp_path / "a" / "corpus").iterdir()) == \
        [tmp_path / "a" / "corpus" / n for n in ("abspos_width", "block_width", "block_width-big")]
    second = many(tmp_path / "b")
    assert counts.starts == 3 and [r.rendered for r in second] == [False, False, False]
    third = many(tmp_path / "b")
    assert counts.starts == 3 and [r.written for r in third] == [False, False, False]


def test_without_a_store_a_corpus_is_rendered_in_the_copy_as_before(tmp_path):
    counts = Counts()
    r = build("block_width", root=tmp_path / "corpus", count=10, quiet=True,
              make_engine=lambda n: CountingEngine(n, counts), probe=probe())
    assert r.rendered and r.shared is None and counts.starts == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]
    assert store.up_to_date(tmp_path / "corpus" / "block_width", r.manifest.key)


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"NEV_ON_LANE": "1", "NEV_LANE_SHARED": "/srv/nas"}, Path("/srv/nas/corpora")),
    ({"NEV_ON_LANE": "1"}, Path("/srv/lane-shared/corpora")),
    ({"NEV_CORPUS_STORE": "/tmp/x"}, Path("/tmp/x")),
])
def test_the_store_is_the_share_on_a_lane_and_none_elsewhere_unless_named(env, expected):
    assert shared.store_root(env) == expected


def test_build_command_checks_every_corpus_name_before_building_any(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rig.cli", "oracle", "build", "block_width", "grid_width"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "grid_width" in r.stderr and "names no generator" in r.stderr
    assert not (tmp_path / "corpus").exists()


def test_each_corpus_of_several_reports_its_own_rendering_rate():
    from bench.oracle.fleet import Fleet

    f = Fleet(["webkit"])
    f.rendered["webkit"], f.busy["webkit"] = 100, 1.0    # the first corpus: 100 cases in 1 s
    since = f.mark()
    f.rendered["webkit"], f.busy["webkit"] = 400, 2.0    # the second: 300 more in 1 s more
    assert f.rates(since) == {"webkit": 300.0} and f.rates() == {"webkit": 200.0}
    f.stop()


def _plant(entry: Path) -> None:
    """What a gate's command can do to a store entry: replace its cases and their hash together
    (the manifest then matches the planted bytes)."""
    import hashlib
    import json

    planted = b'{"planted": true}\n'
    (entry / "cases.jsonl").write_bytes(planted)
    man = json.loads((entry / "manifest.json").read_text())
    man["content_sha256"] = hashlib.sha256(planted).hexdigest()
    (entry / "manifest.json").write_text(json.dumps(man))
    assert store.verify(entry) is None             # consistent: the manifest alone cannot tell


def test_outside_a_gate_a_lane_uses_only_store_entries_whose_digest_nev_vouches_for(
        tmp_path, monkeypatch):
    """On a lane (NEV_ON_LANE), a build outside any gate's jail (a job's step, a verify's builder)
    records the digest of what it rendered under the share's `corpus-digests/` (read-only in every
    gate's jail) and uses a store entry only when that digest vouches for it: an entry a gate
    rendered, or replaced together with its manifest's hash, is rendered anew. Inside a gate
    (NEV_IN_GATE) the store is used as it is and nothing is recorded."""
    share = tmp_path / "share"
    store_root = share / "corpora"
    share.mkdir()
    monkeypatch.setenv("NEV_ON_LANE", "1")
    monkeypatch.setenv("NEV_LANE_SHARED", str(share))
    counts = Counts()
    monkeypatch.setenv("NEV_IN_GATE", "1")
    gated = copy_build(counts, tmp_path / "gate", store_root)     # a gate renders: not vouched for
    assert gated.rendered and not (share / shared.DIGESTS).exists()
    monkeypatch.delenv("NEV_IN_GATE")
    job = copy_build(counts, tmp_path / "job", store_root)              # a job's step: renders anew
    per_build = 3 * 2 * 30                                         # each engine, each case twice
    assert job.rendered and counts.rendered == 2 * per_build
    entry = job.shared
    digests = shared.Digests.for_store(store_root)
    assert digests is not None and digests.vouches(entry)
    again = copy_build(counts, tmp_path / "job2", store_root)            # vouched for: used
    assert not again.rendered and counts.rendered == 2 * per_build
    _plant(entry)                                                         # a gate's trick
    monkeypatch.setenv("NEV_IN_GATE", "1")
    fooled = copy_build(counts, tmp_path / "gate2", store_root)   # gates still share the store
    assert not fooled.rendered
    monkeypatch.delenv("NEV_IN_GATE")
    fresh = copy_build(counts, tmp_path / "job3", store_root)
    assert fresh.rendered and counts.rendered == 3 * per_build
    cases = tmp_path / "job3" / "corpus" / "block_width" / "cases.jsonl"
    assert b"planted" not in cases.read_bytes()
    assert digests.vouches(fresh.shared)
