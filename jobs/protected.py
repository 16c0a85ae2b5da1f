"""Pure decisions of a landing: which paths are protected, what a diff changes, whether a
track stays inside its spec's `touches`, and whether a spec's `touches` is acceptable.

Everything here is a function over plain strings; nothing runs git. Protected-path
decisions are case-insensitive and rename-aware: a rename or copy is judged by both of its
paths, so a file moved out of (or into) a protected place is refused like an edit.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from lanes.base.gitrun import Repo

# The built-in protected set: these change the gate itself (seed: "Protected files").
TOP_DIRS = ("bench", ".github", "specs")
TOP_FILES = ("tracks.json",)
ANY_DEPTH_DIRS = (".cargo",)
ANY_DEPTH_NAMES = (".gitattributes", ".gitmodules")
ANY_DEPTH_PREFIXES = ("rust-toolchain", ".env")
ANY_DEPTH_SUFFIXES = (".floor.json",)

# The track's working note; main's roster always wins over the branch's copy.
HANDOFF = "handoff.md"


@dataclass(frozen=True)
class Change:
    """One entry of `git diff --name-status -M`: status letter, path, and the source of a rename/copy."""

    status: str
    path: str
    old_path: str | None = None

    def paths(self) -> tuple[str, ...]:
        return (self.path,) if self.old_path is None else (self.old_path, self.path)

    def describe(self) -> str:
        if self.old_path is None:
            return self.path
        verb = "renamed" if self.status.startswith("R") else "copied"
        return f"{self.old_path} ({verb} to {self.path})"


def changes(repo: Repo, a: str, b: str) -> list[Change]:
    """What changed from `a` to `b` in `repo`."""
    return parse_name_status(repo.name_status(a, b))


def parse_name_status(raw: str) -> list[Change]:
    """Parse `git diff --name-status -z -M` output into changes."""
    parts = raw.split("\0")
    out: list[Change] = []
    i = 0
    while i < len(parts):
        status = parts[i]
        if not status:
            i += 1
            continue
        if status[0] in "RC":
            out.append(Change(status, parts[i + 2], parts[i + 1]))
            i += 3
        else:
            out.append(Change(status, parts[i + 1]))
            i += 2
    return out


def glob_regex(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """A repository-root-anchored glob: `*` and `?` stay inside one directory, `**` crosses
    directories (`**/` may match none), `[...]` is a class; a pattern also covers everything
    under a directory it matches, and a trailing `/` matches only a directory's contents."""
    return _glob_regex(pattern, ignore_case)


