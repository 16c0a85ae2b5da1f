"""Provenance: the inputs a kept function's record names (format 2), and the records read back as
an index: every function and its inputs (`list`, `bom`), and which of them an input change in the
current tree invalidates (`stale`), with the action each reason asks for.

| input | recorded as | recomputed from | means |
|---|---|---|---|
| the spec section's text | `spec.text_sha256` | the tree's spec file | regenerate |
| the definitions the prompt showed | `definitions` (`Len::resolve`) | css.rs | regenerate |
| the corpus (engine versions) | `corpus.key`, `corpus.engines` | the corpus manifest | redump |

A record without one of these (format 1, the example's placeholder) is "incomplete provenance":
never fresh, never an error. Decisions here are pure; `bench.provenance_tree` reads the files.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import prompt
from bench.oracle import store
from crates_bridge.corpus import Manifest
from crates_bridge.registry import (
    Floor,
)
from lanes.base.gitrun import Repo

FORMAT = 2
CSS_RS = "crates/layout/src/css.rs"
#: what a complete record holds (dotted paths); a record missing any is incomplete
REQUIRED = (
    "spec.text_sha256",
    "spec.file",
    "definitions",
    "prompt.prefix_sha256",
    "models",
    "seeds",
    "corpus.key",
    "corpus.engines",
)
REGENERATE, REDUMP, INCOMPLETE = "regenerate", "redump", "incomplete"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---- what a batch records ----


def spec_digest(spec: prompt.Spec) -> str:
    """The hash of the section's text as the prompt carries it: the text and its steps."""
    return sha256(spec.text + "\n## Steps\n" + "\n".join(spec.steps))


@dataclass(frozen=True)
class SpecBlock:
    """`spec`: where the section's text came from and its hash (the record's and the run
    manifest's)."""

    commit: str | None
    document: str
    section: str
    title: str
    source: str
    file: str
    text_sha256: str

    def to_json(self) -> dict[str, object]:
        return {"commit": self.commit, "document": self.document, "section": self.section,
                "title": self.title, "source": self.source, "file": self.file,
                "text_sha256": self.text_sha256}


def spec_block(spec: prompt.Spec, path: Path, root: Path) -> SpecBlock:
    """Where the section's text came from: the file (relative to the repository), the last commit
    that changed it (null outside git or for nev's own copy), and the text's hash."""
    commit = None
    try:
        where = str(path.resolve().relative_to(root.resolve()))
        cp = Repo(root).git("log", "-1", "--format=%H", "--", where, check=False)
        commit = cp.stdout.strip() or None if cp.returncode == 0 else None
    except ValueError:
        where = f"nev:bench/specs/{path.name}"  # nev's own copy, outside the repository
    return SpecBlock(commit, spec.document, spec.section, spec.title, spec.source, where,
                     spec_digest(spec))


def methods(impl: str) -> dict[str, str]:
    """The methods of an impl block, each with its doc comments: name -> text."""
    out: dict[str, str] = {}
    depth, name = 0, None
    cur: list[str] = []
    doc: list[str] = []
    for line in impl.splitlines():
        s = line.strip()
        if name is None and depth == 1:
            m = re.match(r"(?:pub\s+)?fn\s+(\w+)", s)
            if m:
                name, cur = m.group(1), [*doc, line]
            elif s.startswith(("///", "#[")):
                doc.append(line)
            else:
                doc = []
        elif name is not None:
            cur.append(line)
        depth += line.count("{") - line.count("}")
        if name is not None and depth == 1:
            out[name], name, doc = "\n".join(cur), None, []
    return out


def definitions(css_source: str, signature: str) -> dict[str, str]:
    """The hashes of the engine definitions a prompt for `signature` shows: each type, and each
    method of its impl (body and all: the function calls it), named `Len`, `Len::resolve`."""
    out: dict[str, str] = {}
    for name in prompt.interface_names(signature):
        found = prompt.items(css_source, name)
        if found is None:
            continue
        out[name] = sha256(found[0])
        for m, text in methods(found[1]).items():
            out[f"{name}::{m}"] = sha256(text)
    return out


