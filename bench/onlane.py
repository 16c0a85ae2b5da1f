"""Model batches run only on a lane. One function decides: already on a lane (`NEV_ON_LANE`)
-> run here; otherwise re-run the same command there through the lane gate, lane-only, with
the NEV_* settings passed along (credentials, lane settings and this box's own addresses
excepted) and the results pulled back; no lane -> exit 3, nothing run here."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from lanes.base import settings
from lanes.base.mask import is_secret_name

#: lane settings: the lane sets its own
_LANE_ONLY = {"NEV_ON_LANE", "NEV_LANES_FILE", "NEV_KNOWN_HOSTS", "NEV_SSH_KEY", "NEV_LANE_SSH",
              "NEV_LANE_SHARED", "NEV_LANE_GIT_URL", "NEV_LANE_STRICT", "NEV_LANE_KEEP_ENV",
              "NEV_LANE_FETCH_MAX_AGE", "NEV_LANE_MIN_FREE_GB"}
#: lane-named settings the dev box sets for the lane: they travel (the lane's own
#: ~/.lane-model-env still wins over NEV_LANE_MODEL_URL there, `bench.gateway.url_from_settings`)
_TRAVELS = {"NEV_LANE_MODEL_URL"}
#: addresses as this box reaches them (its port forwards): wrong on a lane, so they stay here
_DEV_BOX_ONLY = {"NEV_MODEL_URL", "NEV_FORGE_URL"}
#: credentials (and files of credentials): the gate's .env carries them, never the environment
#: this machine's own sandbox choices and the paths nev sets for a verify in its jail: never a lane's
_HERE_ONLY = {"NEV_SANDBOX_READ", "NEV_SANDBOX_WRITE", "NEV_SANDBOX_ENV", "NEV_TRUTH_SOCKET", "NEV_TRUTH_STAGING",
              "NEV_SUITE_STORE"}   # a suite store here is a folder of this machine
_CREDENTIALS = {"NEV_MODEL_API_KEY", "NEV_MODEL_KEY_FILE", "NEV_FORGE_TOKEN", "NEV_FORGE_TOKEN_FILE",
                "NEV_FORGE_USER"}


def _canonical(name: str) -> str:
    return "NEV_" + name.removeprefix("GENERA_") if name.startswith("GENERA_") else name


def forwarded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The NEV_*/GENERA_* settings that travel with a batch to the lane."""
    out = {}
    secret = {s.name for s in settings.all_settings() if s.secret}
    for k, v in environ.items():
        if not (k.startswith("NEV_") or k.startswith("GENERA_")):
            continue
        c = _canonical(k)
        if c in _TRAVELS:
            out[k] = v
            continue
        if c in _LANE_ONLY or c in _DEV_BOX_ONLY or c in _HERE_ONLY or c in _CREDENTIALS or c in secret or c.startswith("NEV_LANE_") \
                or c.startswith("NEV_BOX_") or is_secret_name(c) or c.endswith("_KEY_FILE") or c.endswith("_TOKEN_FILE"):
            continue
        out[k] = v
    return out


def on_lane(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return bool(settings.get(settings.ON_LANE, env))


#: where the declared aliases land in the lane copy when they are a file of this machine's
DECLARED_ON_LANE = ".nev-sent/folknet.json"


def declared_files(worktree: Path, env: dict[str, str]) -> dict[str, bytes]:
    """The declared aliases (NEV_FOLKNET_FILE) travel with the run when they are a file of this
    machine outside the worktree (a lane cannot read this machine's files): sent into the lane
    copy, and the setting pointed at that copy there. Changes `env` to match."""
    declared = settings.path_under(settings.FOLKNET_FILE, worktree.resolve())
    if worktree.resolve() in declared.resolve().parents or not declared.is_file():
        return {}
    env[settings.FOLKNET_FILE.name] = DECLARED_ON_LANE
    env.pop("GENERA_FOLKNET_FILE", None)
    return {DECLARED_ON_LANE: declared.read_bytes()}


def run_on_lane(worktree: Path, command: Sequence[str], pull: Sequence[str] = (),
                lane_index: int | None = None) -> int:
    """Re-run `command` on a lane (lane `lane_index`, else the first that answers) through the
    gate (lane-only); NoLaneError (exit 3) without one."""
    from lanes import gate  # the SSH stack, loaded only when a batch goes to a lane

    env = forwarded_env(os.environ)
    files = declared_files(worktree, env)
    status: int = gate.run(worktree, list(command), lane_index=lane_index, lane_only=True,
                           pull=list(pull), extra_env=env, files=files)
    return status
