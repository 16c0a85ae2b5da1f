"""The gateway host: the real LiteLLM proxy, one alias per pool, a master key, and per-key
model allowlists without a database (custom_auth + the common checks, see RIGBOX.md).

Keys live in mode-600 files; the proxy gets the master key through its environment and reads
only SHA-256 digests of the per-key secrets, so no key is on a command line or in its config.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shlex
import sys
from pathlib import Path

import yaml

from lanes.base.errors import NevError
from rig.box import plan
from rig.box.forge import write_secret

AUTH_MODULE = "nev_box_auth"
SPEND_MODULE = "nev_box_spend"

# Loaded by LiteLLM as a success callback: after each call, the tokens LiteLLM counted (its own
# `usage`) are added to the calling key's total in the spend file, by the key's digest (LiteLLM's
# `user_api_key_hash` is the SHA-256 the keys file names). The file outlives a restart; the key
# check refuses a key whose total reached its `cap_tokens`.
SPEND_SOURCE = '''"""Per-key spend of the nev box gateway (written by nev box): tokens by key."""
import fcntl
import json
import os

from litellm.integrations.custom_logger import CustomLogger

_PATH = os.environ["NEV_BOX_GATEWAY_SPEND"]


def add(digest, tokens):
    fd = os.open(_PATH + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            with open(_PATH) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        data[digest] = int(data.get(digest) or 0) + int(tokens)
        with open(_PATH + ".tmp", "w") as f:
            json.dump(data, f)
        os.replace(_PATH + ".tmp", _PATH)
    finally:
        os.close(fd)


class Spend(CustomLogger):
    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        meta = (kwargs.get("litellm_params") or {}).get("metadata") or {}
        digest = meta.get("user_api_key_hash") or ""
        usage = getattr(response_obj, "usage", None)
        tokens = getattr(usage, "total_tokens", 0) or 0
        if digest and tokens:
            add(digest, tokens)


handler = Spend()
'''

# Loaded by LiteLLM from the config's folder. A key is accepted when its SHA-256 is listed in
# the keys file; it may use only its aliases (403 key_model_access_denied otherwise, from the
# proxy's own common checks). The master key is the proxy admin.
AUTH_SOURCE = '''"""Database-free key check for the nev box gateway (written by nev box).