@lru_cache(maxsize=1024)
def _glob_regex(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    p = pattern.strip()
    while p.startswith("./"):
        p = p[2:]
    p = p.lstrip("/")
    if p in ("", "."):
        return re.compile(".*")  # the repository root: everything
    dir_only = p.endswith("/")
    p = p.rstrip("/")
    out: list[str] = []
    i = 0
    while i < len(p):
        if p.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif p.startswith("**", i):
            out.append(".*")
            i += 2
        elif p[i] == "*":
            out.append("[^/]*")
            i += 1
        elif p[i] == "?":
            out.append("[^/]")
            i += 1
        elif p[i] == "[" and p.find("]", i + 2) != -1:
            j = p.find("]", i + 2)
            body = p[i + 1:j]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        else:
            out.append(re.escape(p[i]))
            i += 1
    tail = "/.+" if dir_only else "(?:/.+)?"
    return re.compile("^" + "".join(out) + tail + "$", re.IGNORECASE if ignore_case else 0)


def glob_matches(pattern: str, path: str, ignore_case: bool = False) -> bool:
    return glob_regex(pattern, ignore_case).match(path) is not None


def protected_rule(path: str, extra: Sequence[str] = ()) -> str | None:
    """The protected rule `path` falls under (case-insensitive), or None."""
    p = path.casefold().strip("/")
    parts = p.split("/")
    name = parts[-1]
    for d in TOP_DIRS:
        if parts[0] == d:
            return f"{d}/"
    for f in TOP_FILES:
        if p == f:
            return f
    for d in ANY_DEPTH_DIRS:
        if d in parts:
            return f"{d}/ (at any depth)"
    for n in ANY_DEPTH_NAMES:
        if name == n:
            return f"{n} (at any depth)"
    for pre in ANY_DEPTH_PREFIXES:
        if name.startswith(pre):
            return f"{pre}* (at any depth)"
    for suf in ANY_DEPTH_SUFFIXES:
        if name.endswith(suf):
            return f"*{suf} (at any depth)"
    for pat in extra:
        if pat.strip() and glob_matches(pat, p, ignore_case=True):
            return f"{pat} (named by tracks.json: protected, or a gate command's file)"
    return None


@dataclass(frozen=True)
class Violation:
    change: Change
    path: str
    reason: str

    def line(self) -> str:
        return f"{self.change.describe()}: {self.reason}"


def protected_violations(changes: Iterable[Change], extra: Sequence[str] = ()) -> list[Violation]:
    """Every change that touches a protected path on either side of a rename or copy."""
    out = []
    for c in changes:
        for p in c.paths():
            rule = protected_rule(p, extra)
            if rule is not None:
                out.append(Violation(c, p, f"protected ({rule})"))
                break
    return out


def scope_violations(changes: Iterable[Change], touches: Sequence[str]) -> list[Violation]:
    """Every change with a path (either side of a rename) outside the spec's touches.
    Case-sensitive: a track may only change the paths its spec names, as spelled."""
    out = []
    for c in changes:
        for p in c.paths():
            if p == HANDOFF:
                continue
            if not any(glob_matches(t, p) for t in touches if t.strip()):
                out.append(Violation(c, p, "outside the spec's touches"))
                break
    return out


# Probes for judging a `touches` entry (see touches_problems).
_EVERYTHING = ("a", "a/b", "src/main.rs", ".x", "z/y/x.txt", "README.md", "Cargo.toml")
_TOP_PROBES = ("bench/x", "bench/a/b.sh", "tracks.json", ".github/workflows/ci.yml", "specs/s.md",
               ".cargo/config.toml", "rust-toolchain", "rust-toolchain.toml", ".env", ".env.local",
               ".gitattributes", ".gitmodules", "f.floor.json")
_DEPTH_NAMES = (".cargo/config.toml", "rust-toolchain", "rust-toolchain.toml", ".env", ".env.local",
                ".gitattributes", ".gitmodules", "f.floor.json")
_NEUTRAL_NAMES = ("a", "a.rs", "a.md", "a.json", "a.toml", "a.txt", "a.py", "a.local",
                  "a/b", "a/b.rs", "a/b.json", "a/b.toml")


def _literal_probe(pattern: str) -> str:
    p = pattern.strip().lstrip("/").casefold()
    p = re.sub(r"\*\*/?", "", p)
    p = re.sub(r"[*?]", "a", p)
    p = re.sub(r"\[[^]]*\]", "a", p)
    if not p or p.endswith("/"):
        p += "x"
    return p


def _literal_dir(pattern: str) -> str:
    p = pattern.strip().lstrip("/").casefold()
    m = re.search(r"[*?\[]", p)
    head = p if m is None else p[:m.start()]
    return head[: head.rfind("/") + 1] if "/" in head else ""


def touches_problems(touches: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """Why a spec's touches list is unacceptable (empty list: acceptable).

    Refused: an empty list; an entry that matches every path; an entry that reaches a
    protected path: it matches a protected file at the top level, its literal directory is
    protected, or it is written to pick protected names at depth (it matches one, such as
    `x.floor.json` or `.env`, but no ordinary file in the same place). A broad directory
    glob such as `crates/**` is accepted: the diff check still refuses any protected file
    it would let through."""
    entries = [t for t in touches if t.strip()]
    if not entries:
        return ["touches is empty; list the globs the track may change"]
    problems = []
    top_probes = (*_TOP_PROBES, *(_literal_probe(x) for x in extra if x.strip()))
    for t in entries:
        if all(glob_matches(t, p, ignore_case=True) for p in _EVERYTHING):
            problems.append(f"touches entry {t!r} matches every path")
            continue
        hit = next((p for p in top_probes if glob_matches(t, p, ignore_case=True)), None)
        if hit is not None:
            problems.append(f"touches entry {t!r} reaches protected {protected_rule(hit, extra) or hit}")
            continue
        d = _literal_dir(t)
        if d and protected_rule(d + "x", extra) is not None:
            problems.append(f"touches entry {t!r} reaches protected {protected_rule(d + 'x', extra)}")
            continue
        targeted = [d + n for n in _DEPTH_NAMES] + [d + "a/" + n for n in _DEPTH_NAMES]
        hits = [p for p in targeted if glob_matches(t, p, ignore_case=True)]
        if hits and not any(glob_matches(t, d + n, ignore_case=True) for n in _NEUTRAL_NAMES):
            problems.append(f"touches entry {t!r} reaches protected {protected_rule(hits[0], extra)}")
    return problems


def gate_files(commands: Sequence[str], exists: Callable[[str], bool]) -> list[str]:
    """Files the gate commands themselves run, protected like the built-in set: every word of a
    command that names a file in the tree (`sh ci/verify.sh`, `./run-tests`), and the makefiles
    of a `make` command. A track that could edit these could weaken its own gate."""
    out: list[str] = []
    for cmd in commands:
        try:
            words = shlex.split(cmd)
        except ValueError:
            words = cmd.split()
        for i, w in enumerate(words):
            w = w.removeprefix("./")
            if w == "make" or w.endswith("/make"):
                out += [m for m in ("Makefile", "makefile", "GNUmakefile") if exists(m)]
                for j, arg in enumerate(words[i + 1:i + 3]):
                    if arg == "-f" and i + j + 2 < len(words):
                        out.append(words[i + j + 2].removeprefix("./"))
            elif w and not w.startswith("-") and "=" not in w and exists(w):
                out.append(w)
    return list(dict.fromkeys(out))


def install_reasons(changes: Iterable[Change]) -> list[str]:
    """Why the install step must run after a landing: oracle/package*.json changed or a crate
    was added (a new Cargo.toml below the top level)."""
    reasons = []
    for c in changes:
        for p in c.paths():
            if re.fullmatch(r"oracle/package[^/]*\.json", p):
                reasons.append(f"{p} changed")
        if c.status[0] in "ACR" and c.path.endswith("/Cargo.toml"):
            reasons.append(f"crate added ({c.path})")
    return list(dict.fromkeys(reasons))


def roster_without(text: str, name: str) -> str:
    """handoff.md with the track's roster line removed: a list item naming the track first,
    as `- name`, `- name: ...`, `- name — ...` or with the name in backticks."""
    pat = re.compile(r"^\s*[-*]\s+(?:\[[ x]\]\s+)?`?" + re.escape(name) + r"`?(?=$|[\s:,(—–-])")
    lines = text.splitlines(keepends=True)
    kept = [ln for ln in lines if not pat.match(ln)]
    return "".join(kept)
