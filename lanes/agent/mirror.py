"""The lane's bare mirror and its fetch policy: a gate's commit from the bundle, the forge, or another bundle.

| the mirror | what happens |
|---|---|
| last fetch older than the maximum age, or never fetched (and a forge URL known) | fetch first |
| the bundle verifies and unbundles to a commit the mirror then has | done |
| no bundle was needed and the mirror has the commit | done |
| otherwise, not fetched yet in this gate | fetch, then try again |
| otherwise | ask the development box for a bundle over the mirror's own tips (NEED_BUNDLE) |

The forge credential reaches git through the credential helper's environment, never argv.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable

from lanes.agent import layout
from lanes.agent.errors import Refused
from lanes.agent.git import credential_env, git, git_argv, git_env, repo_env
from lanes.agent.messages import Cred
from lanes.agent.output import Masker
from lanes.agent.procs import Child


def fetch_reason(git_url: str | None, age: float | None, max_age: float) -> str | None:
    """Why the mirror fetches before anything else (pure); None when it need not."""
    if not git_url:
        return None
    if age is None:
        return "never fetched"
    return f"last fetch {age:.0f} s ago" if age > max_age else None


class MirrorLock:
    """Serialises ref updates in the shared mirror across gates of different copies (and its
    making)."""

    def __init__(self, root: layout.Root) -> None:
        self.path = root.mirror_lock

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


# The mirror's config as nev makes it (`git init --bare`, gc off): nothing else belongs there. A
# gate that wrote a filter, a hook path, an include or a URL rewrite into it finds it rewritten.
MIRROR_CONFIG = b"""[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = true
[gc]
\tauto = 0
"""


class Mirror:
    def __init__(self, root: layout.Root, git_url: str | None, cred: Cred | None,
                 max_age: float, say: Callable[[str], None], child: Child) -> None:
        self.root = root
        self.path = root.mirror
        self.git_url = git_url
        self.cred = cred
        self.max_age = max_age
        self.say = say
        self.child = child
        self.fetched = False

    def tips(self) -> list[str]:
        out = git(["for-each-ref", "--format=%(objectname)"], cwd=self.path, check=False).stdout
        return sorted(set(out.decode().split()))

    def fetch_age(self) -> float | None:
        try:
            return max(0.0, time.time() - os.stat(self.root.last_fetch).st_mtime)
        except OSError:
            return None

    def ensure(self) -> None:
        """The mirror made once, under the mirror's lock: two gates on a new lane would otherwise
        both `git init` it at once (one fails on a config or template file the other holds). It is
        made aside and renamed into place, so a gate killed midway leaves no half-made mirror."""
        if os.path.isdir(self.path):
            return
        with MirrorLock(self.root):
            if os.path.isdir(self.path):
                return
            aside = self.root.mirror_init     # only the lock's holder writes it: a leftover is dead
            shutil.rmtree(aside, ignore_errors=True)
            git(["init", "-q", "--bare", aside])
            git(["config", "gc.auto", "0"], cwd=aside)
            os.rename(aside, self.path)

    def guard_config(self) -> None:
        """The mirror's config back to MIRROR_CONFIG (one line said) when anything changed it;
        a link or a folder in its place goes. Under the mirror's lock."""
        path = os.path.join(self.path, "config")
        try:
            with open(path, "rb") as f:
                if not os.path.islink(path) and f.read(len(MIRROR_CONFIG) + 1) == MIRROR_CONFIG:
                    return
        except OSError:
            pass
        with MirrorLock(self.root):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            tmp = f"{path}.nev-{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(MIRROR_CONFIG)
            os.replace(tmp, path)
        self.say(f"the mirror's config {path} was changed outside nev; rewritten as nev makes it")

    def fetch(self, why: str) -> bool:
        """Fetch every branch and tag from the forge, once per gate; False when it failed."""
        if self.fetched or not self.git_url:
            return False
        self.fetched = True
        self.say(f"fetching the mirror from the forge ({why})")
        t0 = time.monotonic()
        cred = credential_env(self.cred.user if self.cred else None,
                              self.cred.password if self.cred else None)
        env = git_env({**repo_env(self.path), **cred})
        with MirrorLock(self.root):
            argv = git_argv(["fetch", "-q", "--no-tags", self.git_url,
                             "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"])
            status, err = self.child.run_tool(argv, cwd=self.path, env=env)
        if status != 0:
            lines = err.decode(errors="replace").strip().splitlines()
            last = (lines[-1] if lines else f"exit {status}").encode()
            masker = Masker([self.cred.password if self.cred else ""])
            self.say("forge fetch failed: " + masker(last).decode())
            return False
        with open(self.root.last_fetch, "w") as f:
            f.write(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
        self.say(f"fetched in {time.monotonic() - t0:.1f} s")
        return True

    def has_commit(self, commit: str) -> bool:
        return git(["cat-file", "-e", commit + "^{commit}"], cwd=self.path, check=False).returncode == 0

    def take_bundle(self, path: str, ref: str, commit: str) -> bool:
        """Unbundle into `ref`; False when its prerequisites are missing."""
        if git(["bundle", "verify", "-q", path], cwd=self.path, check=False).returncode != 0:
            return False
        with MirrorLock(self.root):
            git(["fetch", "-q", "--no-tags", path, f"+HEAD:{ref}"], cwd=self.path)
        return self.has_commit(commit)

    def supply(self, commit: str, ref: str, bundle: str, have_bundle: bool,
               ask: Callable[[list[str]], int]) -> None:
        """Make sure the mirror holds `commit` at `ref` (see the table above). `ask` sends the
        mirror's tips for another bundle (written to `bundle`) and returns its size."""
        self.ensure()
        self.guard_config()
        why = fetch_reason(self.git_url, self.fetch_age(), self.max_age)
        if why:
            self.fetch(why)
        for attempt in range(3):
            if have_bundle and self.take_bundle(bundle, ref, commit):
                return
            if not have_bundle and self.has_commit(commit):
                git(["update-ref", ref, commit], cwd=self.path)
                return
            if self.fetch("the bundle cannot supply the commit"):
                continue
            if attempt == 2:
                break
            have_bundle = ask(self.tips()) > 0
        raise Refused(f"the lane cannot get commit {commit[:12]}: not in the bundle, the mirror or the forge")