The keys file is read again whenever it changes (a job's key is added at submit and removed when
the job ends, jobs/jobkeys.py); an entry past its `expires` (seconds since the epoch) is refused,
and so is one allowed no alias, and one whose `cap_tokens` its spend has reached (the spend file
the success callback `nev_box_spend` keeps): 400 `budget_exceeded`, whoever the caller is."""
import hashlib
import hmac
import json
import os
import time

from fastapi import HTTPException
from litellm.proxy._types import LitellmUserRoles, ProxyException, UserAPIKeyAuth

_PATH = os.environ["NEV_BOX_GATEWAY_KEYS"]
_SPEND = os.environ.get("NEV_BOX_GATEWAY_SPEND", "")
_SEEN = {"stamp": None, "keys": {}}


def _spent(digest):
    try:
        with open(_SPEND) as f:
            return int(json.load(f).get(digest) or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def _keys():
    try:
        st = os.stat(_PATH)
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != _SEEN["stamp"]:
            with open(_PATH) as f:
                _SEEN["keys"] = json.load(f)
            _SEEN["stamp"] = stamp
    except (OSError, ValueError):
        pass    # keep the last keys read whole (writers replace the file by a rename)
    return _SEEN["keys"]


async def user_api_key_auth(request, api_key):
    key = (api_key or "").removeprefix("Bearer ").strip()
    master = os.environ.get("LITELLM_MASTER_KEY", "")
    if master and hmac.compare_digest(key.encode(), master.encode()):
        return UserAPIKeyAuth(api_key=key, user_role=LitellmUserRoles.PROXY_ADMIN)
    digest = hashlib.sha256(key.encode()).hexdigest()
    for entry in _keys().values():
        if hmac.compare_digest(digest, entry["sha256"]):
            if entry.get("expires") and time.time() > float(entry["expires"]):
                raise HTTPException(status_code=401, detail="key expired")
            if not entry.get("models"):     # LiteLLM reads an empty list as every model
                raise HTTPException(status_code=403, detail="key allows no model")
            cap = entry.get("cap_tokens")
            spent = _spent(digest) if cap is not None else 0
            if cap is not None and spent >= int(cap):
                raise ProxyException(
                    message=f"Budget has been exceeded! Key {entry['name']}: spent "
                            f"{spent} tokens of its cap of {int(cap)}",
                    type="budget_exceeded", param=None, code=400)
            return UserAPIKeyAuth(api_key=key, key_alias=entry["name"], models=list(entry["models"]))
    raise HTTPException(status_code=401, detail="unknown key")
'''


def litellm_binary() -> Path:
    p = Path(sys.executable).parent / "litellm"
    if not p.exists():
        raise NevError(f"the LiteLLM proxy is not installed next to {sys.executable}; "
                       "install the gateway extra: pip install -e '.[gateway]'")
    return p


def ensure_key(path: Path, prefix: str) -> str:
    if path.exists():
        k = path.read_text().strip()
        if k:
            return k
    k = f"{prefix}-{secrets.token_hex(24)}"
    write_secret(path, k)
    return k


def write_files(layout: plan.Layout, d: Path, keys_dir: Path) -> tuple[dict[str, str], dict[str, Path], Path]:
    """Config, auth module and key digests under `d`; returns (environment, key files, master key file)."""
    d.mkdir(parents=True, exist_ok=True)
    master_file = keys_dir / "master.key"
    master = ensure_key(master_file, "sk-nevbox-master")
    key_files: dict[str, Path] = {}
    digests = {}
    for name, models in plan.key_allowlists().items():
        kf = keys_dir / f"{name}.key"
        key = ensure_key(kf, f"sk-nevbox-{name}")
        key_files[name] = kf
        digests[name] = {"name": name, "models": models, "sha256": hashlib.sha256(key.encode()).hexdigest()}
    # a job's own key and a rig service's (jobs/jobkeys.py; the collector lane's probe) outlive a
    # `nev box up`: only the box's keys are rewritten
    try:
        had = json.loads((d / "keys.json").read_text())
    except (OSError, ValueError):
        had = {}
    jobs = ({k: v for k, v in had.items() if isinstance(v, dict) and (v.get("job") or v.get("service"))}
            if isinstance(had, dict) else {})
    (d / "keys.json").write_text(json.dumps({**digests, **jobs}, indent=2) + "\n")
    (d / f"{AUTH_MODULE}.py").write_text(AUTH_SOURCE)
    (d / f"{SPEND_MODULE}.py").write_text(SPEND_SOURCE)
    cfg = plan.litellm_config(layout, AUTH_MODULE, SPEND_MODULE)
    (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {"LITELLM_MASTER_KEY": master, "NEV_BOX_GATEWAY_KEYS": str(d / "keys.json"),
           "NEV_BOX_GATEWAY_SPEND": str(d / "spend.json"),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
           "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True", "NO_DOCS": "True", "PYTHONUNBUFFERED": "1",
           "no_proxy": "*", "NO_PROXY": "*", "DISABLE_SCHEMA_UPDATE": "True"}
    return env, key_files, master_file


UNIT_SH = """#!/bin/sh
# the box's gateway (LiteLLM): start|stop|restart|status, as `systemctl` runs the gateway's unit
# on the real rig (written by nev box). The master key goes from its file into the environment,
# never onto a command line. `start --no-wait` returns once launched: `nev box up` starts every
# service at once and waits for all of them later; everything else waits until it answers.
PIDS={pids}
LOG={log}
HEALTH={health}
alive() {{ [ -s "$PIDS" ] && kill -0 "$(cat "$PIDS")" 2>/dev/null; }}
healthy() {{ curl -fsS --noproxy '*' -o /dev/null --max-time 5 "$HEALTH"; }}
wait_healthy() {{
  i=0
  while ! healthy; do
    alive || {{ echo "the gateway exited while starting: $(tail -n 1 "$LOG") (see $LOG)" >&2; exit 1; }}
    i=$((i + 1)); [ "$i" -gt {ticks} ] && {{ echo "the gateway not healthy after {wait} s; see $LOG" >&2; exit 1; }}
    sleep 0.5
  done
}}
launch() {{
  cd {dir} || exit 1
  LITELLM_MASTER_KEY=$(cat {master}) || exit 1
  export LITELLM_MASTER_KEY
{exports}  setsid {litellm} --config {config} --host {addr} --port {port} --num_workers 1 </dev/null >>"$LOG" 2>&1 &
  echo $! > "$PIDS"
}}
case "${{1:-}}" in
start)
  alive || launch
  [ "${{2:-}}" = --no-wait ] || wait_healthy ;;
stop)
  alive || {{ rm -f "$PIDS"; exit 0; }}
  pid=$(cat "$PIDS")
  kill "$pid" 2>/dev/null
  i=0
  while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  kill -9 "$pid" 2>/dev/null
  rm -f "$PIDS" ;;
restart)
  "$0" stop && launch && wait_healthy ;;
status)
  alive && healthy ;;
*)
  echo "usage: $0 start [--no-wait]|stop|restart|status" >&2; exit 2 ;;
esac
"""
UNIT_WAIT = plan.GATEWAY_RESTART_TIMEOUT - 60   # seconds a start waits for LiteLLM to answer; the role's health check waits longer


def unit_script(env: dict[str, str], d: Path, master_file: Path, addr: str, pids: Path, log: Path) -> str:
    """The gateway's unit: LiteLLM on the gateway host, started, stopped and restarted only by it
    (by `nev box up` and by a role reload alike), so a restart never leaves a second LiteLLM."""
    exports = "".join(f"  export {k}={shlex.quote(v)}\n" for k, v in env.items() if k != "LITELLM_MASTER_KEY")
    return UNIT_SH.format(pids=pids, log=log, health=f"http://{addr}:{plan.GATEWAY_PORT}/health/liveliness",
                          ticks=UNIT_WAIT * 2, wait=UNIT_WAIT, dir=d, master=master_file, exports=exports,
                          litellm=litellm_binary(), config=d / "config.yaml", addr=addr, port=plan.GATEWAY_PORT)
