"""The lanes file (`bench/lane.local.json`, gitignored): lanes[], git_url, nas."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lanes import jsonfile, settings
from lanes.errors import ConfigError, NoLaneError
from lanes.ssh import SshError, Target


@dataclass(frozen=True)
class Lane:
    index: int
    ssh: str
    root: str = "/srv/lane"
    shared: str | None = None
    name: str = ""

    @property
    def target(self) -> Target:
        return Target.parse(self.ssh)

    @property
    def label(self) -> str:
        return f"lane {self.index}" + (f" ({self.name})" if self.name else "")


@dataclass(frozen=True)
class LanesFile:
    path: Path | None
    lanes: list[Lane] = field(default_factory=list)
    git_url: str | None = None
    nas: str | None = None
    primary: str | None = None


def load(path: Path) -> LanesFile:
    data = jsonfile.load(path, "lanes file")
    f = jsonfile.Fields(path)
    top = f.obj(data, "(top level)")
    raw_lanes = f.get(top, "lanes", list, "")
    lanes = []
    for i, item in enumerate(raw_lanes):
        where = f"lanes[{i}]"
        if isinstance(item, str):
            item = {"ssh": item}
        obj = f.obj(item, where)
        ssh = f.get(obj, "ssh", str, where)
        try:
            Target.parse(ssh)
        except SshError as e:
            raise f.fail(f"{where}.ssh", f"is not an SSH address ({e})") from None
        lanes.append(Lane(index=i, ssh=ssh, root=f.get(obj, "root", str, where, False, "/srv/lane"),
                          shared=f.get(obj, "shared", str, where, False),
                          name=f.get(obj, "name", str, where, False, "")))
    return LanesFile(path=path, lanes=lanes, git_url=f.get(top, "git_url", str, "", False),
                     nas=f.get(top, "nas", str, "", False), primary=f.get(top, "primary", str, "", False))


def lanes_file_path() -> Path:
    p = settings.get_path(settings.LANES_FILE)
    assert p is not None
    return p


def configured(require: bool = True) -> LanesFile:
    """The lanes in effect: NEV_LANE_SSH wins over the lanes file."""
    one = settings.get(settings.LANE_SSH)
    path = lanes_file_path()
    base = load(path) if path.exists() else LanesFile(path=None)
    if one:
        root = base.lanes[0].root if base.lanes else "/srv/lane"
        base = LanesFile(path=base.path, lanes=[Lane(0, one, root=root)], git_url=base.git_url,
                         nas=base.nas, primary=base.primary)
    if require and not base.lanes:
        raise NoLaneError(f"no build lane configured: set NEV_LANE_SSH or list lanes in {path}; nothing ran")
    return base


def pick(lf: LanesFile, index: int | None) -> list[Lane]:
    if index is None:
        return lf.lanes
    if not 0 <= index < len(lf.lanes):
        raise ConfigError(f"--lane {index}: only {len(lf.lanes)} lane(s) configured "
                          f"({lf.path or 'NEV_LANE_SSH'}); pick 0..{len(lf.lanes) - 1}")
    return [lf.lanes[index]]
