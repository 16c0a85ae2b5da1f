"""The forge as the dev box sees it: job/* and result/* branches, with the token kept out of argv.

Two URLs name the same forge repository:

- `url`, where this box pushes and lists job and result branches: NEV_FORGE_URL (on the real
  rig, this box's own port forward, 127.0.0.1:PORT), else the lanes' URL (a flat rig);
- `lane_url`, where the lanes fetch job/<name> and publish result/<name>: NEV_LANE_GIT_URL, else
  the lanes file's `git_url` (the rig address, which this box may not reach). It goes to the
  lane as the job workflow's FORGE parameter.

Neither may carry a credential (it would land in argv, in git's messages and, for the lanes'
URL, in Dagu's run records). The token comes from `lanes.forgeauth.lookup` (environment, then
NEV_FORGE_TOKEN_FILE, then the checkout's or primary checkout's `.env`) and reaches git only
through the credential helper in git's environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from lanes import forgeauth, lanesfile
from lanes.base import settings
from lanes.base.errors import ConfigError
from lanes.base.gitrun import GitError, Repo
from lanes.forgeauth import Credential


@dataclass(frozen=True)
class Forge:
    url: str                 # as this box reaches it
    lane_url: str | None     # as the lanes reach it (None: not configured)
    cred: Credential

    @property
    def env(self) -> dict[str, str]:
        return self.cred.git_env()

    def for_lanes(self) -> str:
        """The lanes' URL, which a job's steps fetch and publish at."""
        if not self.lane_url:
            raise ConfigError("the lanes' forge URL is not set: set NEV_LANE_GIT_URL (or git_url in the lanes "
                              "file) to the forge repository as the lanes reach it, e.g. "
                              "http://198.18.0.5/git/engine.git")
        return self.lane_url

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

    def _tips(self, repo: Repo, branches: list[str]) -> dict[str, str]:
        have: dict[str, str] = {}
        for prefix in {b.split("/", 1)[0] for b in branches}:
            have |= {f"{prefix}/{n}": sha for n, sha in self.ls(repo, prefix).items()}
        return {b: have[b] for b in branches if b in have}

    def delete(self, repo: Repo, *branches: str) -> None:
        have = self._tips(repo, list(branches))
        if have:
            self.push(repo, *(f":refs/heads/{b}" for b in have))

    def delete_if_at(self, repo: Repo, expected: Mapping[str, str | None]) -> list[str]:
        """Delete each branch that is still at its expected tip, by a compare-and-swap on the forge
        (`--force-with-lease`): one that moved since (a job submitted again under the same name
        while its earlier result landed) or whose tip is not known is kept. The branches kept."""
        have = self._tips(repo, list(expected))
        go = {b: sha for b, sha in have.items() if expected[b] and expected[b] == sha}
        kept = [b for b in have if b not in go]
        if go:
            leases = [f"--force-with-lease=refs/heads/{b}:{sha}" for b, sha in go.items()]
            try:
                repo.git("push", "-q", "--porcelain", *leases, self.url, *(f":refs/heads/{b}" for b in go),
                         env=self.env, timeout=600)
            except GitError:    # one moved between the listing and the push: it is still there
                now = self._tips(repo, list(go))
                kept += [b for b in go if b in now]
        return kept


def _no_credential(url: str, where: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise ConfigError(f"{where} carries a credential; drop it from the URL and put the token in "
                          "the file NEV_FORGE_TOKEN_FILE (mode 600) or the primary checkout's .env")
    return url


def lane_url_from_settings(environ: Mapping[str, str]) -> str | None:
    """The lanes' URL: NEV_LANE_GIT_URL, else the lanes file's `git_url`; None when neither is set."""
    url = settings.get(settings.LANE_GIT_URL, environ)
    if url:
        return _no_credential(url, "NEV_LANE_GIT_URL")
    path = settings.get_path(settings.LANES_FILE, environ)
    if path is not None and path.is_file():
        git_url = lanesfile.load(path).git_url
        if git_url:
            return _no_credential(git_url, f"git_url in {path}")
    return None


def from_settings(environ: Mapping[str, str] | None = None, repo: Repo | None = None) -> Forge:
    """The forge of `repo` (whose `.env` files may hold the token) under the settings in `environ`."""
    env_in = os.environ if environ is None else environ
    lane_url = lane_url_from_settings(env_in)
    own = settings.get(settings.FORGE_URL, env_in)
    url = _no_credential(own, "NEV_FORGE_URL") if own else lane_url
    if not url:
        raise ConfigError("no forge URL: set NEV_FORGE_URL to the forge repository as this box reaches it "
                          "(its port forward) and NEV_LANE_GIT_URL to it as the lanes reach it "
                          "(on a flat rig such as the box, NEV_LANE_GIT_URL alone: `nev box env` sets it)")
    return Forge(url, lane_url, forgeauth.lookup(repo, env_in))
