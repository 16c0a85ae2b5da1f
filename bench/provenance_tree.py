"""The provenance index read from a checkout: the records, floors and sources of its generated
functions, and the inputs as its tree holds them now (spec files, the engine's css.rs, corpora),
from the working tree or a commit's tree (`main`: what landed). The decisions over them are
`bench.provenance`'s."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from bench import prompt
from bench.provenance import CSS_RS, Current, Entry, Record, spec_digest
from crates_bridge.corpus import Manifest, read_manifest
from crates_bridge.errors import BridgeError
from crates_bridge.registry import (
    FLOOR_SUFFIX,
    NAME_RE,
    PROVENANCE_SUFFIX,
    parse_floor,
    parse_provenance,
)
from lanes.base import jsonfile
from lanes.base.errors import ConfigError
from lanes.base.gitrun import Repo


class Tree:
    """Files of a checkout by path relative to its root: the working tree (`rev` None), or a
    commit's tree (`main`: what landed, whatever the checkout holds)."""

    def __init__(self, root: Path, rev: str | None = None) -> None:
        self.root, self.rev = root, rev
        self._files: set[str] | None = None

    def label(self, rel: str) -> str:
        return f"{self.rev}:{rel}" if self.rev else str(self.root / rel)

    def read(self, rel: str) -> bytes | None:
        """The file's bytes; None when it is not there (a folder, FIFO or huge file in its
        place: ConfigError naming it)."""
        if self.rev is None:
            p = self.root / rel
            return jsonfile.read_bytes(p, "file", "") if os.path.lexists(p) else None
        return Repo(self.root).show_bytes(self.rev, rel)

    def names(self, rel_dir: str) -> list[str]:
        """The file names directly in `rel_dir`."""
        if self.rev is None:
            d = self.root / rel_dir
            return sorted(p.name for p in d.iterdir()) if d.is_dir() else []
        if self._files is None:
            self._files = Repo(self.root).tree_files(self.rev)
        pre = rel_dir.rstrip("/") + "/"
        return sorted(
            f[len(pre) :] for f in self._files if f.startswith(pre) and "/" not in f[len(pre) :]
        )


def _json(tree: Tree, rel: str, what: str) -> object:
    data = tree.read(rel)
    if data is None:
        return None
    return jsonfile.parse(jsonfile.decode(data, tree.label(rel), what), tree.label(rel), what)


def load_index(tree: Tree, engine: str) -> list[Entry]:
    """Every generated function's record in `tree` (`engine`: the engine folder, relative), with
    its floor and the hash of its source."""
    gen = f"{engine.rstrip('/')}/crates/layout/src/generated"
    out = []
    for name in tree.names(gen):
        if not name.endswith(PROVENANCE_SUFFIX):
            continue
        fn = name[: -len(PROVENANCE_SUFFIX)]
        rel = f"{gen}/{name}"
        try:
            if not NAME_RE.match(fn):
                raise BridgeError(
                    f"{tree.label(rel)}: `{fn}` is not a Rust function name; rename the file"
                )
            raw = parse_provenance(
                Path(tree.label(rel)), _json(tree, rel, "provenance record"), fn
            ).raw
            floor_raw = _json(tree, f"{gen}/{fn}{FLOOR_SUFFIX}", "floor file")
            floor = (
                None
                if floor_raw is None
                else parse_floor(Path(tree.label(f"{gen}/{fn}{FLOOR_SUFFIX}")), floor_raw)
            )
        except BridgeError as e:
            raise ConfigError(str(e)) from None
        src = tree.read(f"{gen}/{fn}.rs")
        out.append(
            Entry(fn, Record.of(raw), floor,
                  hashlib.sha256(src).hexdigest() if src is not None else None)
        )
    return out


def current_of(
    entries: Sequence[Entry], tree: Tree, engine: str, specs: str, corpus_root: Path
) -> Current:
    """The inputs of every indexed function as `tree` holds them now (spec files: the tree's
    `specs` folder, else nev's own; corpora: the folder `corpus_root`, never in git)."""

    digests: dict[str, str | None] = {}
    corpora: dict[str, Manifest | None] = {}
    for e in entries:
        rel = f"{specs.rstrip('/')}/{e.function}.md"
        data = tree.read(rel)
        label = tree.label(rel)
        if data is None and (prompt.SPECS_DIR / f"{e.function}.md").is_file():
            label = str(prompt.SPECS_DIR / f"{e.function}.md")
            data = (prompt.SPECS_DIR / f"{e.function}.md").read_bytes()
        try:
            digests[e.function] = (
                None
                if data is None
                else spec_digest(prompt.parse_spec(Path(label), data.decode("utf-8", "replace")))
            )
        except ConfigError:
            digests[e.function] = None
        name = e.record.corpus_name or e.record.verification_corpus or e.function
        try:
            corpora[e.function] = read_manifest(corpus_root / str(name))
        except BridgeError:
            corpora[e.function] = None  # no corpus here: the key is not checked
    css = tree.read(f"{engine.rstrip('/')}/{CSS_RS}")
    return Current(digests, css.decode("utf-8", "replace") if css is not None else None, corpora)
