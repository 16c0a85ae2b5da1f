"""The jails on a lane (docs/sandbox.md, "A gate's jail" and "A writer's jail"), built here on the
development box: bubblewrap's options the lane agent runs a gate's command (`gate_jail_args`) or
a writer's harness (`writer_jail_args`) with. The agent builds none: it runs what it is sent. (A
candidate's stricter jail is `lanes.base.sandboxjail`'s.)"""

from __future__ import annotations

import os
from dataclasses import dataclass

from lanes.base import settings

# Every gate's command on a lane runs in a jail of its own, a person's own gate included: the lane
# agent (standard library only) runs `<bwrap> <gate_jail_args(...)> -- COMMAND`, the arguments made
# here on the development box from the paths the lane's hello reported. It is not the candidate's
# jail (`lanes.base.sandboxjail`): a gate keeps its network, its `.env` and its environment, and
# sees the system and its toolchains as they are; what it loses is every other gate's things and
# nev's own.

#: What every lane jail starts with: its own user, PID, IPC, UTS and cgroup namespaces (so every
#: process it starts ends with it), no capabilities, the system read-only as it is, a fresh /proc
#: and a minimal /dev.
_NAMESPACES = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--die-with-parent"]
_SYSTEM = ["--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]


@dataclass(frozen=True)
class GateView:
    """A gate's paths on its lane, resolved there (`HelloAnswer`, `lanes.agent.layout`): the lane
    root, the copy (named `name`), the mirror, the gate's own scratch folder, the lane user's home
    and the NAS share (None when the lane has none)."""

    root: str
    name: str
    copy: str
    mirror: str
    tmp: str
    home: str
    shared: str | None = None
    #: the share's entries (relative to it) the gate writes (`lanes.agent.links.gate_writes`): its
    #: own results folders and ledger file, the npm cache (content-addressed: npm checks each
    #: entry's integrity as it reads it)
    share_writes: tuple[str, ...] = ()
    #: the socket of nev's store builder serving this gate from outside its jail
    #: (`lanes.agent.storeserve`); its folder (the corpora it leaves there too) read-only inside
    store_socket: str | None = None


#: The lane home's entries a gate sees, read-only: nev's installs and the lane's `nev` (a gate may
#: call nev, `--sandbox` does), the lane's environment files, and the Rust toolchain in the home
#: when it is there. Everything else of the home (`~/.ssh`, Dagu's home and keys, the services'
#: state, the agent's cache, writers' briefs) is an empty folder.
GATE_HOME_READ = (
    ".local/share/nev",
    ".local/bin",
    ".lane-env",
    ".lane-shared-env",
    ".lane-model-env",
    ".cargo",
    ".rustup",
)


def gate_jail_args(view: GateView) -> list[str]:
    """bubblewrap's options (no program, no `--`) for one gate's command: new user, PID, IPC, UTS
    and cgroup namespaces, so every process the command starts ends with it; capabilities
    dropped; the system read-only as it is; a fresh /proc showing only its processes, a minimal
    /dev with its own /dev/shm; the lane root an empty folder but for its own copy (written) and
    the mirror (read-only, for git in the copy: its objects and refs; the copy's own worktree
    entry, its index and HEAD, written; the agent never trusts it, `lanes.agent.git`); /tmp the
    gate's own folder in its payload (`<root>/.payload-<name>/tmp`, removed with it); the home
    empty but for GATE_HOME_READ (read-only); the share read-only but for its `share_writes`:
    every ledger, archive and corpus digest, and the store nev's builders write (`corpora/`,
    `ground-truth/`, `suites/`), which the gate asks nev's store builder outside its jail to fill
    (`store_socket`, its folder read-only, named by `NEV_STORE_SOCKET`).
    The network and the environment are the gate's own."""
    args = [
        *_NAMESPACES,
        "--new-session",
        *_SYSTEM,
        "--tmpfs",
        "/dev/shm",
        # /tmp first: a lane root or home under /tmp (a test's) is mounted on top of it
        "--bind",
        view.tmp,
        "/tmp",
        "--tmpfs",
        view.home,
    ]
    for entry in GATE_HOME_READ:
        p = f"{view.home.rstrip('/')}/{entry}"
        args += ["--ro-bind-try", p, p]
    entry = f"{view.mirror}/worktrees/{view.name}"
    args += [
        "--tmpfs",
        view.root,
        "--bind",
        view.copy,
        view.copy,
        "--ro-bind",
        view.mirror,
        view.mirror,
        "--bind-try",
        entry,
        entry,
    ]
    if view.shared:
        args += ["--ro-bind", view.shared, view.shared]
        for entry in view.share_writes:
            p = f"{view.shared.rstrip('/')}/{entry}"
            args += ["--bind-try", p, p]
    if view.store_socket:
        folder = os.path.dirname(view.store_socket)
        args += [
            "--ro-bind-try",
            folder,
            folder,
            "--setenv",
            settings.STORE_SOCKET.name,
            view.store_socket,
        ]
    args += ["--setenv", settings.IN_GATE.name, "1", "--chdir", view.copy]
    return args


@dataclass(frozen=True)
class WriterView:
    """A writer's paths on its lane, resolved there (`HelloAnswer`): the lane root, its copy, the
    mirror, the lane user's home, the share (None: none), and what it reads besides its copy: the
    harness checkout and its own briefs folder."""

    root: str
    copy: str
    mirror: str
    home: str
    shared: str | None = None
    reads: tuple[str, ...] = ()


def writer_jail_args(view: WriterView) -> list[str]:
    """bubblewrap's options (no program, no `--`) for a writer's harness: the lane jail's
    namespaces and read-only system (a writer outlives its start, so no new session of its own:
    its wrapper has one); its own /tmp; the lane home, the lane root (every other copy) and the
    share hidden under empty folders, so the lane's Dagu credentials, `~/.ssh`, the gateway key
    files, other copies and the corpus store are not there; its own copy and the mirror (its
    commits' objects and refs) written; `reads` read-only. A writer calls models, so it keeps the
    network."""
    args = [*_NAMESPACES, *_SYSTEM, "--tmpfs", "/tmp"]
    for hidden in (view.home, view.shared, view.root):
        if hidden:
            args += ["--tmpfs", hidden]
    for own in (view.mirror, view.copy):
        args += ["--bind", own, own]
    for r in view.reads:
        args += ["--ro-bind-try", r, r]
    return [*args, "--chdir", view.copy]
