"""Getting the box's hosts ready for their inventory services: the files, and this nev on every lane.

`prepare` is the one call `Box` makes before it starts the services `inventory_services.services`
describes. A lane gets nev the way `nev lane install` puts it there (the same wheelhouse, the
same install script, run as the lane user in the lane's home), but through the lane's own
namespaces rather than SSH: the development box need not reach the lane's address for it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from lanes import selfinstall
from lanes.base.errors import NevError
from rig.box import inventory_services as isv
from rig.box import plan


def install_nev(box_dir: Path, lane: str, lane_pid: int, userns: bool = False,
                cache: Path | None = None, say: Callable[[str], None] | None = None) -> str | None:
    """Put this nev in the lane's home (`~/.local/bin/nev`); None when it is already there.
    `say`: each phase of a long install as it starts (the wheelhouse built, the lane's venv)."""
    house, key = selfinstall.wheelhouse(cache or selfinstall.default_cache(), say=say)
    home = box_dir / "lanes" / lane / "home"
    current, link = home / selfinstall.CURRENT, home / selfinstall.LINK   # as the lane sees them
    if (current.is_symlink() and os.readlink(current) == f"installs/{key}"
            and (home / selfinstall.install_dir(key) / "bin" / "nev").exists()
            and link.is_symlink()
            and os.readlink(link).endswith(f"/{selfinstall.CURRENT}/bin/nev")):
        return None
    if say is not None:
        say(f"{lane}: installing nev {key} (a virtualenv from the wheelhouse, offline)")
    argv = ["nsenter", "-t", str(lane_pid), *(["-U"] if userns else []), "-n", "-m", "--",
            *isv.as_lane(["sh", "-c", selfinstall.remote_script(key)])]
    cp = subprocess.run(argv, input=selfinstall.wheel_tar(house), capture_output=True, timeout=900,
                        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": str(isv.HOME)})
    if cp.returncode != 0:
        last = (cp.stderr.decode(errors="replace").strip().splitlines() or [f"exit {cp.returncode}"])[-1]
        raise NevError(f"installing nev on {lane} failed: {last}")
    return cp.stdout.decode(errors="replace").strip().splitlines()[-1]


def prepare(layout: plan.Layout, box_dir: Path, lanes_kind: str, lane_pids: Mapping[str, int],
            say: Callable[[str], None] | None = None) -> tuple[list[isv.Service], list[str]]:
    """Write every host's inventory file, put nev on each lane that runs a service; return the
    services to start (in order) and what changed. `lane_pids`: lane name -> its sshd's PID."""
    isv.write_inventory_files(layout, box_dir)
    svcs = isv.services(layout, box_dir, lanes_kind)
    changed = []
    for lane in sorted({s.host for s in svcs if s.in_lane}):
        line = install_nev(box_dir, lane, lane_pids[lane], userns=lanes_kind != "netns", say=say)
        if line is not None:
            changed.append(f"{lane}: {line}")
    return svcs, changed
