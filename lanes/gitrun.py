"""The one place that runs git.

Every git call goes through `Repo.git()`, which logs the exact command (masked),
sets a predictable environment, applies a timeout and turns a failure into a
`GitError` carrying stdout and stderr.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lanes.errors import NevError
from lanes.mask import mask, mask_argv

log = logging.getLogger("nev.git")


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


@dataclass
class Repo:
    """A git working directory (or bare repository)."""

    path: Path
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 600.0

    def git(self, *args: str, input: bytes | str | None = None, check: bool = True,
            timeout: float | None = None, env: Mapping[str, str] | None = None,
            text: bool = True) -> subprocess.CompletedProcess:
        argv = ["git", "-C", str(self.path), *args]
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

    def is_clean(self) -> bool:
        return self.out("status", "--porcelain") == ""


def init(path: Path, bare: bool = False, branch: str = "main") -> Repo:
    path.mkdir(parents=True, exist_ok=True)
    r = Repo(path)
    args = ["init", "-q", "-b", branch]
    if bare:
        args.append("--bare")
    r.git(*args)
    return r
