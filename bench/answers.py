"""From a model's answer to a candidate: the code block that defines the function, and the hash
that dedupes candidates (comments and whitespace do not count) (pure)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from crates_bridge import rustlex

_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


def extract_code(answer: str, function: str) -> str | None:
    """The code block of an answer that defines `function` (a rust block first); None if none."""
    blocks = [(lang.lower(), body) for lang, body in _BLOCK.findall(answer)]
    if not blocks and re.search(rf"\bfn\s+{re.escape(function)}\b", answer):
        blocks = [("", answer)]
    defining = [(lang, b) for lang, b in blocks if re.search(rf"\bfn\s+{re.escape(function)}\b", b)]
    pick = [b for lang, b in defining if lang in ("rust", "rs")] or [b for _, b in defining]
    if not pick:
        return None
    code = pick[0].strip() + "\n"
    if "use super::prelude::*;" not in code:
        code = "use super::prelude::*;\n\n" + code
    return code


def normalise(code: str) -> str:
    """Code with comments and whitespace runs removed (literals kept): what dedupe compares."""
    out: list[str] = []
    literals: list[str] = []
    for t in rustlex.scan(code):
        piece = code[t.start:t.end]
        if t.kind is rustlex.Kind.CODE:
            out.append(piece)
        elif t.kind is rustlex.Kind.COMMENT:
            out.append(" ")
        else:
            literals.append(piece)
            out.append(f" \x00{len(literals) - 1}\x00 ")
    text = "".join(out)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r" ?([{}()\[\];,:<>=+\-*/&|!.]) ?", r"\1", text).strip()
    return re.sub(r" ?\x00(\d+)\x00 ?", lambda m: literals[int(m.group(1))], text)


def code_hash(code: str) -> str:
    return hashlib.sha256(normalise(code).encode()).hexdigest()[:16]


@dataclass
class Candidate:
    alias: str
    round: int
    source: str
    hash: str
    #: index into the run's unique candidates
    unique: int = -1
