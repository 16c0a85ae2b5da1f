"""rustc's JSON diagnostics on a candidate batch, read once (pure): which candidate an error
belongs to, its first error as a model should see it, and the lexer pre-check that finds what
would stop rustc before any name is resolved.

Every reader of rustc's `--error-format=json` output in the bridge goes through `errors`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence

from crates_bridge import rustlex

_CAND_FILE = re.compile(r"generated/(c\d{3,})\.rs$")
#: the probe's main file: `src/main.rs`, or a part's `src/main_r<round>_<k>.rs` in a search
_MAIN_FILE = re.compile(r"src/main(?:_r\d+_\d+)?\.rs$")
_MAIN_IN_TEXT = re.compile(r"src/main(?:_r\d+_\d+)?\.rs")
_LEXER_ERROR = re.compile(r"delimiter|unterminated|unknown start of token")


def errors(lines: Iterable[str]) -> Iterator[dict]:
    """The error diagnostics among rustc's JSON lines, in order (other lines, warnings, notes and
    the closing `aborting due to ...` are skipped)."""
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            diag = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if not isinstance(diag, dict) or diag.get("$message_type", "diagnostic") != "diagnostic":
            continue
        if is_error(diag):
            yield diag


def _span_files(span: dict) -> list[tuple[str, int]]:
    """A span and the call sites it was expanded from, innermost first."""
    out = []
    s: dict | None = span
    while s:
        out.append((s.get("file_name", ""), int(s.get("line_start", 0))))
        exp = s.get("expansion")
        s = exp.get("span") if exp else None
    return out


def attribute(diag: dict, main_lines: dict[int, int]) -> int | None:
    """The candidate a rustc JSON diagnostic belongs to, or None.

    `main_lines` maps lines of the probe's main.rs to candidate indices.
    """
    spans = diag.get("spans") or []
    ordered = [s for s in spans if s.get("is_primary")] + [s for s in spans if not s.get("is_primary")]
    for span in ordered:
        for fname, line in _span_files(span):
            m = _CAND_FILE.search(fname.replace("\\", "/"))
            if m:
                return int(m.group(1)[1:])
            if _MAIN_FILE.search(fname.replace("\\", "/")) and line in main_lines:
                return main_lines[line]
    for child in diag.get("children") or []:
        got = attribute(child, main_lines)
        if got is not None:
            return got
    return None


def is_error(diag: dict) -> bool:
    if diag.get("level") not in ("error", "error: internal compiler error"):
        return False
    msg = diag.get("message", "")
    return not (msg.startswith("aborting due to") and not diag.get("spans"))


def tidy_error(rendered: str, function: str) -> str:
    """A rendered error as a model should see it: the candidate's file named `<function>.rs`."""
    text = re.sub(r"(?:[\w./-]*/)?generated/c\d{3,}\.rs", f"{function}.rs", rendered)
    return text.strip()


def split_errors(stderr_lines: Sequence[str], main_lines: dict[int, int],
                 function: str) -> tuple[dict[int, str], list[str]]:
    """First error per candidate, and the errors no candidate owns."""
    firsts: dict[int, str] = {}
    orphans: list[str] = []
    for diag in errors(stderr_lines):
        who = attribute(diag, main_lines)
        text = tidy_error(diag.get("rendered") or diag.get("message", ""), function)
        if _MAIN_IN_TEXT.search(text):
            text = (f"the probe cannot call `{function}` from this candidate (check the function's name "
                    f"and signature):\n{text}")
        if who is None:
            orphans.append(text)
        else:
            firsts.setdefault(who, text)
    return firsts, orphans


# ---- the lexer pre-check (pure) ----
#
# rustc stops the whole crate at the first file whose token trees do not close
# (an unclosed delimiter, an unterminated string or comment): one round per
# such candidate. So those are found first, by a cheap scan here, and each
# suspect is confirmed (and its error text taken) by rustc alone.

_PAIRS = {")": "(", "]": "[", "}": "{"}


def lex_suspect(text: str) -> str | None:
    """Why rustc would stop lexing this source (delimiters, strings, comments), or None."""
    stack: list[str] = []
    for t in rustlex.scan(text):
        if t.error:
            return t.error
        if t.kind is not rustlex.Kind.CODE:
            continue
        for c in text[t.start:t.end]:
            if c in "([{":
                stack.append(c)
            elif c in ")]}":
                if not stack or stack[-1] != _PAIRS[c]:
                    return "unexpected or mismatched closing delimiter"
                stack.pop()
    return "unclosed delimiter" if stack else None




def first_error(stderr_lines: Sequence[str], function: str, file_name: str) -> str | None:
    """A one-crate candidate's first error, its file (`src/generated/<file_name>`) named
    `<function>.rs`."""
    for diag in errors(stderr_lines):
        text = diag.get("rendered") or diag.get("message", "")
        return re.sub(rf"(?:[\w./-]*/)?src/generated/{re.escape(file_name)}", f"{function}.rs", text).strip()
    return None


def first_lexer_error(stderr_lines: Sequence[str], function: str) -> str | None:
    """rustc's first error on a candidate alone, when it is a lexer error (None otherwise)."""
    for diag in errors(stderr_lines):
        if _LEXER_ERROR.search(diag.get("message", "")):
            return tidy_error(diag.get("rendered") or diag["message"], function)
        return None
    return None
