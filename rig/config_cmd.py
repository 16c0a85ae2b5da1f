"""`nev config init`: the config file's commented skeleton (docs/config.md), written once."""

from __future__ import annotations

import os
from pathlib import Path

from lanes.base import config
from lanes.base.errors import NevError

SKELETON = '''\
# nev's config file (docs/config.md). Each key is a setting `nev settings` lists, by its short
# name: NEV_LANE_JUMP is `jump` under [lane] (or `lane_jump` at the top). An exported NEV_*
# variable overrides the value here; `nev settings` says where each value came from.
# Paths: absolute, or relative to this file's folder; never to the folder nev runs in.
# Secrets never go here: each lives in a file of mode 600 that a *_file key names.
# After editing: `nev settings` checks the values, `nev doctor` every hop.

# The pinned host keys of the jump host, the lanes and the rig's hosts (`nev rig trust HOST`
# adds one), and the key every SSH hop logs in with.
known_hosts = "known_hosts"
# ssh_key = "~/.ssh/id_ed25519_rig"

# The lanes file: lanes[] (ssh, root, name), git_url, nas (docs/lanes.md).
lanes_file = "lanes.json"
# The rig file: the jump host, your port forwards, the roles (docs/forwards.md).
rig_file = "rig.json"
# The declared model aliases (docs/inventory.md); unset: nev's own bench/folknet.json.
# folknet_file = "folknet.json"

[lane]
# The jump host in front of the rig (it wins over the lanes file's "jump").
# jump = "admin@jump-host"
# The gateway as the lanes reach it.
# model_url = "http://10.0.0.20:4000"
# The NAS folder as a lane sees it.
# shared = "/srv/lane-shared"

[forge]
# The engine repository through your forward, your user, the file holding your token.
# url = "http://127.0.0.1:18080/owner/engine.git"
# user = "me"
# token_file = "forge-token"

[model]
# The gateway through your forward, the file holding your key.
# url = "http://127.0.0.1:14000"
# key_file = "batch.key"

[gateway]
# The gateway's keys file, over SSH through the jump host.
# keys_file = "root@10.0.0.20:/etc/litellm/keys.json"

[dagu]
# The lane that runs Dagu, and the pinned binary installed there.
# lane = 0
# binary = "/opt/nev/dagu-1.30.2/dagu"

[inventory]
# The lane whose collector's snapshot `nev rig status` reads.
# lane = 0
'''


def init(force_path: Path | None = None) -> Path:
    """Write the skeleton where nev looks for its config; refuse when a file is there."""
    p = force_path or config.path()
    if p.exists():
        raise NevError(f"{p} already exists; nev config init never overwrites it (edit it, or "
                       "move it away first)")
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(SKELETON)
    return p
