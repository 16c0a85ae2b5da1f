"""Git on the lane (the agent's one way to run it) and nev's one git credential helper.

The helper answers from NEV_GIT_USER / NEV_GIT_PASSWORD in git's environment, so a token is in
no argv, no URL and no git config file; the development box's forge commands and the job steps
use it too (`lanes.forgeauth`, `jobs.lane_main`).
"""

from __future__ import annotations

import os
import subprocess

from lanes.agent.errors import Refused

CREDENTIAL_HELPER = ("!f() { test \"$1\" = get || exit 0; echo \"username=${NEV_GIT_USER:-nev}\"; "
                     "echo \"password=${NEV_GIT_PASSWORD}\"; }; f")


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1"})
    env.setdefault("GIT_AUTHOR_NAME", "nev")
    env.setdefault("GIT_AUTHOR_EMAIL", "nev@lane")
    env.setdefault("GIT_COMMITTER_NAME", "nev")
    env.setdefault("GIT_COMMITTER_EMAIL", "nev@lane")
    if extra:
        env.update(extra)
    return env


def git(args: list[str], cwd: str | None = None, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """`git ARGS` in `cwd`; a failure (with `check`) is one Refused line: git's last word."""
    cp = subprocess.run(["git", *args], cwd=cwd, env=git_env(env), capture_output=True)
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
