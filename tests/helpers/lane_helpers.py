"""Helpers for the gate tests: a worktree with every kind of change, env for the nev CLI, runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WT = Path(__file__).resolve().parents[2]


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    full = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_NOSYSTEM="1")
    full.update(env or {})
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True,
                          env=full).stdout.strip()


def make_forge(root: Path) -> tuple[Path, Path]:
    """A bare 'forge' repository with one commit on main, and a clone of it as the dev worktree."""
    seed = root / "seed"
    seed.mkdir(parents=True)
    git(seed, "init", "-q", "-b", "main")
    (seed / "README").write_text("engine\n")
    (seed / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(seed / "run.sh", 0o755)
    (seed / "old name.txt").write_text("to be renamed\n" * 20)
    (seed / "gone.txt").write_text("to be deleted\n")
    (seed / "mode.sh").write_text("echo mode\n")
    (seed / ".gitignore").write_text("target/\n.env\n")
    os.symlink("README", seed / "link")
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "base")
    forge = root / "forge.git"
    git(root, "clone", "-q", "--bare", str(seed), str(forge))
    return forge, seed


def clone_worktree(forge_url: str, dest: Path, env: dict[str, str] | None = None) -> Path:
    git(dest.parent, "clone", "-q", forge_url, str(dest), env=env)
    return dest


def copy_name(wt: Path) -> str:
    """The name of `wt`'s lane copy, as the gate computes it (`lanes.payload.copy_name_of`: the
    folder's name keyed by its repository): `lane.host_root / copy_name(wt)` is its copy."""
    from lanes import payload

    return payload.Worktree.open(wt).name


def clone_copy_name(dest: Path) -> str:
    """The copy name a plain clone at `dest` gets (its common dir is `dest/.git`), computable
    before it is cloned: the same as `copy_name(dest)` once it is."""
    import socket

    from lanes.agent import layout

    key = layout.repo_key(socket.gethostname(), os.path.realpath(dest / ".git"))
    return layout.copy_name(dest.name, key)


def make_changes(wt: Path) -> None:
    """Unpushed commit, staged and unstaged edits, binary, mode, rename, delete, symlink, untracked."""
    (wt / "src").mkdir(exist_ok=True)
    (wt / "src" / "lib.rs").write_text("pub fn f() -> u32 { 1 }\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "unpushed work")
    git(wt, "mv", "old name.txt", "new näme.txt")
    git(wt, "rm", "-q", "gone.txt")
    (wt / "README").write_text("engine, edited and staged\n")
    git(wt, "add", "README")
    (wt / "README").write_text("engine, edited, staged, then edited again\n")
    os.chmod(wt / "mode.sh", 0o755)
    (wt / "blob.bin").write_bytes(bytes(range(256)) * 40)
    git(wt, "add", "blob.bin")
    (wt / "blob.bin").write_bytes(bytes(range(255, -1, -1)) * 41)
    os.unlink(wt / "link")
    os.symlink("src/lib.rs", wt / "link")
    os.unlink(wt / "run.sh")                       # a file becomes a symlink
    os.symlink("README", wt / "run.sh")
    (wt / "untracked dir").mkdir()
    (wt / "untracked dir" / "spaced name ü.txt").write_text("odd names travel too\n")
    (wt / "untracked dir" / "exec.sh").write_text("#!/bin/sh\n")
    os.chmod(wt / "untracked dir" / "exec.sh", 0o750)
    os.symlink("exec.sh", wt / "untracked dir" / "rel-link")
    (wt / "raw.bin").write_bytes(os.urandom(5000))
    (wt / "target").mkdir()
    (wt / "target" / "ignored.o").write_text("ignored build output stays home\n")


def tree_hash(path: Path) -> str:
    """The git tree of a working tree as it is on disk (tracked and untracked, ignored left out)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        git(path, "read-tree", "HEAD", env=env)
        git(path, "add", "-A", ".", env=env)
        return git(path, "write-tree", env=env)


def nev(args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 120,
        **kw) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = str(WT)
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd or WT, env=full,
                          capture_output=True, text=True, timeout=timeout, **kw)


def nev_popen(args: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = str(WT)
    return subprocess.Popen([sys.executable, "-m", "rig.cli", *args], cwd=WT, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def cmdlines() -> list[tuple[int, str]]:
    """(pid, argv joined) of every process this namespace shows."""
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                raw = Path(f"/proc/{e}/cmdline").read_bytes()
            except OSError:
                continue
            out.append((int(e), raw.replace(b"\0", b" ").decode(errors="replace")))
    return out


def agent_variant(agent, prefix: bytes):
    """Another lane agent (`lanes.agentpack.Agent`): `prefix` run ahead of this one's content."""
    import hashlib
    import zlib

    from lanes import agentpack

    content = prefix + zlib.decompress(agent.blob)
    return agentpack.Agent(zlib.compress(content), hashlib.sha256(content).hexdigest())


def agent_marker(name: str) -> bytes:
    """Agent code that adds a line `ran` to `~/name` when it runs."""
    return f"import os\nopen(os.path.expanduser('~/{name}'),'a').write('ran\\n')\n".encode()
