"""Rust source as its lexer splits it: comments, string and char literals, and the code between (pure).

One scan serves the candidate pre-check (`diagnostics.lex_suspect`: what would stop rustc's
lexer) and the batch's dedupe (`bench.answers.normalise`: comments and whitespace do not count).
Nested block comments, raw strings (`r#"..."#`, `br"..."`, `cr"..."`), char and byte literals
(`'a'`, `'\\u{1F600}'`, `b'('`) are read as rustc reads them; a lifetime (`'a`) is code.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

_RAW = re.compile(r'(?:b|c)?r(#*)"')
_CHAR = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F]*\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'")


class Kind(Enum):
    CODE = "code"
    COMMENT = "comment"
    STRING = "string"   # string, byte string and raw string literals, quotes included
    CHAR = "char"       # char and byte literals


@dataclass(frozen=True)
class Token:
    """`text[start:end]` is one comment or literal, or a run of code. `error`: why rustc's lexer
    stops here (an unterminated comment or string, which runs to the end)."""

    kind: Kind
    start: int
    end: int
    error: str | None = None


def _literal_or_comment(text: str, i: int) -> Token | None:
    """The comment or literal that starts at `i`, if one does."""
    n = len(text)
    c = text[i]
    if text.startswith("//", i):
        j = text.find("\n", i)
        return Token(Kind.COMMENT, i, n if j < 0 else j)
    if text.startswith("/*", i):
        depth, j = 1, i + 2
        while j < n and depth:
            if text.startswith("/*", j):
                depth, j = depth + 1, j + 2
            elif text.startswith("*/", j):
                depth, j = depth - 1, j + 2
            else:
                j += 1
        return Token(Kind.COMMENT, i, j, "unterminated block comment" if depth else None)
    raw = _RAW.match(text, i) if c in "brc" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
    if raw:
        close = '"' + raw.group(1)
        j = text.find(close, raw.end())
        return Token(Kind.STRING, i, n, "unterminated raw string") if j < 0 else Token(Kind.STRING, i, j + len(close))
    if c == '"':
        j = i + 1
        while j < n and text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        return Token(Kind.STRING, i, n, "unterminated double quote string") if j >= n else Token(Kind.STRING, i, j + 1)
    if c == "'":
        m = _CHAR.match(text, i)
        return Token(Kind.CHAR, i, m.end()) if m else None
    return None


def scan(text: str) -> Iterator[Token]:
    """The tokens of `text` in order, covering it whole; the scan ends at the first error."""
    i = code = 0
    while i < len(text):
        t = _literal_or_comment(text, i)
        if t is None:
            i += 1
            continue
        if code < i:
            yield Token(Kind.CODE, code, i)
        yield t
        if t.error:
            return
        i = code = t.end
    if code < len(text):
        yield Token(Kind.CODE, code, len(text))
