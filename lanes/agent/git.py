"""Git on the lane (the agent's one way to run it) and nev's one git credential helper.

The helper answers from NEV_GIT_USER / NEV_GIT_PASSWORD in git's environment, so a token is in
no argv, no URL and no git config file; the development box's forge commands and the job steps
use it too (`lanes.forgeauth`, `jobs.lane_main`).

The agent never runs a copy's or the mirror's code (docs/lanes.md, "The agent's git"): every git it
runs has hooks, `core.fsmonitor`, filters, external diff and textconv, pager, editor, askpass, ssh
and proxy commands turned off on its command line (`HARDEN`, which outranks every config file),
the global and system config ignored, only the file, http and https protocols allowed, and its
repository named outright (`repo_env`): the mirror by its own path, a copy by the mirror's
worktree entry whose `gitdir` names that copy, never by following a `.git` file a gate could have
rewritten. The mirror's own config is nev's alone (`lanes.agent.mirror.Mirror.guard_config`), so a
driver a gate defined there is gone before any git reads it.
"""

from __future__ import annotations

import os
import subprocess

from lanes.agent.errors import Refused

CREDENTIAL_HELPER = ("!f() { test \"$1\" = get || exit 0; echo \"username=${NEV_GIT_USER:-nev}\"; "
                     "echo \"password=${NEV_GIT_PASSWORD}\"; }; f")


# Every config-driven command off, on the command line (it outranks the repository's, the
# worktree's and any included config). A filter, diff or merge driver needs a config entry naming
# its command: global and system config are not read and the mirror's config is nev's own.
HARDEN = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.pager=cat",
          "-c", "core.editor=true", "-c", "sequence.editor=true", "-c", "core.askPass=",
          "-c", "core.sshCommand=false", "-c", "core.gitProxy=",
          "-c", "core.alternateRefsCommand=", "-c", "commit.gpgSign=false",
          "-c", "tag.gpgSign=false",
          "-c", "protocol.allow=never", "-c", "protocol.file.allow=always",
          "-c", "protocol.http.allow=always", "-c", "protocol.https.allow=always",
          "-c", "core.untrackedCache=false")
# Variables of the agent's own environment that would point git at another repository or run a
# command of their own.
DROPPED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
           "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_EXTERNAL_DIFF", "GIT_SSH", "GIT_SSH_COMMAND",
           "GIT_ASKPASS", "SSH_ASKPASS", "GIT_PROXY_COMMAND", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR",
           "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_EXEC_PATH", "GIT_TEMPLATE_DIR",
           "GIT_CEILING_DIRECTORIES")
MIRROR_NAMES = (".git-mirror", ".git-mirror.init")   # `lanes.agent.layout`'s MIRROR and its making


def git_argv(args: list[str]) -> list[str]:
    """`git` with every config-driven command off, then `args`."""
    return ["git", *HARDEN, *args]


def worktree_entry(mirror: str, copy: str) -> str | None:
    """The mirror's worktree entry (`<mirror>/worktrees/<x>`, a real folder) whose `gitdir` file
    names `<copy>/.git`; None when there is none, or more than one (a gate's jail writes its own
    entry: one that names another copy makes both copies be made anew). What git itself would
    follow from the copy's `.git` file, found from the mirror's side, so a rewritten `.git` file
    leads nowhere."""
    want = os.path.join(os.path.realpath(copy), ".git")
    folder = os.path.join(mirror, "worktrees")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    found = []
    for n in names:
        entry = os.path.join(folder, n)
        if os.path.islink(entry) or not os.path.isdir(entry):
            continue
        try:
            with open(os.path.join(entry, "gitdir"), "rb") as f:
                named = f.read(4096).decode(errors="surrogateescape").strip()
        except OSError:
            continue
        if named and os.path.join(os.path.realpath(os.path.dirname(named)), ".git") == want:
            found.append(entry)
    return found[0] if len(found) == 1 else None


def repo_env(cwd: str | None) -> dict[str, str]:
    """The repository of a git run in `cwd`, named outright: the mirror (or the one being made)
    by its path; a copy (a folder beside the mirror) by the mirror's worktree entry for it, the
    mirror as its common dir; any other checkout (the writer's harness) by its `.git` folder.
    Refused for a copy the mirror has no entry for (`lanes.agent.copy.Copy.prepare` rebuilds it)."""
    if cwd is None:
        return {}
    real = os.path.realpath(cwd)
    if os.path.basename(real) in MIRROR_NAMES:
        return {"GIT_DIR": real}
    mirror = os.path.join(os.path.dirname(real), MIRROR_NAMES[0])
    if os.path.isdir(mirror) and not os.path.islink(mirror):
        entry = worktree_entry(mirror, real)
        if entry is None:
            raise Refused(f"{real} is no worktree of the lane's mirror; a gate of it rebuilds it")
        return {"GIT_DIR": entry, "GIT_COMMON_DIR": mirror, "GIT_WORK_TREE": real}
    dot = os.path.join(real, ".git")
    if os.path.isdir(dot) and not os.path.islink(dot):
        return {"GIT_DIR": dot, "GIT_WORK_TREE": real}
    if os.path.isfile(os.path.join(real, "HEAD")):
        return {"GIT_DIR": real}
    return {"GIT_CEILING_DIRECTORIES": real}


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in DROPPED and not k.startswith("GIT_CONFIG_")}
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1", "GIT_PAGER": "cat",
                "GIT_PROTOCOL_FROM_USER": "0", "GIT_NO_REPLACE_OBJECTS": "1"})
    env.setdefault("GIT_AUTHOR_NAME", "nev")
    env.setdefault("GIT_AUTHOR_EMAIL", "nev@lane")
    env.setdefault("GIT_COMMITTER_NAME", "nev")
    env.setdefault("GIT_COMMITTER_EMAIL", "nev@lane")
    if extra:
        env.update(extra)
    return env


def git(args: list[str], cwd: str | None = None, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """`git ARGS` in `cwd` (its repository named outright: `repo_env`), every config-driven
    command off (`HARDEN`); a failure (with `check`) is one Refused line: git's last word."""
    try:
        where = repo_env(cwd)
    except Refused as e:
        if check:
            raise
        return subprocess.CompletedProcess(["git", *args], 128, b"", str(e).encode())
    cp = subprocess.run(git_argv(args), cwd=cwd, env=git_env({**where, **(env or {})}),
                        capture_output=True)
    if check and cp.returncode != 0:
        err = cp.stderr.decode(errors="replace").strip().splitlines()
        raise Refused(f"git {args[0]} failed: {err[-1] if err else 'exit ' + str(cp.returncode)}")
    return cp


def credential_env(user: str | None, password: str | None) -> dict[str, str]:
    """Git config through the environment: other credential helpers off, then CREDENTIAL_HELPER
    answering `user`/`password` from NEV_GIT_* variables (without a password: helpers off only)."""
    env = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "credential.helper", "GIT_CONFIG_VALUE_0": "",
           "GIT_CONFIG_KEY_1": "credential.helper", "GIT_CONFIG_VALUE_1": CREDENTIAL_HELPER}
    if password:
        env["NEV_GIT_USER"] = user or "nev"
        env["NEV_GIT_PASSWORD"] = password
    else:
        env["GIT_CONFIG_COUNT"] = "1"
    return env
