"""Operating the serving tier: declared serving roles, drain/stop/start through HAProxy's runtime API, drift, sudo.

Other rooms of `rig` use the names in `__all__` only (the rig-in-a-box writes the admin pool's
sudoers drop-in as `nev rig provision-sudo` does); the modules are this room's inside.
"""

from rig.serving.sudoers import drop_ins as sudoers_drop_ins
from rig.serving.sudoers import path as sudoers_path

__all__ = ["sudoers_drop_ins", "sudoers_path"]
