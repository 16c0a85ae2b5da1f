"""Which lane backends the box has (NEV_BOX_LANES picks one) and making one: the factory, beside
its callers (`core.Box`, `build.Build`) and above both backends, which stand on the seam
(`lanes_backend.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lanes.base.errors import ConfigError
from rig.box.lanes_backend import LaneBackend
from rig.box.lanes_lxc import LxcLanes
from rig.box.lanes_netns import NetnsLanes

BACKENDS: dict[str, Callable[[Path, Path], LaneBackend]] = {"netns": NetnsLanes, "lxc": LxcLanes}


def make(kind: str, box_dir: Path, log_dir: Path) -> LaneBackend:
    try:
        return BACKENDS[kind](box_dir, log_dir)
    except KeyError:
        raise ConfigError(f"lane backend {kind!r} is unknown; use one of {', '.join(BACKENDS)}") from None
