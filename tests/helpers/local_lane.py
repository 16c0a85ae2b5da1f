"""A lane on this machine, reached through a stand-in `ssh` on PATH (no sshd, no box): the stand-in
takes the gate's real argv, checks its shape and runs the command after `--` with `sh -c` as the
lane user would, with a home of the lane's own. The lane agent, the bootstrap, the payload, the
mirror and the copy are all the real ones; only the transport is local.

`LocalLane.env()` is the environment of a `nev lane run` that reaches it; `LocalLane.nev(...)`
runs the CLI in a subprocess (stderr checked for tracebacks by the tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The stand-in: everything before `--` is the client's options (ignored, as a real client takes
# them), the last argument the command. A marker file records every start (tests count them).
FAKE_SSH = """#!{python}
import os, sys
a = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write("started\\n")
if "--" not in a:
    sys.stderr.write("fake ssh: no -- in argv\\n")
    sys.exit(255)
cmd = a[a.index("--") + 1]
env = dict(os.environ)
env["HOME"] = {home!r}
for k in list(env):
    if k.startswith(("NEV_", "GENERA_")):
        del env[k]
os.execve("/bin/sh", ["sh", "-c", cmd], env)
"""


class LocalLane:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.root = tmp / "lane-root"
        self.home = tmp / "lane-home"
        self.bin = tmp / "fakebin"
        self.cache = tmp / "cache"
        self.starts = tmp / "ssh-starts"
        for d in (self.home, self.bin, self.cache):
            d.mkdir(parents=True, exist_ok=True)
        ssh = self.bin / "ssh"
        ssh.write_text(FAKE_SSH.format(python=sys.executable, home=str(self.home), log=str(self.starts)))
        ssh.chmod(0o755)
        self.known_hosts = tmp / "known_hosts"
        self.known_hosts.write_text("")
        self.lanes_file = tmp / "lanes.json"
        self.lanes_file.write_text(json.dumps({"lanes": [{"ssh": "lane@127.0.0.1:22", "root": str(self.root)}]}))

    def install_nev(self) -> None:
        """`nev` (this checkout's) where a lane's install puts it, `~/.local/bin/nev`: the one place
        of the lane's home a gate's jail shows it (read-only)."""
        b = self.home / ".local" / "bin"
        b.mkdir(parents=True, exist_ok=True)
        (b / "nev").write_text(f'#!/bin/sh\nexec {sys.executable} -m rig.cli "$@"\n')
        (b / "nev").chmod(0o755)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "XDG_"))}
        path = f"{self.home / '.local' / 'bin'}{os.pathsep}{self.bin}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
        env.update({"PATH": path,
                    "PYTHONPATH": str(ROOT), "NEV_LANES_FILE": str(self.lanes_file),
                    "NEV_KNOWN_HOSTS": str(self.known_hosts), "XDG_CACHE_HOME": str(self.cache),
                    "NEV_LANE_SHARED": str(self.tmp / "no-share"), "NEV_LANE_MIN_FREE_GB": "0"})
        env.update(extra)
        return env

    def nev(self, args: list[str], cwd: Path | None = None, timeout: float = 120,
            **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd or self.tmp, env=self.env(**extra),
                              capture_output=True, text=True, timeout=timeout)

    def copy(self, name: str) -> Path:
        """The lane copy of worktree folder `name` (whatever its key is: the one copy whose name
        starts with `name`)."""
        found = [p for p in self.root.iterdir() if p.name == name or p.name.startswith(name + "-")] \
            if self.root.is_dir() else []
        assert len(found) == 1, f"copies of {name}: {found}"
        return found[0]


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def make_repo(path: Path) -> Path:
    """A repository at `path` with one commit (README.md)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("hello\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path
