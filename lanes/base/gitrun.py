"""The one place that runs git.

Every git call goes through `Repo.git()`, which logs the exact command (masked),
sets a predictable environment, applies a timeout and turns a failure into a
`GitError` carrying stdout and stderr.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base.errors import NevError
from lanes.base.mask import mask, mask_argv

log = logging.getLogger("nev.git")

# What a user's configuration must not change about a rebase, a commit or a tag nev makes:
# no editor, no signing prompt, no autosquash/autostash, no other refs moved, no hooks.
WRITE_CFG = ("-c", "core.editor=true", "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false",
             "-c", "rebase.autoSquash=false", "-c", "rebase.autoStash=false", "-c", "rebase.updateRefs=false",
             "-c", "core.hooksPath=/dev/null")


# On every git nev runs on a person's behalf (docs/lanes.md, "The agent's git"): their hooks and
# fsmonitor do not run (nev's own commits, merges, fetches and pushes are nev's, not theirs: a
# person's hooks run from their own git commands), and no `ext::` transport runs a command.
SAFE_CFG = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
            "-c", "protocol.ext.allow=never")


class GitError(NevError):
    def __init__(self, message: str, argv: Sequence[str] = (), returncode: int = 1,
                 stdout: str = "", stderr: str = "") -> None:
        super().__init__(mask(message))
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
    })
    env.setdefault("GIT_AUTHOR_NAME", "nev")
    env.setdefault("GIT_AUTHOR_EMAIL", "nev@localhost")
    env.setdefault("GIT_COMMITTER_NAME", env["GIT_AUTHOR_NAME"])
    env.setdefault("GIT_COMMITTER_EMAIL", env["GIT_AUTHOR_EMAIL"])
    if extra:
        env.update(extra)
    return env


def ref_problem(name: str) -> str | None:
    """Why `name` cannot be (part of) a git ref name, by `git check-ref-format`'s rules, or None
    (pure): no component starting with '.' or ending with '.lock', no '..', no '@{', not '@', no
    control character, space, ~ ^ : ? * [ or backslash, no leading, trailing or double '/', no
    trailing '.'."""
    if not name or name == "@":
        return "is empty or '@'"
    if ".." in name:
        return "holds '..'"
    if "@{" in name:
        return "holds '@{'"
    bad = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F or c in " ~^:?*[\\"), None)
    if bad is not None:
        return f"holds {bad!r}"
    if name.startswith("/") or name.endswith("/") or "//" in name:
        return "has a leading, trailing or double '/'"
    if name.endswith("."):
        return "ends with '.'"
    for part in name.split("/"):
        if part.startswith("."):
            return f"has a part starting with '.' ({part!r})"
        if part.endswith(".lock"):
            return f"has a part ending with '.lock' ({part!r})"
    return None


@dataclass
class Repo:
    """A git working directory (or bare repository)."""

    path: Path
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 600.0

    def git(self, *args: str, input: bytes | str | None = None, check: bool = True,
            timeout: float | None = None, env: Mapping[str, str] | None = None,
            text: bool = True) -> subprocess.CompletedProcess:
        argv = ["git", "-C", str(self.path), *SAFE_CFG, *args]
        log.debug("git: %s", mask_argv(argv))
        full_env = git_env({**self.env, **(env or {})})
        if isinstance(input, str) and not text:
            input = input.encode()
        try:
            cp = subprocess.run(argv, input=input, capture_output=True, env=full_env,
                                timeout=timeout or self.timeout, text=text)
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0] if args else ''} timed out after {timeout or self.timeout:.0f} s in {self.path}", argv) from None
        except FileNotFoundError:
            raise GitError("git is not installed; install it (apt-get install git)", argv) from None
        if check and cp.returncode != 0:
            err = cp.stderr if text else cp.stderr.decode(errors="replace")
            first = (err.strip().splitlines() or ["(no message)"])[-1]
            raise GitError(f"git {args[0] if args else ''} failed in {self.path}: {first}", argv,
                           cp.returncode, cp.stdout if text else "", err)
        return cp

    def out(self, *args: str, **kw) -> str:
        return self.git(*args, **kw).stdout.strip()

    def ok(self, *args: str) -> bool:
        return self.git(*args, check=False).returncode == 0

    def rev(self, ref: str) -> str:
        return self.out("rev-parse", "--verify", "--quiet", ref + "^{commit}")

    def try_rev(self, ref: str) -> str | None:
        cp = self.git("rev-parse", "--verify", "--quiet", ref + "^{commit}", check=False)
        return cp.stdout.strip() if cp.returncode == 0 else None

    def filters_off(self) -> tuple[str, ...]:
        """`-c` options that turn off every filter driver the person's config defines (its
        `clean`, `smudge` and `process` commands), for reading a worktree to build a payload:
        nev never runs a worktree's filter (an LFS file then travels as the bytes on disk)."""
        cp = self.git("config", "-z", "--name-only", "--get-regexp",
                      r"^filter\..*\.(clean|smudge|process)$", check=False)
        out: list[str] = []
        for name in sorted({n for n in cp.stdout.split("\0") if n}):
            out += ["-c", f"{name}="]
        return tuple(out)

    def toplevel(self) -> Path:
        return Path(self.out("rev-parse", "--show-toplevel"))

    def toplevel_or_self(self) -> Path:
        """The checkout this folder is in, else the folder itself (an engine or corpus outside git)."""
        try:
            return self.toplevel()
        except GitError:
            return self.path.resolve()

    def git_dir(self) -> Path:
        return Path(self.out("rev-parse", "--absolute-git-dir"))

    def common_dir(self) -> Path:
        p = Path(self.out("rev-parse", "--git-common-dir"))
        return p if p.is_absolute() else (self.path / p).resolve()

    def branch(self) -> str | None:
        """The branch checked out (short name); None when HEAD is detached."""
        cp = self.git("symbolic-ref", "-q", "--short", "HEAD", check=False)
        if cp.returncode != 0:
            return None
        return cp.stdout.strip() or None

    def is_clean(self) -> bool:
        return self.out("status", "--porcelain") == ""

    # -- reading ----------------------------------------------------------------------------

    def show(self, rev: str, path: str) -> str | None:
        """The text of `path` at `rev`; None when it is not there."""
        cp = self.git("show", f"{rev}:{path}", check=False)
        return cp.stdout if cp.returncode == 0 else None

    def show_bytes(self, rev: str, path: str) -> bytes | None:
        """The bytes of `path` at `rev` (a file that may not be UTF-8); None when it is not there."""
        cp = self.git("show", f"{rev}:{path}", check=False, text=False)
        return cp.stdout if cp.returncode == 0 else None

    def blob(self, rev: str, path: str) -> str | None:
        """The blob id of `path` at `rev`; None when it is not there."""
        cp = self.git("rev-parse", "--verify", "--quiet", f"{rev}:{path}", check=False)
        if cp.returncode != 0:
            return None
        return cp.stdout.strip() or None

    def is_ancestor(self, a: str, b: str) -> bool:
        return self.ok("merge-base", "--is-ancestor", a, b)

    def oneline(self, rev: str, *exclude: str) -> list[str]:
        """`sha subject` of each commit of `rev` that none of `exclude` holds, newest first."""
        return self.out("log", "--format=%h %s", rev, *(f"^{x}" for x in exclude), "--").splitlines()

    def merge_base(self, a: str, b: str) -> str:
        return self.out("merge-base", a, b)

    def tree_files(self, rev: str) -> set[str]:
        """Every file path in the tree of `rev`."""
        return {p for p in self.git("ls-tree", "-r", "--name-only", "-z", rev).stdout.split("\0") if p}

    def name_status(self, a: str, b: str) -> str:
        """`git diff --name-status -z` from `a` to `b`, renames detected, no external diff or textconv."""
        return self.git("diff", "--name-status", "-z", "-M", "--no-ext-diff", "--no-textconv", a, b).stdout

    def local_changes(self) -> set[str]:
        """Paths that differ from HEAD in the index or the working tree, and untracked files not ignored."""
        changed = self.git("diff", "--name-only", "-z", "HEAD").stdout.split("\0")
        untracked = self.git("ls-files", "--others", "--exclude-standard", "-z").stdout.split("\0")
        return {p for p in changed + untracked if p}

    def index_matches(self, rev: str, paths: Sequence[str]) -> bool:
        """The index holds `paths` exactly as `rev` does."""
        return self.ok("diff-index", "--cached", "--quiet", rev, "--", *paths)

    def refs(self, prefix: str) -> list[str]:
        """Full names of the refs under `prefix` (such as `refs/tags/spec/alpha/`)."""
        return self.out("for-each-ref", "--format=%(refname)", prefix).split()

    # -- refs -------------------------------------------------------------------------------

    def set_ref(self, ref: str, new: str) -> None:
        self.git("update-ref", ref, new)

    def compare_and_swap(self, ref: str, new: str, old: str, message: str) -> bool:
        """Move `ref` to `new` only if it is still `old` (one atomic `update-ref`); False when it moved."""
        return self.git("update-ref", "-m", message, ref, new, old, check=False).returncode == 0

    def delete_ref(self, ref: str, old: str | None = None) -> bool:
        """Delete `ref` (only if it is still `old`, when given); False when it was not deleted."""
        return self.git("update-ref", "-d", ref, *([old] if old else []), check=False).returncode == 0

    def fetch_bundle(self, bundle: Path, src: str, ref: str) -> str:
        """`src` of the bundle file into `ref` (forced: a ref of nev's own); the commit it names."""
        self.git("bundle", "verify", "-q", str(bundle))
        self.git("fetch", "-q", "--no-tags", str(bundle), f"+{src}:{ref}")
        return self.rev(ref)

    def fast_forward(self, commit: str) -> None:
        """Move the checked-out branch (and its files) to `commit`, fast-forward only."""
        self.git(*WRITE_CFG, "merge", "-q", "--ff-only", commit)

    def tag_annotated(self, tag: str, rev: str, message: str) -> None:
        self.git(*WRITE_CFG, "tag", "-a", "-m", message, tag, rev)

    # -- worktrees --------------------------------------------------------------------------

    def worktrees(self) -> list[Worktree]:
        """The repository's worktrees (not a bare one), from `git worktree list --porcelain`."""
        out: list[Worktree] = []
        cur: dict[str, str] = {}
        for line in self.git("worktree", "list", "--porcelain").stdout.splitlines() + [""]:
            if not line:
                if "worktree" in cur and "bare" not in cur:
                    out.append(Worktree(Path(cur["worktree"]), cur.get("HEAD"), cur.get("branch")))
                cur = {}
                continue
            k, _, v = line.partition(" ")
            cur[k] = v
        return out

    def checkout_of(self, branch: str, not_under: Path) -> Path | None:
        """The worktree that has `branch` (a full ref) checked out, none under `not_under`."""
        for w in self.worktrees():
            if w.branch == branch and not_under not in w.path.parents:
                return w.path
        return None

    def add_detached_worktree(self, path: Path, rev: str) -> Repo:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.git("worktree", "add", "--detach", "-q", str(path), rev)
        return Repo(path, dict(self.env), self.timeout)

    def remove_worktree(self, path: Path) -> None:
        """`git worktree remove --force`: the worktree goes, uncommitted changes with it."""
        self.git("worktree", "remove", "--force", str(path))

    def discard_worktree(self, path: Path) -> None:
        """Remove the worktree at `path` whatever state it is in (its folder goes), then prune."""
        if path.exists() and not self.ok("worktree", "remove", "--force", str(path)):
            shutil.rmtree(path, ignore_errors=True)
        self.prune_worktrees()

    def prune_worktrees(self) -> None:
        self.git("worktree", "prune", check=False)

    def move_checkout(self, old: str, new: str) -> None:
        """Bring this checkout's index and files from `old` to `new`, keeping unrelated local edits."""
        self.git("read-tree", "-m", "-u", old, new)

    # -- rebase and commit ------------------------------------------------------------------

    def rebase(self, onto: str) -> subprocess.CompletedProcess:
        """Start rebasing HEAD onto `onto`; a returncode other than 0 means it stopped (see `conflicted`)."""
        return self.git(*WRITE_CFG, "rebase", "--quiet", onto, check=False)

    def conflicted(self) -> list[str]:
        return [p for p in self.git("diff", "--name-only", "--diff-filter=U", "-z").stdout.split("\0") if p]

    def rebase_continue(self) -> subprocess.CompletedProcess:
        """Go on after resolving: `--continue`, or `--skip` when the resolution left the commit empty."""
        staged = not self.ok("diff", "--cached", "--quiet")
        return self.git(*WRITE_CFG, "rebase", "--continue" if staged else "--skip", check=False)

    def rebase_abort(self) -> None:
        self.git("rebase", "--abort", check=False)

    def keep_upstream(self, path: str) -> None:
        """In a stopped rebase, resolve `path` with the side being rebased onto ("ours" in a rebase);
        when that side has no such file, it is removed."""
        if self.ok("checkout", "--ours", "--", path):
            self.git("add", "--", path)
        else:
            self.git("rm", "-q", "--cached", "--ignore-unmatch", "--", path)
            (self.path / path).unlink(missing_ok=True)

    def commit_file(self, path: str, text: str | None, message: str) -> str:
        """Write `path` (or remove it, for None) and commit it alone; the new HEAD."""
        if text is None:
            self.git("rm", "-q", "--", path)
        else:
            (self.path / path).write_text(text, encoding="utf-8")
            self.git("add", "--", path)
        self.git(*WRITE_CFG, "commit", "-q", "--no-verify", "-m", message)
        return self.rev("HEAD")


@dataclass(frozen=True)
class Worktree:
    path: Path
    head: str | None
    branch: str | None  # the full ref name (refs/heads/x); None when detached


def init(path: Path, bare: bool = False, branch: str = "main") -> Repo:
    path.mkdir(parents=True, exist_ok=True)
    r = Repo(path)
    args = ["init", "-q", "-b", branch]
    if bare:
        args.append("--bare")
    r.git(*args)
    return r
