"""The forge as the dev box sees it: job/* and result/* branches, with the token kept out of argv.

The forge URL is NEV_LANE_GIT_URL (the repository the lanes fetch). The token comes from
NEV_FORGE_TOKEN_FILE (mode 600) or NEV_FORGE_TOKEN, and reaches git only through a
credential helper configured in the environment; a URL that carries a credential is
refused, since it would land in argv and in git's messages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from lanes import settings
from lanes.errors import ConfigError
from lanes.gitrun import Repo
from lanes.mask import register_secret

_HELPER = ('!f() { test "$1" = get || exit 0; echo "username=${NEV_FORGE_USER:-nev}"; '
           'if [ -n "${NEV_FORGE_TOKEN_FILE:-}" ]; then printf "password="; cat "$NEV_FORGE_TOKEN_FILE"; '
           'else echo "password=${NEV_FORGE_TOKEN}"; fi; }; f')


@dataclass(frozen=True)
class Forge:
    url: str
    env: dict[str, str]

    def ls(self, repo: Repo, prefix: str) -> dict[str, str]:
        """Branch name (without `refs/heads/<prefix>/`) -> tip, of every `<prefix>/*` branch."""
        out = repo.out("ls-remote", "--heads", self.url, f"refs/heads/{prefix}/*", env=self.env, timeout=120)
        tips: dict[str, str] = {}
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            name = ref.removeprefix(f"refs/heads/{prefix}/")
            if name and sha:
                tips[name] = sha
        return tips

    def fetch_results(self, repo: Repo) -> None:
        repo.git("fetch", "-q", "--no-tags", "--prune", self.url, "+refs/heads/result/*:refs/nev/results/*",
                 env=self.env, timeout=600)

    def push(self, repo: Repo, *refspecs: str) -> None:
        repo.git("push", "-q", "--porcelain", self.url, *refspecs, env=self.env, timeout=600)

    def delete(self, repo: Repo, *branches: str) -> None:
        have = set()
        for prefix in {b.split("/", 1)[0] for b in branches}:
            have |= {f"{prefix}/{n}" for n in self.ls(repo, prefix)}
        gone = [f":refs/heads/{b}" for b in branches if b in have]
        if gone:
            self.push(repo, *gone)


def from_settings(environ: Mapping[str, str] | None = None) -> Forge:
    env_in = os.environ if environ is None else environ
    url = settings.get(settings.LANE_GIT_URL, env_in)
    if not url:
        raise ConfigError("NEV_LANE_GIT_URL is not set: set it to the forge repository the lanes fetch "
                          "(e.g. http://198.18.0.5/git/engine.git; `nev box env` sets it on the box)")
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise ConfigError("NEV_LANE_GIT_URL carries a credential; drop it from the URL and put the token in "
                          "the file NEV_FORGE_TOKEN_FILE (mode 600)")
    env = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "credential.helper", "GIT_CONFIG_VALUE_0": "",
           "GIT_CONFIG_KEY_1": "credential.helper", "GIT_CONFIG_VALUE_1": _HELPER, "GIT_TERMINAL_PROMPT": "0",
           "NEV_FORGE_USER": settings.get(settings.FORGE_USER, env_in) or "nev"}
    token_file = settings.get(settings.FORGE_TOKEN_FILE, env_in)
    token = settings.get(settings.FORGE_TOKEN, env_in)
    if token_file:
        p = Path(token_file).expanduser()
        try:
            value = p.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(f"NEV_FORGE_TOKEN_FILE={p}: cannot read it ({e.strerror}); fix the path") from None
        register_secret(value)
        env["NEV_FORGE_TOKEN_FILE"] = str(p)
    elif token:
        register_secret(token)
        env["NEV_FORGE_TOKEN"] = token
        env["NEV_FORGE_TOKEN_FILE"] = ""
    else:
        env["GIT_CONFIG_COUNT"] = "1"  # a forge without auth (a local path in tests)
    return Forge(url, env)


def token_bytes(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The forge token, for the lane's own mode-600 copy (sent over SSH stdin)."""
    env_in = os.environ if environ is None else environ
    tf = settings.get(settings.FORGE_TOKEN_FILE, env_in)
    value = Path(tf).expanduser().read_text(encoding="utf-8").strip() if tf else \
        (settings.get(settings.FORGE_TOKEN, env_in) or "").strip()
    if not value:
        return None
    register_secret(value)
    return value.encode()
