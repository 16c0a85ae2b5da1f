"""Who this box is at the forge: the user and token, and the git environment that hands them to git.

The token is looked up in this order (the first one set wins):

1. the environment: NEV_FORGE_TOKEN (legacy GENERA_FORGE_TOKEN);
2. the file NEV_FORGE_TOKEN_FILE (mode 600);
3. `.env` of the checkout in use, then of its primary checkout: NEV_FORGE_TOKEN, else
   GENERA_FORGE_TOKEN.

The user: NEV_FORGE_USER (legacy GENERA_FORGE_USER) in the environment, else NEV_FORGE_USER or
GENERA_FORGE_USER in those `.env` files, else `nev`. The token is registered with the masker and
reaches git only through the one credential helper (`lanes.agent.git.credential_env`), never argv.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lanes import dotenv
from lanes.agent.git import credential_env
from lanes.base import settings
from lanes.base.errors import ConfigError
from lanes.base.gitrun import GitError, Repo
from lanes.base.mask import register_secret

TOKEN_NAMES = settings.FORGE_TOKEN.names
USER_NAMES = settings.FORGE_USER.names


@dataclass(frozen=True)
class Credential:
    user: str | None
    token: str | None = field(default=None, repr=False)
    source: str = ""  # where the token came from, for messages (never the token)

    def git_env(self) -> dict[str, str]:
        """Environment for a git command that talks to the forge."""
        return credential_env(self.user, self.token)


def checkout_env_files(repo: Repo | None) -> list[Path]:
    """`.env` of the checkout `repo` is in, then of its primary checkout (when it is another)."""
    if repo is None:
        return []
    try:
        top = repo.toplevel()
        common = repo.common_dir()
    except GitError:
        return []
    files = [top / ".env"]
    if common.name == ".git" and common.parent.resolve() != top.resolve():
        files.append(common.parent / ".env")
    return files


def lookup(repo: Repo | None = None, environ: Mapping[str, str] | None = None) -> Credential:
    """The forge credential (see the module's docstring for the order); token None when none is set."""
    env = os.environ if environ is None else environ
    files = checkout_env_files(repo)
    dot = [(f, dotenv.read(f)) for f in files]
    user = settings.get(settings.FORGE_USER, env) or next(
        (u for _, d in dot if (u := dotenv.first(d, *USER_NAMES))), None)
    token = settings.get(settings.FORGE_TOKEN, env)
    source = "NEV_FORGE_TOKEN"
    if not token:
        tf = settings.get_path(settings.FORGE_TOKEN_FILE, env)
        if tf is not None:
            try:
                token = tf.read_text(encoding="utf-8").strip()
            except OSError as e:
                raise ConfigError(f"NEV_FORGE_TOKEN_FILE={tf}: cannot read it ({e.strerror}); fix the path") from None
            source = f"NEV_FORGE_TOKEN_FILE ({tf})"
    if not token:
        for f, d in dot:
            token = dotenv.first(d, *TOKEN_NAMES)
            if token:
                source = str(f)
                break
    if not token:
        return Credential(user, None, "")
    register_secret(token)
    return Credential(user, token, source)