def corpus_key(man: Manifest) -> str:
    """The corpus's key: the one its manifest carries (the oracle's), else computed the same way."""
    key = man.raw.get("key")
    if isinstance(key, str) and key:
        return key
    return store.corpus_key(
        man.function,
        man.raw.get("generator") or {},
        man.engines,
        man.tolerance_px,
        man.raw.get("seeds") or {},
    )


@dataclass(frozen=True)
class CorpusBlock:
    """`corpus`: the corpus a run scored against, its key and the browsers' versions."""

    name: str
    key: str
    engines: dict[str, str]
    content_sha256: str | None
    cases: int | None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "key": self.key, "engines": dict(self.engines),
                "content_sha256": self.content_sha256, "cases": self.cases}


def corpus_block(name: str, man: Manifest) -> CorpusBlock:
    sha = man.raw.get("content_sha256")
    return CorpusBlock(name, corpus_key(man), dict(man.engines),
                       sha if isinstance(sha, str) else None, man.cases)


def serving(alias: str, reported: Iterable[tuple[str | None, str | None]]) -> dict[str, object]:
    """What the gateway and pool reported of an alias's serving revision over its calls: the model
    ids and system fingerprints seen (null: none reported). Neither the gateway nor the stand-in
    pool reports a recipe or an image digest: null, never guessed."""
    pairs = list(reported)
    ids = sorted({m for m, _ in pairs if m})    # the record's `models[]` entry, dumped
    prints = sorted({f for _, f in pairs if f})
    return {
        "alias": alias,
        "model_ids": ids or None,
        "system_fingerprints": prints or None,
        "recipe": None,
        "image_digest": None,
    }


# ---- reading the records ----


def at(doc: object, path: str) -> object:
    """The value at a dotted path of a JSON document; None when a part is not there."""
    v = doc
    for part in path.split("."):
        v = v.get(part) if isinstance(v, Mapping) else None
    return v


def missing(record: Mapping[str, object]) -> list[str]:
    """The REQUIRED fields a record lacks (null counts as lacking)."""
    out = []
    for path in REQUIRED:
        v = at(record, path)
        if v is None or (path == "definitions" and not isinstance(v, Mapping)):
            out.append(path)
    return out


