"""Operating the serving tier: declared serving roles, drain/stop/start through HAProxy's runtime API, drift, sudo.

Other rooms of `rig` use the names in `__all__` only (the rig-in-a-box writes the admin pool's
sudoers drop-in as `nev rig provision-sudo` does; the `nev` entry point adds the mending to the
tick); the modules are this room's inside.
"""

from rig.serving.sudoers import drop_ins as sudoers_drop_ins
from rig.serving.sudoers import path as sudoers_path


def mend_tick(env: dict[str, str]) -> int:
    """The tick's mending (`rig.serving.mend.tick_part`), loaded only when a tick runs: the rig
    file's reader imports this room too."""
    from rig.serving.mend import tick_part

    return tick_part(env)

__all__ = ["mend_tick", "sudoers_drop_ins", "sudoers_path"]
