"""The forge host: nginx + fcgiwrap + `git http-backend`, basic auth with a token.

The token lives in a mode-600 file; nginx reads an `{SSHA}` hash of it, and git clients get it
through the GIT_ASKPASS helper the box writes (which reads the file), so it never appears on a
command line.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

from lanes.base import gitrun
from lanes.base.errors import UsageError
from rig.box import plan
from rig.box.state import BoxInfo

REPO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")
USER = "nev"


def write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    os.chmod(path, 0o600)


def ensure_token(token_file: Path) -> str:
    if token_file.exists():
        tok = token_file.read_text().strip()
        if tok:
            return tok
    tok = secrets.token_hex(24)
    write_secret(token_file, tok)
    return tok


def write_files(d: Path, addr: str, token: str) -> dict[str, str]:
    """The forge's configs under `d` (box/forge); returns the paths nginx's config names."""
    run = d.parent / "run"
    paths = {"pid": str(run / "forge-nginx.pid"), "error_log": str(d.parent / "logs" / "forge-nginx.log"),
             "access_log": str(d / "access.log"), "tmp": str(d / "tmp"), "htpasswd": str(d / "htpasswd"),
             "repos": str(d / "repos"), "socket": str(run / "fcgiwrap.sock")}
    for sub in ("tmp", "repos"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    run.mkdir(parents=True, exist_ok=True)
    if not plan.ssha_matches(_read(d / "htpasswd").partition(":")[2].strip(), token):
        write_secret(d / "htpasswd", f"{USER}:{plan.ssha(token, secrets.token_bytes(8))}")
    (d / "nginx.conf").write_text(plan.nginx_conf(addr, paths))
    ask = d / "askpass"
    ask.write_text(plan.askpass_script(USER, str(d / "token")))
    os.chmod(ask, 0o700)
    return paths


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except FileNotFoundError:
        return ""


def create_bare(repos: Path, name: str) -> Path:
    if not REPO_NAME.match(name) or name.endswith(".git") and not REPO_NAME.match(name[:-4] or "-"):
        raise UsageError(f"repository name {name!r} is not allowed; use letters, digits, . _ -")
    path = repos / (name if name.endswith(".git") else name + ".git")
    if not (path / "HEAD").exists():
        r = gitrun.init(path, bare=True)
        r.git("config", "http.receivepack", "true")
    return path


def seed_engine(repos: Path) -> None:
    """`engine.git` with one commit on main, so a fresh box has something to clone."""
    bare = create_bare(repos, "engine")
    if gitrun.Repo(bare).try_rev("refs/heads/main"):
        return
    work = Path(tempfile.mkdtemp(prefix="nev-box-seed-"))
    try:
        r = gitrun.init(work)
        (work / "README.md").write_text("# engine\n\nThe box forge's seed repository.\n")
        r.git("add", "README.md")
        r.git("commit", "-q", "-m", "seed")
        r.git("push", "-q", str(bare), "main:main")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def create_repo(info: BoxInfo, name: str) -> str:
    """Create a new, empty bare repository on the box's forge; returns its URL (no credential)."""
    path = create_bare(info.forge_repos, name)
    return info.forge_url + path.name