def _text(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _texts(v: object) -> dict[str, str] | None:
    if not isinstance(v, Mapping):
        return None
    return {str(k): x for k, x in v.items() if isinstance(x, str)}


@dataclass(frozen=True)
class Record:
    """A kept function's provenance record (`<function>.provenance.json`, written by
    `bench.keep`, checked by `crates_bridge.registry.parse_provenance`) as the index decides on it:
    the fields the decisions read, each None when the record holds none of that type. `doc` is
    the record as committed (a JSON object), passed through unchanged to `nev provenance bom`."""

    doc: dict[str, object]
    missing: tuple[str, ...]
    signature: str | None
    spec_section: str | None
    spec_file: str | None
    spec_commit: str | None
    spec_text_sha256: str | None
    definitions: dict[str, str] | None      # name -> sha256 of its text
    corpus_name: str | None
    corpus_key: str | None
    corpus_engines: dict[str, str] | None   # browser -> version
    verification_corpus: str | None
    batch_id: str | None
    batch_date: str | None
    batch_aliases: tuple[str, ...] | None   # the aliases of `batch.models`

    @classmethod
    def of(cls, doc: dict[str, object]) -> Record:
        models = at(doc, "batch.models")
        named = ([m.get("alias") for m in models if isinstance(m, Mapping)]
                 if isinstance(models, list) else [])
        aliases = [a for a in named if isinstance(a, str)]
        return cls(doc=doc, missing=tuple(missing(doc)), signature=_text(at(doc, "signature")),
                   spec_section=_text(at(doc, "spec.section")),
                   spec_file=_text(at(doc, "spec.file")),
                   spec_commit=_text(at(doc, "spec.commit")),
                   spec_text_sha256=_text(at(doc, "spec.text_sha256")),
                   definitions=_texts(at(doc, "definitions")),
                   corpus_name=_text(at(doc, "corpus.name")),
                   corpus_key=_text(at(doc, "corpus.key")),
                   corpus_engines=_texts(at(doc, "corpus.engines")),
                   verification_corpus=_text(at(doc, "verification.corpus")),
                   batch_id=_text(at(doc, "batch.id")), batch_date=_text(at(doc, "batch.date")),
                   batch_aliases=tuple(aliases) if aliases else None)


@dataclass(frozen=True)
class Entry:
    function: str
    record: Record
    floor: Floor | None
    source_sha256: str | None = None

    @property
    def missing(self) -> list[str]:
        return list(self.record.missing)

    def get(self, path: str) -> object:
        """A field of the record as committed (for what is shown, passed through)."""
        return at(self.record.doc, path)


@dataclass(frozen=True)
class Current:
    """The inputs as the tree holds them now, per function (None: not in the tree)."""

    specs: dict[str, str | None] = field(default_factory=dict)  # function -> text sha256
    css_source: str | None = None
    corpora: dict[str, Manifest | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Reason:
    kind: str  # spec | definition | corpus
    input: str
    was: str | None
    now: str | None
    text: str

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "input": self.input,
            "was": self.was,
            "now": self.now,
            "text": self.text,
        }


@dataclass(frozen=True)
class Finding:
    function: str
    action: str  # regenerate | redump | incomplete
    reasons: tuple[Reason, ...]
    section: str | None = None

    def key(self) -> str:
        """The input change's identity: the same change gives the same key (never twice)."""
        return sha256(
            self.function + "|" + "|".join(f"{r.kind}:{r.input}:{r.now}" for r in self.reasons)
        )

    def to_json(self) -> dict[str, object]:
        return {
            "function": self.function,
            "action": self.action,
            "section": self.section,
            "reasons": [r.to_json() for r in self.reasons],
            "change": self.key(),
        }


def _short(h: str | None) -> str:
    return f"{h[:8]}…" if h else "nothing"


def _engines_change(was: Mapping[str, str], now: Mapping[str, str]) -> str:
    parts = [
        f"{n} {was.get(n, 'none')} → {now.get(n, 'none')}"
        for n in sorted({*was, *now})
        if was.get(n) != now.get(n)
    ]
    return ", ".join(parts)


def reasons_of(e: Entry, cur: Current) -> list[Reason]:
    """Why a complete record's function is out of date in the current tree (pure)."""
    out: list[Reason] = []
    r = e.record
    section = r.spec_section
    was = r.spec_text_sha256
    now = cur.specs.get(e.function)
    if now != was:
        text = (
            f"spec section {section} changed since {_short(r.spec_commit or was)}"
            if now
            else f"spec file {r.spec_file} is gone"
        )
        out.append(Reason("spec", f"{r.spec_file}#{section}", was, now, text))
    recorded = r.definitions or {}
    sig = r.signature
    if cur.css_source is not None and sig is not None:
        have = definitions(cur.css_source, sig)
        for name in sorted(recorded):
            if have.get(name) != recorded[name]:
                verb = "changed" if name in have else "was removed"
                out.append(
                    Reason(
                        "definition",
                        name,
                        recorded[name],
                        have.get(name),
                        f"definition `{name}` {verb}",
                    )
                )
    man = cur.corpora.get(e.function)
    if man is not None:
        key_now, key_was = corpus_key(man), r.corpus_key
        if key_now != key_was:
            change = _engines_change(r.corpus_engines or {}, man.engines)
            out.append(
                Reason(
                    "corpus",
                    str(r.corpus_name or e.function),
                    key_was,
                    key_now,
                    f"corpus key changed: {change or f'{_short(key_was)} → {_short(key_now)}'}",
                )
            )
    return out


def stale(entries: Sequence[Entry], cur: Current) -> list[Finding]:
    """Every function an input change invalidates, and why; an incomplete record is listed as
    such (never fresh). A spec or definition change: regenerate; a corpus change alone: redump."""
    out = []
    for e in entries:
        section = e.record.spec_section
        if e.missing:
            why = Reason(
                "provenance",
                "record",
                None,
                None,
                f"incomplete provenance: {', '.join(e.missing)} missing",
            )
            out.append(Finding(e.function, INCOMPLETE, (why,), section))
            continue
        rs = reasons_of(e, cur)
        if rs:
            action = REGENERATE if any(r.kind != "corpus" for r in rs) else REDUMP
            out.append(Finding(e.function, action, tuple(rs), section))
    return out


def age_s(e: Entry, now: dt.datetime) -> float | None:
    date = e.record.batch_date
    if date is None:
        return None
    try:
        then = dt.datetime.fromisoformat(date)
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=dt.UTC)
    return round((now - then).total_seconds(), 1)


