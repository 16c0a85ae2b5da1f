"""Docs that are run: every `nev ...` line of the docs' shell blocks is checked against the real
command tree, so a renamed command or a flag that is gone fails here, not on a newcomer's first day.

Which lines: every fenced block of README.md and docs/**/*.md whose language is `sh`, `bash`,
`shell`, `console` or none (the transcripts and synopses); in those, every `nev` word that starts
a command (at the line's start after a `$ ` or `# ` prompt, or after whitespace, `(`, `;`, `&`,
`|`, a quote or a backtick), up to the end of that command (`;`, `&&`, `|`, `)`, `#`, a
redirection). The code spans of the prose (`nev lane list --json` in a sentence) are checked
the same way.
Checked: each subcommand of the path exists (the groups are the lazily built ones
of rig/commands.py, GROUPS), and every option is one that command has (click's own parser splits
the line; no value is converted, so a placeholder value such as `N` for an int is fine).

The rule for placeholders (documented in docs/index.md, "Writing the docs"): synopsis brackets
and ellipses are read through (`[--lane N]`, `[NAME...]`, `--pull DIR]...`), `a|b|c` with no
spaces is alternatives and each one is checked, and a line is skipped when the word where a
subcommand belongs is a placeholder: `...`, `<...>`, an upper-case word (`GROUP`, `COMMAND`) or
a `*` pattern.
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from rig.commands import cli

ROOT = Path(__file__).resolve().parent.parent
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
STOP = {";", "&&", "||", "|", "&", "(", ")", ">", ">>", "<", "2>", "2>&1", "|&"}
ALT = "\x00"
_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([A-Za-z0-9_+-]*)")
_NEV = re.compile(r"(?:^|(?<=[\s(;&|\"'`]))nev(?=\s|$)")


@dataclass(frozen=True)
class Mention:
    file: str
    line: int
    text: str


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def shell_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, command line) of every command line inside a fenced shell block of PATH. In a
    block that shows a `$ ` prompt, only the prompted lines are commands (the rest is output);
    a line ending in `\\` goes on on the next."""
    out: list[tuple[int, str]] = []
    for start, block in _blocks(path):
        prompted = any(line.lstrip().startswith("$ ") for line in block)
        joined: list[tuple[int, str]] = []
        for no, line in enumerate(block, start):
            if joined and joined[-1][1].endswith("\\"):
                joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + line.strip())
            else:
                joined.append((no, line))
        out += [(no, _unprompt(line)) for no, line in joined
                if not prompted or line.lstrip().startswith("$ ")]
    return out


def _blocks(path: Path) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each fenced block of a shell language in PATH."""
    blocks: list[tuple[int, list[str]]] = []
    fence: str | None = None
    lang = ""
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None:
            if m:
                fence, lang = m.group(2), m.group(3).lower()
                blocks.append((no + 1, []))
            continue
        if m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence) and not m.group(3):
            fence = None
            if lang not in SHELL_FENCES:
                blocks.pop()
            continue
        blocks[-1][1].append(line)
    return blocks


def mentions(root: Path = ROOT) -> list[Mention]:
    found = []
    for path in doc_files(root):
        for no, line in shell_lines(path):
            code = line[:_comment_start(line)]
            for m in _NEV.finditer(code):
                found.append(Mention(str(path.relative_to(root)), no, code[m.start():]))
    return found


def inline_mentions(root: Path = ROOT) -> list[Mention]:
    """Every `nev ...` code span in the prose (outside fenced blocks) of the docs, also one that a
    line break cuts in two."""
    found = []
    for path in doc_files(root):
        fence: str | None = None
        para: list[tuple[int, str]] = []
        lines = path.read_text(encoding="utf-8").splitlines()
        for no, line in enumerate([*lines, ""], 1):
            m = _FENCE.match(line)
            if m:
                fence = None if fence and m.group(2)[0] == fence[0] else (fence or m.group(2))
            if fence is None and not m and line.strip():
                para.append((no, line))
                continue
            if para:
                text = "\n".join(t for _, t in para)
                for span in re.finditer(r"`(nev\s[^`]+)`", text):
                    first = para[0][0] + text.count("\n", 0, span.start())
                    found.append(Mention(str(path.relative_to(root)), first,
                                         span.group(1).replace("\n", " ")))
                para = []
    return found


def _comment_start(line: str) -> int:
    """Where a shell comment starts in LINE (its length when there is none)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return len(line)


def _unprompt(line: str) -> str:
    s = line.strip()
    for prompt in ("$ ", "# "):
        if s.startswith(prompt):
            return s[len(prompt):]
    return s


def words(text: str) -> list[str]:
    """The words of one command, from its `nev` to where the shell would end it."""
    text = re.sub(r"(?<=[^\s|])\|(?=[^\s|])", ALT, text)
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    out: list[str] = []
    try:
        for tok in iter(lex.get_token, None):
            if tok in STOP or tok.strip("<>&|;") == "" or tok.startswith((">", "<")):
                break
            out.append(tok)
    except ValueError:          # an unclosed quote past the command's end: `"$(nev box env)"`
        pass
    return out


