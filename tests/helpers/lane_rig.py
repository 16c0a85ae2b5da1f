"""The lane set-up the gate tests run against: a real sshd, a real git smart-HTTP forge with
basic auth and an access log, a NAS folder, and a lanes file.

`on_box(info)` uses the rig-in-a-box: lane 0 (a namespace with sshd as user `lane`), a fresh
repository on the nginx forge (its access log tells who fetched) and the NAS.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import lane_helpers as h


@dataclass
class LaneRig:
    tmp: Path
    lane_root: Path            # the lane root as seen from here (the dev box)
    nas: Path                  # the NAS share as seen from here
    env: dict[str, str]        # NEV_* settings pointing nev at the lane
    clone_url: str             # forge URL a dev worktree clones from (no credential: askpass)
    push_env: dict[str, str]
    fetch_count: Callable[[], int]
    lane_cmdlines: Callable[[], list[tuple[int, str]]]
    cut_connections: Callable[[], None]
    lane_git: Callable[[str, str], str] = lambda name, script: ""
    tag: str = ""              # suffix of every worktree name, so a kept box's copies never clash
    lane_home: Path | None = None
    shared_worktree: Path = field(init=False)
    stop: Callable[[], None] = lambda: None


def _netns_of(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def on_box(info, tmp: Path) -> LaneRig:
    """The rig-in-a-box's lane 0, its forge and its NAS."""
    import secrets

    from rig.box.forge import create_repo
    from rig.box.netns import lane_pid, run_in

    lane = info.lanes[0]
    tag = "-" + secrets.token_hex(2)
    sshd_pid = lane_pid(info, lane.name)      # a netns lane's sshd, an LXC guest's init
    assert sshd_pid is not None
    ns = _netns_of(sshd_pid)

    def lane_cmdlines() -> list[tuple[int, str]]:
        return [(pid, cmd) for pid, cmd in h.cmdlines() if _netns_of(pid) == ns]

    def cut() -> None:
        for pid, cmd in lane_cmdlines():
            # sessions only: the guest's sshd itself (its title says "[listener]") stays
            if cmd.startswith("sshd:") and "[listener]" not in cmd and pid != sshd_pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    repo = f"gate{tag}.git"

    def fetches() -> int:
        log = info.forge_access_log.read_text() if info.forge_access_log.exists() else ""
        return sum(1 for line in log.splitlines()
                   if line.startswith(lane.addr + " ") and "service=git-upload-pack" in line
                   and f"/{repo}/" in line and '" 200 ' in line)

    askpass = {"GIT_ASKPASS": str(info.forge_askpass)}
    url = create_repo(info, f"gate{tag}.git")          # the rig address: what the lanes fetch
    local = info.dev_url(url)                           # the dev box's forward to the same repo
    _, seed = h.make_forge(tmp / "seed")
    h.git(seed, "push", "-q", local, "main", env=askpass)
    lanes = tmp / "lanes.json"
    data = json.loads(info.lanes_file.read_text())
    data["lanes"] = data["lanes"][:1]
    data["git_url"] = url
    lanes.write_text(json.dumps(data))
    env = dict(info.env, NEV_LANES_FILE=str(lanes), NEV_LANE_GIT_URL=url, NEV_FORGE_URL=local)

    def lane_git(name: str, script: str) -> str:
        """A shell script run as the lane user in its copy `name` (paths as the lane sees them)."""
        cp = run_in(info, lane.name, ["runuser", "-u", "lane", "--", "sh", "-c",
                                     f"cd {lane.root}/{name} && {script}"])
        assert cp.returncode == 0, cp.stderr
        return cp.stdout.strip()

    return LaneRig(tmp=tmp, lane_root=lane.host_root, nas=info.nas, env=env, clone_url=local,
                   push_env=askpass, fetch_count=fetches, lane_cmdlines=lane_cmdlines,
                   cut_connections=cut, lane_git=lane_git, tag=tag, lane_home=lane.host_home)
