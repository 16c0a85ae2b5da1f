"""A gate started ahead: for a gate read without click (`lanes.gateargs`, by `rig/cli.py`), the
SSH client to its first lane is started before the rest of nev is imported, so the connection
through the jump host is made while the worktree is read. The gate's first session to that lane
takes that client (`lanes.base.openssh.OpenSsh.open_session`); one nobody took is stopped when
nev exits. No lane settings are read on a lane (NEV_ON_LANE).
"""

from __future__ import annotations

from lanes import agentpack, lanesfile
from lanes.base import settings
from lanes.base.errors import NevError
from lanes.gateargs import GateArgs


def start(g: GateArgs) -> bool:
    """Start the channel the gate `g` will open first (taking the one `lanes.quick` started from
    its record when it is the same) and record its argv for the next gate; True when one started."""
    from lanes import quick

    if settings.get(settings.ON_LANE):
        return False
    try:
        lf = lanesfile.configured(require=False)
        lanes = lanesfile.pick(lf, g.lane_index) if lf.lanes else []
        if not lanes:
            quick.stop_all()
            return False
        ssh = lanes[0].openssh()
        command = agentpack.lane_command(agentpack.lane_agent().hash)
        argv = ssh.argv(command)
        ssh.start_ahead(command, quick.take(argv))    # the same client, when quick started it
    except (NevError, OSError):
        quick.stop_all()
        return False
    quick.record(quick.lane_key(g.lane_index), argv, _argv_sources(lf))
    return True


def _argv_sources(lf: lanesfile.LanesFile) -> list[str]:
    """The files a gate's argv is made from: the lanes file, the lane agent's modules (its hash)
    and the modules that build the argv."""
    import sys

    files = [str(lf.path)] if lf.path else []
    files += [str(agentpack.source_path(m)) for m in agentpack.LANE_MODULES]
    for name in ("lanes.quick", "lanes.ahead", "lanes.agentpack", "lanes.lanesfile", "lanes.base.openssh",
                 "lanes.base.ssh", "lanes.base.settings"):
        f = getattr(sys.modules.get(name), "__file__", None)
        if f:
            files.append(f)
    return files
