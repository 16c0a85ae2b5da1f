"""One gateway key per job: minted at submit, allowed only the aliases its manifest names,
revoked when the job ends (the tick, `jobs/poll.py`) or by hand (`nev job revoke`), and its file
on the lane deleted then too (`drop_key_file`).

No database: the key is one more entry in the keys file the gateway already reads for its per-key
allowlists (on the box `rig/box/gateway.py`'s key check, which re-reads the file when it changes):

    {"job:clamp-px": {"name": "job:clamp-px", "job": "clamp-px", "models": ["qwen3.8-27b-fast"],
                      "sha256": "<digest of the key>", "expires": 1764620000}}

Only the key's SHA-256 is in the file (it is in snapshots of the gateway's role); the key itself
goes over SSH stdin into the lane's `DAGU_HOME/job-keys/<job>.key` (mode 600), which the job's
run step hands to its stages as `NEV_MODEL_KEY_FILE`: never argv, never a Dagu parameter. An entry
also `expires` (the manifest's wall-clock limit after the submission, plus an hour), so a key whose
job's end was never seen, or that a restored snapshot brought back, stops working by itself.

The keys file is NEV_GATEWAY_KEYS_FILE (`[user@]host:PATH`, reached over SSH through the jump
host NEV_LANE_JUMP, host keys pinned). Every change is one locked read-modify-write on that host
(`flock`, then an atomic rename); `apply` below is the change, pure, and is what runs there.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import posixpath
import re
import secrets
import shlex
import time
from collections.abc import Mapping

from jobs.manifest import Manifest
from lanes.base import righost, settings
from lanes.base.errors import ConfigError, NevError
from lanes.base.mask import register_secret
from lanes.base.ssh import SshError, Target

KEYS_DIR = "job-keys"          # under the lane's DAGU_HOME
EXPIRY_MARGIN_S = 3600


def entry_id(job: str) -> str:
    return f"job:{job}"


def aliases(m: Manifest) -> list[str]:
    """The aliases the manifest names: its stages' models and writer models."""
    out = {mo.alias for st in m.stages for mo in st.models} | {st.model for st in m.stages if st.model}
    return sorted(out)


def lane_key_path(dagu_home: str, job: str) -> str:
    return posixpath.join(dagu_home, KEYS_DIR, f"{job}.key")


def apply(keys: dict, op: dict, now: float) -> dict:
    """The keys file after `op` (pure; also run on the gateway's host): `{"add": {id: entry}}` or
    `{"remove": [id, ...]}`, with `"sha256"` only the entry of that key (not a newer one of the
    same job). Every other job's expired entry goes too; other keys are kept as they are.
    An add with `"over"` (the digest of the key it may replace: the submitter's own earlier one,
    or None) raises KeyError when a live entry of another key holds the id: another development
    box's job of the same name runs, and the lane's key file and work folder are by name."""
    out = {k: v for k, v in keys.items()
           if not (isinstance(v, dict) and v.get("job") and float(v.get("expires") or 0) < now)}
    if "over" in op:
        for k in op.get("add", {}):
            held = (out.get(k) or {}).get("sha256") if isinstance(out.get(k), dict) else None
            if held and held != op["over"]:
                raise KeyError(f"{k} is held by another submission's key, live until "
                               f"{int(float(out[k].get('expires') or 0))}")
    for k in op.get("remove", []):
        if "sha256" not in op or (out.get(k) or {}).get("sha256") == op["sha256"]:
            out.pop(k, None)
    out.update(op.get("add", {}))
    return out


REMOTE = '''
import json, os, sys, time
{apply}
path = sys.argv[1]
op = json.load(sys.stdin)
try:
    with open(path) as f:
        keys = json.load(f)
    mode = os.stat(path).st_mode & 0o777
except FileNotFoundError:
    keys, mode = {{}}, 0o644
try:
    new = apply(keys, op, time.time())
except KeyError as e:
    print("refused: " + e.args[0], file=sys.stderr)
    sys.exit(4)
tmp = path + ".nev-tmp"
with open(tmp, "w") as f:
    f.write(json.dumps(new, indent=2) + "\\n")
os.chmod(tmp, mode)
os.replace(tmp, path)
print(json.dumps(sorted(k for k in new if k.startswith("job:"))))
'''


def remote_program() -> str:
    return REMOTE.format(apply=inspect.getsource(apply))


def where(environ: Mapping[str, str] | None = None) -> tuple[Target, str] | None:
    """(host, path) of the gateway's keys file, or None when NEV_GATEWAY_KEYS_FILE is not set."""
    spec = settings.get(settings.GATEWAY_KEYS_FILE, environ)
    if not spec:
        return None
    host, sep, path = spec.rpartition(":")
    if not sep or not host or not path.startswith("/"):
        raise ConfigError(f"NEV_GATEWAY_KEYS_FILE {spec!r} is not [user@]host:/absolute/path; set it to the "
                          "gateway's keys file as the rig file's gateway role names it")
    try:
        return righost.target(host), path
    except SshError as e:
        raise ConfigError(f"NEV_GATEWAY_KEYS_FILE {spec!r}: {e}") from None


