"""The docs' file examples are files nev reads: every fenced block marked with the file it is
(```json file=bench/lane.local.json) is written there and loaded with nev's own reader, so an
example that a newcomer copies is one nev accepts.

The mark is `file=PATH` after the block's language; PATH's name picks the reader (READERS). A
marked block whose file no reader knows fails too, so a new kind of example gets a reader here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import folknet
from jobs import manifest, tracks
from lanes import lanesfile
from lanes.base import config, settings
from lanes.base.errors import NevError
from rig import rigfile

ROOT = Path(__file__).resolve().parent.parent
_OPEN = re.compile(r"^(\s*)(```+)\s*([A-Za-z0-9_+-]+)\s+file=(\S+)\s*$")

READERS: dict[str, Callable[[Path], object]] = {
    "lane.local.json": lanesfile.load,
    "lanes.json": lanesfile.load,         # beside the config file (docs/quickstart.md)
    "rig.local.json": rigfile.load,
    "rig.json": rigfile.load,
    "config.toml": lambda p: config.values(p, {s.name: s.secret for s in settings.all_settings()}),
    "folknet.json": folknet.load,
    "tracks.json": tracks.load,
    ".yaml": manifest.load,             # a job manifest
}


@dataclass(frozen=True)
class Example:
    doc: str
    line: int
    path: str
    text: str


def examples(root: Path = ROOT) -> list[Example]:
    found = []
    for doc in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        lines = doc.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            m = _OPEN.match(lines[i])
            if not m:
                i += 1
                continue
            indent, fence = m.group(1), m.group(2)
            body: list[str] = []
            j = i + 1
            while j < len(lines) and lines[j].strip() != fence:
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
                j += 1
            text = "\n".join(body) + "\n"
            found.append(Example(str(doc.relative_to(root)), i + 1, m.group(4), text))
            i = j + 1
    return found


def reader(path: str) -> Callable[[Path], object] | None:
    name = Path(path).name
    return READERS.get(name) or next((r for suffix, r in READERS.items()
                                      if suffix.startswith(".") and name.endswith(suffix)), None)


def problems(root: Path, work: Path) -> list[str]:
    out = []
    for n, ex in enumerate(examples(root)):
        read = reader(ex.path)
        if read is None:
            out.append(f"{ex.doc}:{ex.line}: no reader for {ex.path} (add one to READERS)")
            continue
        target = work / str(n) / ex.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(ex.text)
        try:
            read(target)
        except NevError as e:
            out.append(f"{ex.doc}:{ex.line}: {ex.path}: {e}")
    return out


@pytest.fixture(autouse=True)
def _no_rig_settings(monkeypatch):
    for name in ("NEV_LANE_JUMP", "GENERA_LANE_JUMP", "NEV_LANE_SSH", "GENERA_LANE_SSH"):
        monkeypatch.delenv(name, raising=False)


def test_every_file_example_in_the_docs_loads_with_its_reader(tmp_path):
    found = examples()
    kinds = {Path(e.path).name for e in found}
    assert {"lanes.json", "rig.json", "config.toml", "folknet.json", "tracks.json"} <= kinds, kinds
    assert any(e.doc == "docs/quickstart.md" for e in found)
    assert problems(ROOT, tmp_path) == []


def test_the_quickstart_lanes_example_is_read_as_written(tmp_path):
    ex = next(e for e in examples()
              if e.doc == "docs/quickstart.md" and e.path == "lanes.json")
    (tmp_path / "lanes.json").write_text(ex.text)
    lf = lanesfile.load(tmp_path / "lanes.json")
    assert [ln.ssh for ln in lf.lanes] == ["lane@10.0.0.11", "lane@10.0.0.12"]
    assert lf.jump == "admin@jump-host" and lf.git_url and "@" not in lf.git_url


def _doc(tmp_path: Path, body: str) -> Path:
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# x\n")
    (root / "docs" / "page.md").write_text(body)
    return root


@pytest.mark.parametrize("body, says", [
    ('```json file=bench/lane.local.json\n'
     '{"lanes": [{"ssh": "lane@10.0.0.11", "root": "srv"}]}\n```\n',
     "lanes[0].root"),
    ('```json file=rig/rig.local.json\n{"jump": "root@j", "forwards": {"f": {"local_port": 0, '
     '"target": "h:1"}}}\n```\n', "local_port"),
    ('```json file=bench/folknet.json\n{"providers": ["p"], "aliases": {"a": {"pool": "g", '
     '"max_inflight": 1, "provider": "p", "tier": "fast"}}}\n```\n', "aliases.a.tier"),
    ('```json file=tracks.json\n{"verify": "make test", "landCheck": []}\n```\n', "landCheck"),
    ('  ```yaml file=job.yaml\n  name: j\n  base: nothex\n  spec: s.md\n  stages: [{name: a, '
     'kind: command, command: "true"}]\n  ```\n', "base"),
    ('```json file=bench/unknown.json\n{}\n```\n', "no reader"),
])
def test_a_planted_bad_example_fails(tmp_path, body, says):
    out = problems(_doc(tmp_path, "# page\n\n" + body), tmp_path / "work")
    assert len(out) == 1 and out[0].startswith("docs/page.md:3:") and says in out[0], out


def test_a_good_planted_example_passes_and_unmarked_blocks_are_not_read(tmp_path):
    body = ('```json file=tracks.json\n'
            '{"verify": "make test", "landChecks": [], "protected": []}\n```\n'
            '```json\n{"not": "a file nev reads"}\n```\n')
    root = _doc(tmp_path, body)
    assert [e.path for e in examples(root)] == ["tracks.json"]
    assert problems(root, tmp_path / "work") == []


def test_the_lane_machines_page_lists_the_declared_guest_packages_by_stage():
    """docs/lane-machines.md's table of what a lane guest holds is `lanes/guestlist.py`'s list."""
    from lanes import guestlist

    text = (ROOT / "docs" / "lane-machines.md").read_text(encoding="utf-8")
    for stage in guestlist.Stage:
        row = re.search(rf"^\| {stage.value} \| ([^|]+)\|", text, re.M)
        assert row, stage
        assert tuple(row.group(1).split()) == guestlist.packages(stage), stage