def _clean(tok: str) -> str:
    if tok.strip(".…") == "":
        return tok
    tok = tok.strip("[]{}")
    while tok.endswith("..."):
        tok = tok[:-3].rstrip("]")
    return tok


def expand(toks: list[str]) -> list[list[str]]:
    """Read through synopsis brackets and ellipses; `a|b` is alternatives, each its own line."""
    choices = [[c for c in (_clean(t) for t in tok.split(ALT)) if c] or [""] for tok in toks]
    lines = [[w for w in combo if w] for combo in itertools.islice(itertools.product(*choices), 64)]
    return lines


def _placeholder(word: str) -> bool:
    return (word in ("", "...", "…") or word.startswith("<") or "*" in word
            or (word.upper() == word and any(c.isalpha() for c in word)))


def check(args: list[str]) -> str | None:
    """None when `nev ARGS` names a command that exists with options it has; else what is wrong.
    ARGS are the words after `nev`."""
    cmd: click.Command = cli
    path = ["nev"]
    rest = list(args)
    while True:
        # click's parser alone: options and arguments split, no value converted or required
        parser = cmd.make_parser(click.Context(cmd, info_name=path[-1], **cmd.context_settings))
        try:
            _, rest, _ = parser.parse_args(rest)
        except click.NoSuchOption as e:
            return f"{' '.join(path)}: {e.format_message()}"
        except click.UsageError:        # a value left out in a sentence (`--lane` alone)
            return None
        if not isinstance(cmd, click.Group) or not rest:
            return None
        name, rest = rest[0], rest[1:]
        if _placeholder(name):
            return None
        sub = cmd.get_command(click.Context(cmd, info_name=path[-1]), name)
        if sub is None:
            return f"{' '.join(path)} has no command {name!r}"
        cmd, path = sub, [*path, name]


def problems(root: Path = ROOT) -> list[str]:
    out = []
    for m in [*mentions(root), *inline_mentions(root)]:
        for line in expand(words(m.text)[1:]):
            problem = check(line)
            if problem:
                out.append(f"{m.file}:{m.line}: {problem}  (in: {m.text.strip()})")
    return out


def test_every_nev_line_in_the_docs_names_a_real_command_with_real_options():
    found = mentions()
    assert len(found) > 150, "the docs' shell blocks should hold well over 150 nev lines"
    assert len(inline_mentions()) > 400
    assert problems() == []


def _doc_tree(tmp_path: Path, block: str, lang: str = "sh") -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# x\n")
    (tmp_path / "docs" / "page.md").write_text(f"# page\n\n```{lang}\n{block}\n```\n")
    return tmp_path


@pytest.mark.parametrize("block, wrong", [
    ("nev lane list --jsn", "--jsn"),
    ("$ nev rig services install --lane 0 --colector 1", "--colector"),
    ("eval \"$(nev box env --bogus)\"", "--bogus"),
    ("nev dagu upp", "'upp'"),
    ("nev rig forward up|dwn|status", "'dwn'"),
    ("nev job submit job.yaml [--lanes N]", "--lanes"),
])
def test_a_planted_wrong_flag_or_command_in_a_doc_fails(tmp_path, block, wrong):
    out = problems(_doc_tree(tmp_path, block))
    assert len(out) == 1 and wrong in out[0] and out[0].startswith("docs/page.md:4:"), out


@pytest.mark.parametrize("block", [
    "nev lane run [--lane N] [--pull DIR]... [--sandbox] WORKTREE CMD...",
    "$ nev lane run engine sh -c 'git status --short; exit 7'",
    "nev rig forward up|down|status [NAME...]",
    "nev GROUP --help",
    "nev ... [OPTIONS]",
    "NEV_LANE_SSH=lane@127.0.0.1:1 nev lane on engine pwd   # comment --notaflag",
    "printf x | nev rig status --json | jq .",
])
def test_right_lines_and_placeholders_pass(tmp_path, block):
    assert problems(_doc_tree(tmp_path, block)) == []


def test_a_wrong_flag_in_a_prose_code_span_fails_too(tmp_path):
    root = _doc_tree(tmp_path, "true")
    (root / "docs" / "prose.md").write_text("Run `nev lane sweep --dry-rn` first.\n")
    assert [p.split(":")[:2] for p in problems(root)] == [["docs/prose.md", "1"]]


def test_a_code_span_cut_by_a_line_break_is_read_whole(tmp_path):
    root = _doc_tree(tmp_path, "true")
    (root / "docs" / "prose.md").write_text("One line,\nthen `nev lane\nsweep --dry-rn` here.\n")
    assert [p.split(":")[:2] for p in problems(root)] == [["docs/prose.md", "2"]]


def test_other_languages_are_not_read(tmp_path):
    assert problems(_doc_tree(tmp_path, "nev lane list --jsn", lang="python")) == []
