"""`tracks.json`: the gate command, extra land checks, protected globs, the tick's settings and
the conformance suites (`bench/oracle/suites.py`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.oracle.suites import Suite, parse_section
from lanes.base import jsonfile
from lanes.base.errors import NevError
from lanes.base.gitrun import Repo


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
class Install:
    """Run after a landing when oracle/package*.json changed or a crate was added: `command`
    builds into the staging folder named by NEV_INSTALL_STAGE, swapped in for `target` on success."""

    command: str
    target: str


@dataclass(frozen=True)
class Tracks:
    path: Path
    verify: str
    land_checks: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)
    spec_watch: SpecWatch = field(default_factory=SpecWatch)
    install: Install | None = None
    suites: dict[str, Suite] = field(default_factory=dict)


def at(repo: Repo, rev: str) -> Tracks:
    """tracks.json as commit `rev` of `repo` holds it (NevError: it holds none)."""
    data = repo.show_bytes(rev, "tracks.json")
    if data is None:
        raise NevError("tracks.json is not on main; it declares the gate (verify, landChecks); "
                       "not landed")
    return parse_text(jsonfile.decode(data, "main:tracks.json", "tracks file"), "main:tracks.json")


def load(path: Path) -> Tracks:
    return parse(jsonfile.load(path, "tracks file"), path)


def parse_text(text: str, label: str) -> Tracks:
    """tracks.json read from git (e.g. `main:tracks.json`); errors name `label`."""
    return parse(jsonfile.parse(text, label, "tracks file"), Path(label))


def parse(data: Any, path: Path) -> Tracks:
    f = jsonfile.Fields(path)
    top = f.known(f.obj(data, "(top level)"),
                  ("verify", "landChecks", "protected", "install", "specWatch", "suites"), "")
    verify = f.get(top, "verify", str, "")
    if not verify.strip():
        raise f.fail("verify", "is empty; name the gate command")
    checks = f.str_list(top, "landChecks", "")
    for i, c in enumerate(checks):
        if not c.strip():
            raise f.fail(f"landChecks[{i}]", "is empty; name a command or remove the entry")
    protected = f.str_list(top, "protected", "")
    for i, p in enumerate(protected):
        if not p.strip() or p.strip() in ("*", "**", "/", ".", "**/*"):
            raise f.fail(f"protected[{i}]", "must name a path or glob (not empty, not everything)")
    install = None
    inst_raw = f.get(top, "install", dict, "", required=False)
    if inst_raw is not None:
        f.known(inst_raw, ("command", "target"), "install")
        command = f.get(inst_raw, "command", str, "install")
        target = f.get(inst_raw, "target", str, "install")
        if not command.strip():
            raise f.fail("install.command", "is empty; name the install command")
        tparts = target.strip("/").split("/")
        if not target.strip() or target.startswith("/") or ".." in tparts or tparts == ["."]:
            raise f.fail("install.target", "must be a folder inside the checkout (relative, no '..')")
        install = Install(command=command, target=target.strip("/"))
    sw_raw = f.known(f.get(top, "specWatch", dict, "", required=False, default={}),
                     ("pollEnv", "landScript", "lanes"), "specWatch")
    poll_env_raw = f.get(sw_raw, "pollEnv", dict, "specWatch", required=False, default={})
    poll_env: dict[str, str] = {}
    for k, v in poll_env_raw.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise f.fail(f"specWatch.pollEnv.{k}", "is not an environment variable name")
        if not isinstance(v, str):
            raise f.fail(f"specWatch.pollEnv.{k}", "must be a string")
        poll_env[k] = v
    lanes_raw = f.known(f.get(sw_raw, "lanes", dict, "specWatch", required=False, default={}),
                        ("tool", "launch", "fetch"), "specWatch.lanes")
    lanes = WriterLanes(
        tool=f.get(lanes_raw, "tool", str, "specWatch.lanes", required=False),
        launch=f.get(lanes_raw, "launch", str, "specWatch.lanes", required=False),
        fetch=f.get(lanes_raw, "fetch", str, "specWatch.lanes", required=False),
    )
    land_script = f.get(sw_raw, "landScript", str, "specWatch", required=False)
    if land_script is not None and not land_script.strip():
        raise f.fail("specWatch.landScript", "is empty; name the command the tick runs (nev land --approved)")
    sw = SpecWatch(poll_env=poll_env,
                   land_script=land_script,
                   lanes=lanes)
    suites = parse_section(f, top["suites"]) if top.get("suites") is not None else {}
    return Tracks(path=path, verify=verify, land_checks=checks, protected=protected, spec_watch=sw,
                  install=install, suites=suites)
