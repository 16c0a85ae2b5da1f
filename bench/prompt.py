"""The prompt of a batch: spec text, engine interfaces, failing cases, and on escalation the best
failing versions with their exact per-box geometry differences.

Every call of one batch (and every batch of one function) starts with the same bytes — the
system message and the spec + interfaces block — so a server's prefix cache can hit; what
changes from round to round (failing cases, best versions) comes last.

A spec is a file per function, `bench/specs/<function>.md`: a header (`function`, `document`,
`section`, `title`, `source`), the spec text, and `## Steps` (numbered), which become the
comments of the kept function.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base.errors import ConfigError

SPECS_DIR = Path(__file__).resolve().parent / "specs"
#: failing cases a sampling prompt shows at most
MAX_CASES = 8
#: best failing versions an escalated prompt shows, and the differences shown per version
MAX_VERSIONS = 3
MAX_DIFFS = 6

SYSTEM = ("You write one Rust function of a browser layout engine from the specification text. "
          "Answer with exactly one ```rust code block holding the whole file: it starts with "
          "`use super::prelude::*;`, defines the public function with the given signature, uses only "
          "the types shown and the standard library, and follows the spec steps in order.")


@dataclass(frozen=True)
class Spec:
    function: str
    document: str
    section: str
    title: str
    source: str
    text: str
    steps: tuple[str, ...]

    @property
    def heading(self) -> str:
        return f"{self.document} §{self.section} {self.title}"


def parse_spec(path: Path, text: str) -> Spec:
    m = re.match(r"---\n(.*?)\n---\n(.*)", text, re.S)
    if not m:
        raise ConfigError(f"{path}: needs a header between --- lines (function, document, section, title, "
                          f"source); fix the file")
    head: dict[str, str] = {}
    for line in m.group(1).splitlines():
        k, sep, v = line.partition(":")
        if sep:
            head[k.strip()] = v.strip()
    missing = [k for k in ("function", "document", "section", "title", "source") if not head.get(k)]
    if missing:
        raise ConfigError(f"{path}: header field(s) {', '.join(missing)} missing; fix the file")
    body, _, steps_text = m.group(2).partition("\n## Steps\n")
    steps = tuple(re.sub(r"^\d+\.\s*", "", s).strip() for s in steps_text.splitlines() if re.match(r"^\d+\.", s))
    if not steps:
        raise ConfigError(f"{path}: needs a `## Steps` list (1. 2. ...); the kept function carries them as comments")
    return Spec(head["function"], head["document"], head["section"], head["title"], head["source"],
                body.strip(), steps)


def load_spec(function: str, specs_dir: Path = SPECS_DIR) -> Spec:
    path = specs_dir / f"{function}.md"
    if not path.is_file():
        raise ConfigError(f"no spec text for `{function}`: write {path} (header, text, ## Steps)")
    spec = parse_spec(path, path.read_text(encoding="utf-8"))
    if spec.function != function:
        raise ConfigError(f"{path}: header says function {spec.function!r}; it must be {function!r}")
    return spec


# ---- engine interfaces ----

def _item(src: str, start: int) -> str:
    """The Rust item starting at `start` (doc comments above it included), up to its closing brace."""
    depth, i = 0, src.index("{", start)
    while i < len(src):
        if src[i] == "{":
            depth += 1
        elif src[i] == "}":
            depth -= 1
            if depth == 0:
                break
        i += 1
    head = start
    while True:
        prev = src.rfind("\n", 0, head - 1)
        line = src[prev + 1:head].strip()
        if line.startswith(("///", "#[")):
            head = prev + 1
        else:
            break
    return src[head:i + 1]


def _signatures_only(impl: str) -> str:
    """An impl block with each method body replaced by `{ ... }`."""
    out, depth = [], 0
    for line in impl.splitlines():
        s = line.strip()
        if depth == 1 and (s.startswith("pub fn") or s.startswith("fn")):
            out.append(line.split("{")[0].rstrip() + " { ... }")
            depth += line.count("{") - line.count("}")
            continue
        if depth <= 1:
            out.append(line)
        depth += line.count("{") - line.count("}")
    return "\n".join(out)


def interface_names(signature: str) -> list[str]:
    """The engine types a prompt shows for `signature`: `Len`, then the signature's types."""
    names = ["Len"] + [t for t in re.findall(r"\b([A-Z][A-Za-z0-9]+)\b", signature) if t != "Len"]
    return list(dict.fromkeys(names))


