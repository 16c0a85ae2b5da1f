"""What a gate ships from a worktree: bundle, diff, untracked files, `.env`, and the lane program.

- The bundle holds only the commits the lane cannot already have: its basis is the lane mirror's
  tips (that exist here) plus, when the lane can reach the forge, this repository's
  remote-tracking tips (the forge supplies those faster than a slow uplink; if it cannot, the
  lane asks again and gets a bundle over its own tips only).
- The diff is `git diff --binary -M HEAD`: staged and unstaged, binary-safe, with modes,
  symlinks, deletions and renames.
- The untracked files git does not ignore go as one gzip'd tar (odd names, modes, symlinks).
- The lane agent (`lanes/agent/`, with `lanes/dotenv.py`; stdlib only) travels on the same
  channel's stdin ahead of everything, started by a short bootstrap that holds no secret.
"""

from __future__ import annotations

import ast
import functools
import gzip
import hashlib
import io
import json
import os
import tarfile
import tokenize
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base.errors import NevError
from lanes.base.gitrun import GitError, Repo

# The agent as sent, each module under its own name, in import order: each imports only the
# stdlib and modules before it (tests/test_architecture.py). `lanes` is an empty namespace on the
# lane, so nothing but these modules can be imported from it there.
LANE_MODULES = ("lanes", "lanes.dotenv", "lanes.agent", "lanes.agent.errors", "lanes.agent.layout",
                "lanes.agent.wire", "lanes.agent.guard", "lanes.agent.git", "lanes.agent.links",
                "lanes.agent.procs", "lanes.agent.output", "lanes.agent.mirror", "lanes.agent.copy",
                "lanes.agent.root", "lanes.agent.retention", "lanes.agent.gate", "lanes.agent.main")
PACKAGES = ("lanes", "lanes.agent")

# Reads the modules from stdin, then runs the agent; it is the only argv on the lane.
BOOTSTRAP = ("import sys,json,types,zlib;b=sys.stdin.buffer;n=int(b.readline())\n"
             "for k,p,s in json.loads(zlib.decompress(b.read(n))):\n"
             " m=types.ModuleType(k);m.__file__=k;sys.modules[k]=m\n"
             " if p:m.__path__=[]\n"
             " a,_,c=k.rpartition('.')\n"
             " if a:setattr(sys.modules[a],c,m)\n"
             " exec(compile(s,k,'exec'),m.__dict__)\n"
             "sys.modules['lanes.agent.main'].main()")


def source_path(module: str) -> Path:
    """The file of one of LANE_MODULES."""
    path = Path(__file__).parent.parent.joinpath(*module.split("."))
    return path / "__init__.py" if module in PACKAGES else path.with_suffix(".py")


def lane_program() -> bytes:
    """The length-prefixed, compressed module blob the bootstrap reads first (~14 KB)."""
    return _program()


def lean(source: str) -> str:
    """`source` without its docstrings and comments, every line where it was (a traceback on the
    lane points at the same line here): the agent crosses a slow uplink with every call."""
    lines = source.splitlines(keepends=True)
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            doc = body[0]
            first, last = doc.lineno - 1, (doc.end_lineno or doc.lineno) - 1
            indent = lines[first][:doc.col_offset]
            lines[first:last + 1] = [indent + '""\n'] + ["\n"] * (last - first)
    out = io.StringIO("".join(lines))
    cuts: dict[int, int] = {}
    for tok in tokenize.generate_tokens(out.readline):
        if tok.type == tokenize.COMMENT:
            cuts[tok.start[0] - 1] = tok.start[1]
    lines = "".join(lines).splitlines(keepends=True)
    for row, col in cuts.items():
        lines[row] = lines[row][:col].rstrip() + "\n"
    return "".join(lines)


@functools.lru_cache(maxsize=1)
def _program() -> bytes:
    """Built once per version of the agent's sources and kept in the user's cache: making it
    (parsing, stripping, compressing ~15 modules) takes about as long as a whole warm gate."""
    sources = {name: "" if name == "lanes" else source_path(name).read_text() for name in LANE_MODULES}
    digest = hashlib.sha256(json.dumps(sorted(sources.items())).encode()).hexdigest()[:20]
    cached = _cache_dir() / f"agent-{digest}.blob"
    try:
        return cached.read_bytes()
    except OSError:
        pass
    mods = [[name, name in PACKAGES, lean(src) if src else ""] for name, src in sources.items()]
    blob = zlib.compress(json.dumps(mods).encode(), 9)
    program = str(len(blob)).encode() + b"\n" + blob
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(program)
        os.replace(tmp, cached)
    except OSError:
        pass     # a read-only cache: built again next time, nothing lost
    return program


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nev"