def _change(op: dict, environ: Mapping[str, str] | None) -> None:
    loc = where(environ)
    if loc is None:
        raise ConfigError("NEV_GATEWAY_KEYS_FILE is not set: set it to the gateway's keys file "
                          "([user@]host:/path) so each job gets its own key")
    target, path = loc
    conn = righost.from_settings(target, environ)
    try:
        with conn.connect():
            cmd = f"flock -w 30 {shlex.quote(path + '.lock')} python3 -c {shlex.quote(remote_program())} {shlex.quote(path)}"
            res = conn.run(cmd, stdin=json.dumps(op).encode(), timeout=60)
    except SshError as e:
        raise NevError(f"the gateway's keys file on {target}: {e}") from None
    if res.exit_status == 4:
        raise NevError(f"the gateway's keys file {target}:{path}: {res.last_err()}; another "
                       "development box's job of that name runs: give this job another name")
    if res.exit_status != 0:
        raise NevError(f"changing the gateway's keys file {target}:{path} failed: "
                       f"{res.last_err()}")


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def mint(m: Manifest, environ: Mapping[str, str] | None = None, now: float | None = None,
         over: str | None = None) -> str:
    """A new key for the job, allowed the manifest's aliases (replacing `over`, the digest of this
    state folder's earlier key of the same job, if any); returns the key (registered as a secret:
    masked in every line nev prints). NevError, nothing changed, when another submission's key
    of the same job name is live (a teammate's job: `apply`)."""
    names = aliases(m)
    key = f"sk-nev-job-{secrets.token_hex(24)}"
    register_secret(key)
    t = time.time() if now is None else now
    entry: dict[str, object] = {"name": entry_id(m.name), "job": m.name, "models": names,
                                "sha256": digest(key),
                                "expires": int(t + m.limit_s + EXPIRY_MARGIN_S)}
    if m.budget_tokens is not None:   # the gateway refuses the key past it (budget_exceeded)
        entry["cap_tokens"] = m.budget_tokens
    _change({"add": {entry_id(m.name): entry}, "over": over}, environ)
    return key


def mint_service(name: str, models: list[str], environ: Mapping[str, str] | None = None) -> str:
    """A key of a rig service (`service:NAME`, e.g. the collector lane's probe): allowed `models`
    only, no expiry (a new one replaces it); returns the key, registered as a secret."""
    if not models:
        raise ConfigError(f"no aliases for the key of {name}: declare some in NEV_FOLKNET_FILE")
    key = f"sk-nev-service-{secrets.token_hex(24)}"
    register_secret(key)
    entry = {"name": f"service:{name}", "service": name, "models": sorted(models),
             "sha256": digest(key)}
    _change({"add": {f"service:{name}": entry}}, environ)
    return key


def service_digest(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The sha256 the gateway's keys file holds for the service key `service:NAME` (None: none)."""
    loc = where(environ)
    if loc is None:
        return None
    target, path = loc
    conn = righost.from_settings(target, environ)
    try:
        with conn.connect():
            res = conn.run(["cat", path], timeout=60)
    except SshError as e:
        raise NevError(f"the gateway's keys file on {target}: {e}") from None
    return service_sha(res.out, f"{target}:{path}", name) if res.exit_status == 0 else None


def service_sha(raw: bytes | str, where: str, name: str) -> str | None:
    """The sha256 a keys file holds for `service:NAME`; None when it holds none or is not a keys
    file (a new key is minted then)."""
    from lanes.base import jsonfile

    try:
        text = jsonfile.decode(raw, where, "keys file") if isinstance(raw, bytes) else raw
        data = jsonfile.parse(text, where, "keys file")
    except NevError:
        return None
    entry = data.get(f"service:{name}") if isinstance(data, dict) else None
    return str(entry["sha256"]) if isinstance(entry, dict) and entry.get("sha256") else None


def drop_command(path: str, sha256: str | None = None) -> str:
    """sh that deletes a job's key file on its lane (nothing when it is not there); with `sha256`,
    only when the file holds that key (a submission of the same job since then keeps its own)."""
    q = shlex.quote(path)
    if sha256 is None:
        return f"rm -f {q}"
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError(f"not a SHA-256 digest: {sha256!r}")
    return (f'if [ -f {q} ] && [ "$(tr -d \'\\n\' < {q} | sha256sum | cut -d" " -f1)" = {sha256} ]; '
            f'then rm -f {q}; fi')


def drop_key_file(job: str, lane: int | None, sha256: str | None = None) -> None:
    """The job's key file deleted on `lane` (None: the default lane; `drop_command`); NevError when
    the lane cannot be reached."""
    from dagu import service

    with service.opened(lane) as ld:
        ld.conn.run(drop_command(lane_key_path(ld.layout.home, job), sha256), check=True)


def revoke(job: str, environ: Mapping[str, str] | None = None, sha256: str | None = None) -> None:
    """The job's key gone from the gateway's keys file (nothing when it has none); with `sha256`,
    only that key (a submission of the same job since then keeps its own)."""
    _change({"remove": [entry_id(job)], **({"sha256": sha256} if sha256 else {})}, environ)