def items(css_source: str, name: str) -> tuple[str, str] | None:
    """The type `name`'s definition and its `impl` block ("" when none); None: no such type."""
    m = re.search(rf"^pub (?:struct|enum) {name}\b", css_source, re.M)
    if not m:
        return None
    im = re.search(rf"^impl {name} \{{", css_source, re.M)
    return _item(css_source, m.start()), _item(css_source, im.start()) if im else ""


def interfaces(css_source: str, signature: str) -> str:
    """The engine types the signature names (structs), plus `Len` and its methods' signatures."""
    parts = []
    for name in interface_names(signature):
        found = items(css_source, name)
        if found is None:
            continue
        parts.append(found[0])
        if found[1]:
            parts.append(_signatures_only(found[1]))
    return "\n\n".join(parts)


# ---- failing cases and geometry differences ----

def px(v: float | None) -> str:
    if v is None:
        return "none"
    return f"{v:.4f}".rstrip("0").rstrip(".") if v != int(v) else str(int(v))


def diff_line(case_id: str, diff: dict[str, tuple[float | None, float | None]]) -> str:
    """One box's exact geometry differences: `<case> width: expected 120 got 100; margin_left: ...`."""
    return case_id + " " + "; ".join(f"{k}: expected {px(e)} got {px(g)}" for k, (e, g) in sorted(diff.items()))


@dataclass(frozen=True)
class FailingCase:
    id: str
    input: dict
    expected: dict
    #: field -> (expected, got) of the best candidate that failed it
    diff: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    failed_by: int = 0


@dataclass(frozen=True)
class FailingVersion:
    source: str
    cases_passed: int
    cases_run: int
    diffs: tuple[tuple[str, dict[str, tuple[float | None, float | None]]], ...]


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]
    #: length in characters of the part shared by every call of the function's batches
    prefix_chars: int

    @property
    def text(self) -> str:
        return "\n".join(m["content"] for m in self.messages)


def prefix(spec: Spec, signature: str, iface: str) -> str:
    steps = "\n".join(f"{i}. {s}" for i, s in enumerate(spec.steps, 1))
    return (f"# Task: `{spec.function}`\n\n"
            f"Specification: {spec.heading} ({spec.source})\n\n{spec.text}\n\nSteps:\n{steps}\n\n"
            f"## Engine interfaces (from `use super::prelude::*;`)\n\n```rust\n{iface}\n```\n\n"
            f"## Signature\n\n```rust\n{signature}\n```\n")


def build(spec: Spec, signature: str, iface: str, failing: Sequence[FailingCase] = (),
          versions: Sequence[FailingVersion] = (), cases_run: int | None = None) -> Prompt:
    """The messages of one call. `versions` (escalation) adds the best failing versions."""
    shared = prefix(spec, signature, iface)
    tail = []
    if failing:
        tail.append(f"## Currently failing cases ({len(failing)} shown"
                    + (f" of a corpus of {cases_run}" if cases_run else "") + ")\n")
        for c in failing[:MAX_CASES]:
            line = f"- {c.id} input {json.dumps(c.input, sort_keys=True)} expected {json.dumps(c.expected, sort_keys=True)}"
            if c.diff:
                line += f" (best try: {diff_line(c.id, c.diff)})"
            tail.append(line)
    elif cases_run:
        tail.append(f"## Cases\n\nThe function is checked against {cases_run} cases answered by three browsers.")
    if versions:
        tail.append("\n## Escalation: every version so far failed. The best failing versions and their exact "
                    "per-box geometry differences (expected = the browsers, got = the version):\n")
        for k, v in enumerate(versions[:MAX_VERSIONS], 1):
            tail.append(f"### Version {k}: passes {v.cases_passed}/{v.cases_run}\n\n```rust\n{v.source.strip()}\n```\n")
            tail.extend(f"- {diff_line(cid, d)}" for cid, d in v.diffs[:MAX_DIFFS])
            tail.append("")
        tail.append("Write a version that passes every case.")
    else:
        tail.append("\nWrite the function.")
    return Prompt([{"role": "system", "content": SYSTEM},
                   {"role": "user", "content": shared + "\n" + "\n".join(tail)}],
                  len(SYSTEM) + len(shared))