def lane_command(python: str = "python3") -> str:
    import shlex

    return f"{python} -c {shlex.quote(BOOTSTRAP)}"


@dataclass
class Worktree:
    path: Path
    name: str
    commit: str
    repo: Repo

    @classmethod
    def open(cls, path: Path) -> Worktree:
        if not path.is_dir():
            raise NevError(f"worktree {path} does not exist; give the folder of a git worktree")
        try:
            top = Repo(path).toplevel()
        except GitError:
            raise NevError(f"{path} is not inside a git worktree; give the folder of one") from None
        repo = Repo(top)
        commit = repo.try_rev("HEAD")
        if commit is None:
            raise NevError(f"worktree {top} has no commit yet; commit something first")
        return cls(top, top.name, commit, repo)


@dataclass
class Payload:
    commit: str
    bundle: bytes
    diff: bytes
    untracked: bytes
    env: bytes
    untracked_count: int = 0
    basis: list[str] = field(default_factory=list)

    def sizes(self) -> dict[str, int]:
        return {"bundle": len(self.bundle), "diff": len(self.diff), "untracked": len(self.untracked),
                ".env": len(self.env)}

    def members(self) -> list[bytes]:
        return [self.bundle, self.diff, self.untracked, self.env]


def known_commits(repo: Repo, shas: list[str]) -> list[str]:
    """Those of `shas` that are commits in this repository."""
    if not shas:
        return []
    cp = repo.git("cat-file", "--batch-check=%(objectname) %(objecttype)", input="\n".join(shas) + "\n")
    out = []
    for line in cp.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == "commit":
            out.append(parts[0])
    return out


def remote_tips(repo: Repo) -> list[str]:
    out = repo.out("for-each-ref", "--format=%(objectname)", "refs/remotes")
    return sorted(set(out.split()))


def basis_for(repo: Repo, lane_tips: list[str], forge_reachable: bool) -> list[str]:
    basis = set(lane_tips)
    if forge_reachable:
        basis.update(remote_tips(repo))
    return known_commits(repo, sorted(basis))


def bundle(repo: Repo, commit: str, basis: list[str]) -> bytes:
    """A bundle of `commit` without what `basis` already holds; empty when nothing is missing."""
    if commit in basis:
        return b""
    revs = "HEAD\n" + "".join(f"^{b}\n" for b in basis)
    cp = repo.git("bundle", "create", "-q", "-", "--stdin", input=revs.encode(), text=False, check=False)
    if cp.returncode != 0:
        err = cp.stderr.decode(errors="replace")
        if "empty bundle" in err:
            return b""
        raise GitError(f"git bundle create failed in {repo.path}: {err.strip().splitlines()[-1] if err.strip() else cp.returncode}")
    return cp.stdout


def diff(repo: Repo) -> bytes:
    cp = repo.git("diff", "--binary", "--full-index", "--no-color", "--no-ext-diff", "--no-textconv",
                  "-M", "HEAD", "--", text=False)
    return cp.stdout


def untracked_names(repo: Repo) -> list[str]:
    """Untracked files git does not ignore; `.env` travels on its own (installed for the run only)."""
    cp = repo.git("ls-files", "--others", "--exclude-standard", "-z", text=False)
    names = (n.decode("utf-8", "surrogateescape") for n in cp.stdout.split(b"\0") if n)
    return [n for n in names if n != ".env"]


def untracked_tar(root: Path, names: list[str], extra: Mapping[str, bytes] | None = None) -> bytes:
    """The untracked files, and `extra` (lane-copy path -> content: files of this machine that
    travel with the run, e.g. a batch's declared aliases), as one gzipped tar."""
    if not names and not extra:
        return b""
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tf:
            for n in names:
                p = root / n
                if not os.path.lexists(p):
                    continue
                tf.add(str(p), arcname=n, recursive=False)
            for n, data in (extra or {}).items():
                info = tarfile.TarInfo(n)
                info.size, info.mode = len(data), 0o600
                tf.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def build(wt: Worktree, lane_tips: list[str], forge_reachable: bool,
          extra: Mapping[str, bytes] | None = None) -> Payload:
    basis = basis_for(wt.repo, lane_tips, forge_reachable)
    names = untracked_names(wt.repo)
    env_file = wt.path / ".env"
    env = env_file.read_bytes() if env_file.is_file() else b""
    return Payload(commit=wt.commit, bundle=bundle(wt.repo, wt.commit, basis), diff=diff(wt.repo),
                   untracked=untracked_tar(wt.path, names, extra), env=env,
                   untracked_count=len(names) + len(extra or {}),
                   basis=basis)

