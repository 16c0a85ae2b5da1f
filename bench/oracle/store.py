"""The corpus store: one folder per corpus, written once, keyed by the engine version set.

`corpus/<name>/` (or `corpus/<name>.shard-<i>-of-<n>/` for a shard) holds manifest.json,
cases.jsonl and votes.jsonl (docs/dump-format.md). A build writes a hidden temporary
folder and publishes it with one rename, so a killed build publishes nothing. The key
is the hash of everything that decides the content (function, generator and version,
engine versions, tolerance, seeds): the same key is never written twice, and a new key
(a browser update) moves the old corpus to `corpus/.superseded/` instead of reusing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base import jsonfile
from lanes.base.errors import ConfigError, NevError

FORMAT = 1
TMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class StoreManifest:
    """A corpus's manifest.json (docs/dump-format.md), as `Writer.finish` wrote it and
    `read_manifest` reads it. `doc` is the file's object, served (`--json`, the store service's
    answer) and copied unchanged; the fields nev reads are attributes. Read leniently, as every
    version read it: a field of another type is absent (a hash that is not a string matches no
    file, so the corpus is rebuilt); a file that is not a JSON object is no manifest at all."""

    doc: dict[str, object]
    key: str | None = None
    function: str | None = None
    content_sha256: str | None = None
    votes_sha256: str | None = None
    engines: dict[str, str] | None = None        # engine -> version; None: not an object
    cases: int | None = None                     # agreed cases (cases.jsonl's lines)
    generated: int | None = None
    quarantined: int | None = None
    agreement: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, doc: dict[str, object]) -> StoreManifest:
        def s(k: str) -> str | None:
            v = doc.get(k)
            return v if isinstance(v, str) else None

        def n(k: str) -> int | None:
            v = doc.get(k)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        eng, agr = doc.get("engines"), doc.get("agreement")
        return cls(
            doc, s("key"), s("function"), s("content_sha256"), s("votes_sha256"),
            {str(k): str(v) for k, v in eng.items()} if isinstance(eng, dict) else None,
            n("cases"), n("generated"), n("quarantined"),
            {str(k): v for k, v in agr.items() if isinstance(v, int)}
            if isinstance(agr, dict) else {},
        )

    def to_json(self) -> dict[str, object]:
        return self.doc


def canonical(data: object) -> bytes:
    """JSON data in the one byte form the key hashes."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def corpus_key(function: str, generator: Mapping[str, str], engines: Mapping[str, str],
               tolerance: float, seeds: Mapping[str, object]) -> str:
    """The identity of a corpus: sha256 over everything that decides its content."""
    return hashlib.sha256(canonical({"format": FORMAT, "function": function, "generator": dict(generator),
                                     "engines": dict(engines), "tolerance_px": tolerance,
                                     "seeds": dict(seeds)})).hexdigest()


def folder_name(name: str, shard_index: int, shard_count: int) -> str:
    return name if shard_count == 1 else f"{name}.shard-{shard_index}-of-{shard_count}"


def jsonl_bytes(rows: Iterable[Mapping[str, object]]) -> bytes:
    return b"".join(json.dumps(r, sort_keys=True, separators=(",", ":")).encode() + b"\n" for r in rows)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_manifest(folder: Path) -> StoreManifest | None:
    """The folder's manifest; None when it is missing, not JSON or not an object."""
    p = folder / "manifest.json"
    if not p.is_file():
        return None
    try:
        data = jsonfile.load(p, "corpus manifest")
    except ConfigError:
        return None
    return StoreManifest.of(data) if isinstance(data, dict) else None


def verify(folder: Path) -> str | None:
    """None when the folder's files match its manifest's content hash; else what is wrong."""
    man = read_manifest(folder)
    if man is None:
        return f"{folder}/manifest.json is missing or not JSON"
    try:
        cases = (folder / "cases.jsonl").read_bytes()
        votes = (folder / "votes.jsonl").read_bytes()
    except OSError as e:
        return f"{folder}: {e.strerror}: {e.filename}"
    # content_sha256 covers cases.jsonl, as the runner's own test corpora define it
    if sha256(cases) != man.content_sha256:
        return f"{folder}: cases.jsonl does not match manifest content_sha256"
    if sha256(votes) != man.votes_sha256:
        return f"{folder}: votes.jsonl does not match manifest votes_sha256"
    return None


