"""The box's forwards: the development box's forwards to the forge and the gateway through the
jump host, held as a user of the real rig holds them (`nev rig forward up|down` with the box's
rig file), and whether both answer a real request (`rig.forward.probe`).
"""

from __future__ import annotations

import os
import subprocess
import sys

from lanes.base import settings
from lanes.base.errors import NevError
from rig.box.plan import PROJECT
from rig.box.state import BoxInfo, BoxState
from rig.forward import probe


def run(st: BoxState, action: str) -> list[str]:
    """`nev rig forward up|down` for the box's rig file; the lines it printed, or a NevError."""
    assert st.info is not None and st.info.rig_file is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update(PYTHONPATH=str(PROJECT), NEV_RIG_FILE=str(st.info.rig_file),
               NEV_STATE_DIR=st.forward_state or str(settings.get_path(settings.STATE_DIR)))
    cp = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "forward", action], cwd=PROJECT,
                        env=env, capture_output=True, text=True, timeout=120)
    lines = [ln.strip() for ln in (cp.stdout + cp.stderr).splitlines() if ln.strip()]
    if cp.returncode != 0 and action == "up":
        last = lines[-1] if lines else f"exit {cp.returncode}"
        why = " | ".join(ln for ln in lines if "DOWN" in ln) or last
        raise NevError(f"the box's forwards did not come up: {why}")
    return [f"forward {ln}" for ln in lines if "already running" not in ln]


def answer(info: BoxInfo) -> bool:
    """Both forwards answer a real request (the forge 401, the gateway's health route)."""
    local = (("forge", info.forge_local_url), ("gateway", info.gateway_local_url))
    return all(probe(what, int(url.rsplit(":", 1)[1].split("/")[0])).up for what, url in local)
