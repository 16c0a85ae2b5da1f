"""The rig-in-a-box: a whole rig of real parts on one machine (see docs/box.md).

    from rig.box import Box, BoxInfo
    info = Box.from_settings().up(lanes=2)
"""

from rig.box.core import Box, UpResult
from rig.box.state import BoxInfo, LaneInfo, PoolInfo

__all__ = ["Box", "BoxInfo", "LaneInfo", "PoolInfo", "UpResult"]