@dataclass(frozen=True)
class ListRow:
    """`nev provenance list`'s row."""

    function: str
    section: str | None
    models: tuple[str, ...] | None
    batch: str | None
    corpus_key: str | None
    floor: Floor | None
    age_s: float | None
    provenance: str   # complete | incomplete

    def to_json(self) -> dict[str, object]:
        return {"function": self.function, "section": self.section,
                "models": None if self.models is None else list(self.models), "batch": self.batch,
                "corpus_key": self.corpus_key,
                "floor": self.floor.to_json() if self.floor else None,
                "age_s": self.age_s, "provenance": self.provenance}


def list_row(e: Entry, now: dt.datetime) -> ListRow:
    r = e.record
    return ListRow(e.function, r.spec_section, r.batch_aliases, r.batch_id, r.corpus_key, e.floor,
                   age_s(e, now), "incomplete" if e.missing else "complete")


def bom_row(e: Entry) -> dict[str, object]:
    """One function's bill of materials: every field present, null when unknown (a JSON document,
    dumped; the record's values passed through as committed)."""
    g = e.get
    defs = g("definitions")
    models = g("models")
    prompt_rounds = g("prompt.rounds")
    return {
        "function": e.function,
        "signature": g("signature"),
        "source_sha256": e.source_sha256,
        "provenance": "incomplete" if e.missing else "complete",
        "missing": e.missing,
        "spec": {
            k: g(f"spec.{k}")
            for k in ("document", "section", "title", "source", "file", "commit", "text_sha256")
        },
        "definitions": (
            [{"name": n, "sha256": defs[n]} for n in sorted(map(str, defs))]
            if isinstance(defs, Mapping)
            else None
        ),
        "prompt": {
            "prefix_sha256": g("prompt.prefix_sha256"),
            "rounds": list(prompt_rounds) if isinstance(prompt_rounds, list) else None,
        },
        "models": (
            [
                {
                    k: m.get(k)
                    for k in ("alias", "model_ids", "system_fingerprints", "recipe", "image_digest")
                }
                for m in models
                if isinstance(m, Mapping)
            ]
            if isinstance(models, list)
            else None
        ),
        "seeds": {"base": g("seeds.base"), "calls": g("seeds.calls")},
        "batch": {"id": g("batch.id"), "date": g("batch.date")},
        "corpus": {
            k: g(f"corpus.{k}") for k in ("name", "key", "engines", "content_sha256", "cases")
        },
        "verification": {
            "cases_passed": g("verification.cases_passed"),
            "cases_run": g("verification.cases_run"),
        },
        "floor": e.floor.to_json() if e.floor else None,
    }


def spec_path(function: str, root: Path, specs_dir: Path) -> Path:
    """The spec file of `function`: the repository's (`specs_dir`) when it holds one, else nev's."""
    own = specs_dir / f"{function}.md"
    return own if own.is_file() else prompt.SPECS_DIR / f"{function}.md"
