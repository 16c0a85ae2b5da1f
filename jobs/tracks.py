"""`tracks.json`: the gate command, extra land checks, protected globs and the tick's settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lanes import jsonfile


@dataclass(frozen=True)
class WriterLanes:
    tool: str | None = None
    launch: str | None = None
    fetch: str | None = None


@dataclass(frozen=True)
class SpecWatch:
    poll_env: dict[str, str] = field(default_factory=dict)
    land_script: str | None = None
    lanes: WriterLanes = field(default_factory=WriterLanes)


@dataclass(frozen=True)
class Tracks:
    path: Path
    verify: str
    land_checks: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)
    spec_watch: SpecWatch = field(default_factory=SpecWatch)


def load(path: Path) -> Tracks:
    data = jsonfile.load(path, "tracks file")
    f = jsonfile.Fields(path)
    top = f.obj(data, "(top level)")
    verify = f.get(top, "verify", str, "")
    if not verify.strip():
        raise f.fail("verify", "is empty; name the gate command")
    checks = f.str_list(top, "landChecks", "")
    protected = f.str_list(top, "protected", "")
    sw_raw = f.get(top, "specWatch", dict, "", required=False, default={})
    poll_env_raw = f.get(sw_raw, "pollEnv", dict, "specWatch", required=False, default={})
    poll_env: dict[str, str] = {}
    for k, v in poll_env_raw.items():
        if not isinstance(v, str):
            raise f.fail(f"specWatch.pollEnv.{k}", "must be a string")
        poll_env[k] = v
    lanes_raw = f.get(sw_raw, "lanes", dict, "specWatch", required=False, default={})
    lanes = WriterLanes(
        tool=f.get(lanes_raw, "tool", str, "specWatch.lanes", required=False),
        launch=f.get(lanes_raw, "launch", str, "specWatch.lanes", required=False),
        fetch=f.get(lanes_raw, "fetch", str, "specWatch.lanes", required=False),
    )
    sw = SpecWatch(poll_env=poll_env,
                   land_script=f.get(sw_raw, "landScript", str, "specWatch", required=False),
                   lanes=lanes)
    return Tracks(path=path, verify=verify, land_checks=checks, protected=protected, spec_watch=sw)
