"""`nev rig forward`: the development box's local port forwards through the jump host, held up.

`state` (the per-forward state file and capped log), `check` (the real request that says a
forward is up), `supervise` (one process per forward that keeps its OpenSSH client running),
`control` (up, down, status, the @reboot line).

Other rooms of `rig` use the names in `__all__` only (the rig-in-a-box asks whether its
forwards answer); the modules above are this room's inside.
"""

from rig.forward.check import Answer, probe

__all__ = ["Answer", "probe"]
