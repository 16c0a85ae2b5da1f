"""The forge: its two URLs, its credential, and every git command that talks to it.

Two URLs name the same forge repository:

- `url`, where this box pushes and lists job and result branches: NEV_FORGE_URL (on the real
  rig, this box's own port forward, 127.0.0.1:PORT), else the lanes' URL (a flat rig);
- `lane_url`, where the lanes fetch (a gate's lane mirror, job/<name>) and publish
  (result/<name>): NEV_LANE_GIT_URL, else the lanes file's `git_url` (the rig address, which
  this box may not reach). It goes to the lane in a gate's hello and the sweep's ref pruning,
  and as the job workflow's FORGE parameter. A gate falls back to the checkout's `origin`.

The credential rule, one for every URL: a user and token written inside a URL
(`http://user:token@host/...`) are split out of it before the URL is used anywhere, so no URL
that leaves this module carries one (not in argv, git's messages, a hello or Dagu's run records);
the token is registered with the masker. The credential used is `lanes.forgeauth.lookup`'s
(environment, then NEV_FORGE_TOKEN_FILE, then the checkout's or primary checkout's `.env`),
field by field; what the URL carried comes last. The token reaches git only through the
credential helper in git's environment (`Credential.git_env`), and a lane only inside a gate's
request or over SSH stdin (`jobs/submit.py`).
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lanes import forgeauth, lanesfile
from lanes.base import settings, sshfail
from lanes.base.errors import ConfigError, NevError
from lanes.base.exitcodes import Exit
from lanes.base.gitrun import GitError, Repo
from lanes.base.mask import register_secret
from lanes.forgeauth import Credential
from lanes.lanesfile import LanesFile


@dataclass(frozen=True)
class Forge:
    url: str | None          # as this box reaches it (None: not configured)
    lane_url: str | None     # as the lanes reach it (None: not configured)
    cred: Credential

    @property
    def env(self) -> dict[str, str]:
        return self.cred.git_env()

    def lane_cred(self) -> dict[str, str] | None:
        """The credential as a gate's request carries it to the lane (None: no token)."""
        if not self.cred.token:
            return None
        return {"user": self.cred.user or "nev", "password": self.cred.token}

    def for_lanes(self) -> str:
        """The lanes' URL, which a job's steps fetch and publish at."""
        if not self.lane_url:
            raise ConfigError("the lanes' forge URL is not set: set NEV_LANE_GIT_URL (or git_url "
                              "in the lanes file) to the forge repository as the lanes reach it, "
                              "e.g. http://198.18.0.5/git/engine.git")
        return self.lane_url

    def git(self, repo: Repo, command: str, options: Sequence[str], *refs: str,
            timeout: float = 600) -> str:
        """`git COMMAND OPTIONS URL REFS` in `repo` against the forge at `url`, the credential in
        git's environment: every git call of this class goes through here."""
        if not self.url:
            raise ConfigError("no forge URL: set NEV_FORGE_URL or NEV_LANE_GIT_URL")
        try:
            return repo.out(command, *options, self.url, *refs, env=self.env, timeout=timeout)
        except GitError as e:
            cause = sshfail.network_cause(e.stderr or e.message)
            if cause is None:
                raise
            raise NevError(f"the forge at {self.url} does not answer: {cause.text}; is its "
                           "forward up (`nev rig forward status`, `nev rig forward up`)? "
                           f"NEV_FORGE_URL names it (git {command})", Exit.UNAVAILABLE) from None

    def ls(self, repo: Repo, prefix: str) -> dict[str, str]:
        """Branch name (without `refs/heads/<prefix>/`) -> tip, of every `<prefix>/*` branch."""
        out = self.git(repo, "ls-remote", ["--heads"], f"refs/heads/{prefix}/*", timeout=120)
        tips: dict[str, str] = {}
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            name = ref.removeprefix(f"refs/heads/{prefix}/")
            if name and sha:
                tips[name] = sha
        return tips

    def fetch_results(self, repo: Repo) -> None:
        self.git(repo, "fetch", ["-q", "--no-tags", "--prune"],
                 "+refs/heads/result/*:refs/nev/results/*")

    def push(self, repo: Repo, *refspecs: str, leases: Sequence[str] = ()) -> None:
        self.git(repo, "push", ["-q", "--porcelain", *leases], *refspecs)

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
                self.push(repo, *(f":refs/heads/{b}" for b in go), leases=leases)
            except GitError:    # one moved between the listing and the push: it is still there
                now = self._tips(repo, list(go))
                kept += [b for b in go if b in now]
        return kept


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """(url without user:token, user, token)."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme or "@" not in parts.netloc:
        return url, None, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, token = userinfo.partition(":")
    clean = urllib.parse.urlunsplit((parts.scheme, hostport, parts.path, parts.query,
                                     parts.fragment))
    return clean, urllib.parse.unquote(user) or None, urllib.parse.unquote(token) or None


@dataclass(frozen=True)
class _Url:
    """A URL with what it carried split out (the module's one credential rule)."""
    url: str
    user: str | None = None
    token: str | None = None

    @classmethod
    def of(cls, raw: str) -> _Url:
        url, user, token = split_credentials(raw)
        register_secret(token)
        return cls(url, user, token)


def _credential(repo: Repo | None, environ: Mapping[str, str] | None, *urls: _Url | None
                ) -> Credential:
    """`lanes.forgeauth.lookup`'s credential, field by field; a URL's user and token last."""
    cred = forgeauth.lookup(repo, environ)
    user = cred.user or next((u.user for u in urls if u and u.user), None)
    if cred.token:
        return Credential(user, cred.token, cred.source)
    carried = next((u for u in urls if u and u.token), None)
    if carried is None:
        return Credential(user, None, "")
    return Credential(user, carried.token, "the forge URL")


def forge_for(repo: Repo, lf: LanesFile) -> Forge:
    """The forge a gate's lane mirror fetches from (NEV_LANE_GIT_URL, the lanes file `lf`'s
    `git_url`, else the repository's `origin`), as this box and the lanes reach it alike."""
    raw = settings.get(settings.LANE_GIT_URL) or lf.git_url
    if not raw:
        cp = repo.git("remote", "get-url", "origin", check=False)
        raw = cp.stdout.strip() if cp.returncode == 0 else None
    if not raw:
        return Forge(None, None, Credential(None))
    at = _Url.of(raw)
    return Forge(at.url, at.url, _credential(repo, None, at))


def _lane_url(environ: Mapping[str, str]) -> _Url | None:
    url = settings.get(settings.LANE_GIT_URL, environ)
    if url:
        return _Url.of(url)
    path = settings.get_path(settings.LANES_FILE, environ)
    if path is not None and path.is_file():
        git_url = lanesfile.load(path).git_url
        if git_url:
            return _Url.of(git_url)
    return None


def lane_url_from_settings(environ: Mapping[str, str]) -> str | None:
    """The lanes' URL: NEV_LANE_GIT_URL, else the lanes file's `git_url`; None when neither is
    set."""
    at = _lane_url(environ)
    return at.url if at else None


def from_settings(environ: Mapping[str, str] | None = None, repo: Repo | None = None) -> Forge:
    """The forge of `repo` (whose `.env` files may hold the token) under the settings in
    `environ`."""
    env_in = os.environ if environ is None else environ
    lane = _lane_url(env_in)
    own_raw = settings.get(settings.FORGE_URL, env_in)
    own = _Url.of(own_raw) if own_raw else lane
    if own is None:
        raise ConfigError("no forge URL: set NEV_FORGE_URL to the forge repository as this box "
                          "reaches it (its port forward) and NEV_LANE_GIT_URL to it as the lanes "
                          "reach it (on a flat rig such as the box, NEV_LANE_GIT_URL alone: `nev "
                          "box env` sets it)")
    return Forge(own.url, lane.url if lane else None, _credential(repo, env_in, own, lane))