def up_to_date(folder: Path, key: str) -> bool:
    man = read_manifest(folder)
    return man is not None and man.key == key and verify(folder) is None


def clean_stale_tmp(root: Path) -> list[Path]:
    """Remove temporary folders of builds whose process is gone (killed with SIGKILL)."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for p in root.iterdir():
        if not p.name.startswith(TMP_PREFIX):
            continue
        try:
            pid = int(p.name.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            continue
        if not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


class Writer:
    """Writes one corpus into a temporary folder; `publish()` makes it visible in one rename."""

    def __init__(self, root: Path, folder: str) -> None:
        self.root = root
        self.final = root / folder
        root.mkdir(parents=True, exist_ok=True)
        self.tmp = root / f"{TMP_PREFIX}{folder}-{os.getpid()}"
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir()

        self._files = {n: open(self.tmp / n, "wb") for n in ("cases.jsonl", "votes.jsonl")}
        self._hashes = {n: hashlib.sha256() for n in self._files}

    def append(self, name: str, rows: Iterable[Mapping[str, object]]) -> None:
        """Stream rows to cases.jsonl or votes.jsonl (memory stays at one batch)."""
        data = jsonl_bytes(rows)
        self._files[name].write(data)
        self._hashes[name].update(data)

    def finish(self, manifest: Mapping[str, object]) -> StoreManifest:
        """Close the streams and write the manifest (its fields as the build made them) with the
        content hashes."""
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        manifest = dict(manifest, content_sha256=self._hashes["cases.jsonl"].hexdigest(),
                        votes_sha256=self._hashes["votes.jsonl"].hexdigest())
        with open(self.tmp / "manifest.json", "w") as m:
            m.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            m.flush()
            os.fsync(m.fileno())
        return StoreManifest.of(manifest)

    def write(self, manifest: Mapping[str, object], cases: bytes, votes: bytes) -> StoreManifest:
        """The whole corpus at once (small corpora, tests)."""
        for name, data in (("cases.jsonl", cases), ("votes.jsonl", votes)):
            self._files[name].write(data)
            self._hashes[name].update(data)
        return self.finish(manifest)

    def copy_of(self, src: Path) -> None:
        """Fill the temporary folder with a published corpus's files as they are (nothing rendered)."""
        for f in self._files.values():
            f.close()
        for name in (*self._files, "manifest.json"):
            shutil.copyfile(src / name, self.tmp / name)
        problem = verify(self.tmp)
        if problem:
            raise NevError(f"copying {src}: {problem}")

    def publish(self) -> Path | None:
        """Rename into place; an older corpus with another key moves to .superseded/ (returned)."""
        moved = None
        if self.final.exists():
            old = read_manifest(self.final)
            key = old.doc.get("key", "unknown") if old else "unknown"
            tag = str(key)[:16] + f"-{int(time.time())}"
            dest = self.root / ".superseded" / self.final.name / tag
            n = 1
            while dest.exists():        # superseded twice within a second (a corpus built anew)
                n += 1
                dest = dest.with_name(f"{tag}.{n}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(self.final, dest)
            moved = dest
        os.rename(self.tmp, self.final)
        return moved

    def discard(self) -> None:
        for f in self._files.values():
            f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# A case or vote row is a JSON object as the build wrote it (docs/dump-format.md): read by the
# scorers by key, passed through to the lanes and the runner unchanged.


def load_cases(folder: Path) -> list[dict[str, object]]:
    p = folder / "cases.jsonl"
    if not p.is_file():
        raise NevError(f"{p} does not exist; build it with `nev oracle build {folder.name}`")
    return _objects(p, "corpus cases file")


def load_votes(folder: Path) -> list[dict[str, object]]:
    return _objects(folder / "votes.jsonl", "corpus votes file")


def _objects(p: Path, what: str) -> list[dict[str, object]]:
    """Every line of a corpus's JSON Lines file, each an object; ConfigError naming the line otherwise."""
    out = []
    for n, obj in jsonfile.load_lines(p, what, "rebuild the corpus"):
        if not isinstance(obj, dict):
            raise ConfigError(f"{p}: line {n} is not an object; rebuild the corpus")
        out.append(obj)
    return out
