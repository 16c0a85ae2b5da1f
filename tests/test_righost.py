"""The one way to a rig host that is not a lane (`lanes/base/righost.py`): its user, its jump,
its settings, and that every caller that reaches such a host takes it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lanes.base import righost
from lanes.base.errors import NevError
from lanes.base.ssh import Connection, Target

ROOT = Path(__file__).resolve().parents[1]


def test_a_host_is_root_unless_its_spec_names_a_user():
    assert righost.target("gw.rig:2222") == Target("gw.rig", "root", 2222)
    assert righost.target("ops@gw.rig").user == "ops"
    t = Target("10.0.0.5", "lane", 22)
    assert righost.target(t) is t
    with pytest.raises(NevError):
        righost.target("gw.rig:notaport")


def test_the_settings_give_known_hosts_key_and_jump(tmp_path: Path):
    env = {"NEV_KNOWN_HOSTS": str(tmp_path / "kh"), "NEV_SSH_KEY": str(tmp_path / "id"),
           "NEV_LANE_JUMP": "hop@jump.rig:2200"}
    c = righost.from_settings("gw.rig", env)
    assert (c.target.user, c.target.host) == ("root", "gw.rig")
    assert c.known_hosts == tmp_path / "kh" and c.key_file == tmp_path / "id"
    assert c.jump == Target("jump.rig", "hop", 2200) and c.via is None
    assert righost.from_settings("gw.rig", {}).jump is None


def test_a_shared_jump_and_an_own_jump_do_not_mix():
    via = Connection(Target("jump", "root", 22))
    assert righost.connection("h", via=via).via is via
    with pytest.raises(ValueError):
        righost.connection("h", via=via, jump="jump")


def test_nothing_outside_the_ssh_modules_builds_a_connection_to_a_rig_host_by_hand():
    # Lanes go through Lane.connect (the lanes file); every other host through righost.
    allowed = {"lanes/base/ssh.py", "lanes/base/righost.py", "lanes/lanesfile.py"}
    found = []
    for pkg in ("rig", "jobs", "lanes", "dagu", "bench", "crates_bridge"):
        for f in (ROOT / pkg).rglob("*.py"):
            rel = f.relative_to(ROOT).as_posix()
            if rel in allowed or rel.startswith("bench/perf/") or "target" in f.parts:
                continue
            if re.search(r"(?<![\w.])Connection\(", f.read_text(encoding="utf-8")):
                found.append(rel)
    assert not found, f"an SSH connection built by hand (use lanes.base.righost): {found}"
