"""The forge as a gate's lane mirror fetches from it: its URL (NEV_LANE_GIT_URL, the lanes file's
`git_url`, else the repository's `origin`) and the credential kept out of every argv."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from lanes import forgeauth
from lanes.base import settings
from lanes.base.gitrun import Repo
from lanes.base.mask import register_secret
from lanes.lanesfile import LanesFile


@dataclass(frozen=True)
class Forge:
    url: str | None
    user: str | None = None
    password: str | None = None

    def cred(self) -> dict[str, str] | None:
        return {"user": self.user or "nev", "password": self.password} if self.password else None


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """(url without user:token, user, token)."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme or "@" not in parts.netloc:
        return url, None, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, token = userinfo.partition(":")
    clean = urllib.parse.urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return clean, urllib.parse.unquote(user) or None, urllib.parse.unquote(token) or None


def forge_for(repo: Repo, lf: LanesFile) -> Forge:
    """The forge URL the lane mirror fetches from, and the credential kept out of every argv
    (`lanes.forgeauth.lookup`; a user and token inside the URL come last)."""
    raw = settings.get(settings.LANE_GIT_URL) or lf.git_url
    if not raw:
        cp = repo.git("remote", "get-url", "origin", check=False)
        raw = cp.stdout.strip() if cp.returncode == 0 else None
    if not raw:
        return Forge(None)
    url, user, token = split_credentials(raw)
    cred = forgeauth.lookup(repo)
    register_secret(token)
    return Forge(url, cred.user or user, cred.token or token)
