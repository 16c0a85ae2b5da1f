"""The lane agent is sent once: a lane runs its cached copy of the agent named by the hash on the
bootstrap's command line, only when the copy's content matches that hash, and asks for the agent
otherwise. The real bootstrap runs here on a bare python3 with a home of its own, spoken to as
`lanes.session.Session` speaks to it: the request at once, the agent only when asked."""

from __future__ import annotations

import json
import subprocess
import zlib
from pathlib import Path

from lanes import agentpack
from lanes import sweep as sw
from lanes.agent import layout
from lanes.agent import root as agent_root
from lanes.agent.messages import StatusRequest
from lanes.agent.wire import FRAME, Kind, frame
from tests.helpers import lane_helpers as h


def talk(home: Path, agent: agentpack.Agent) -> tuple[bool, dict, str]:
    """One `status` call: (whether the lane asked for the agent, the RESULT, the lane's stderr)."""
    p = subprocess.Popen(["sh", "-c", agentpack.lane_command(agent.hash)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=home,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(home)})
    assert p.stdin is not None and p.stdout is not None and p.stderr is not None
    p.stdin.write(StatusRequest(root=str(home)).frame())
    p.stdin.flush()
    asked, result = False, {}
    while True:
        head = p.stdout.read(FRAME.size)
        if len(head) < FRAME.size:
            break
        kind, n = FRAME.unpack(head)
        data = p.stdout.read(n)
        if kind == Kind.NEED_AGENT.value:
            asked = True
            p.stdin.write(frame(Kind.AGENT, agent.blob))
            p.stdin.flush()
        elif kind == Kind.RESULT.value:
            result = json.loads(data)
            break
    p.stdin.close()
    err = p.stderr.read().decode()
    p.wait(30)
    return asked, result, err


def cached(home: Path) -> Path:
    return home / layout.AGENT_CACHE


def test_a_lane_without_the_agent_asks_for_it_once_then_runs_its_cached_copy(tmp_path):
    agent = agentpack.lane_agent()
    asked, result, err = talk(tmp_path, agent)
    assert asked and result["root"] == str(tmp_path), err     # the request sent ahead reached the agent
    assert (cached(tmp_path) / agent.hash).read_bytes() == zlib.decompress(agent.blob)
    asked, result, err = talk(tmp_path, agent)
    assert not asked and result["root"] == str(tmp_path), err
    assert sorted(p.name for p in cached(tmp_path).iterdir()) == [agent.hash]


def test_a_tampered_cached_agent_is_refused_and_sent_again(tmp_path):
    agent = agentpack.lane_agent()
    assert talk(tmp_path, agent)[0]
    copy = cached(tmp_path) / agent.hash
    copy.write_bytes(h.agent_marker("tampered-ran") + copy.read_bytes())
    asked, result, err = talk(tmp_path, agent)
    assert asked and result["root"] == str(tmp_path)
    assert "does not match its hash" in err
    assert not (tmp_path / "tampered-ran").exists(), "the tampered copy ran"
    assert copy.read_bytes() == zlib.decompress(agent.blob)   # rewritten whole
    assert not talk(tmp_path, agent)[0]


def test_a_lane_holding_an_old_agent_runs_the_new_one_after_an_upgrade(tmp_path, monkeypatch):
    new = agentpack.lane_agent()
    old = h.agent_variant(new, h.agent_marker("old-ran"))
    assert talk(tmp_path, old)[0] and talk(tmp_path, old)[1]["root"] == str(tmp_path)
    assert (tmp_path / "old-ran").read_text() == "ran\nran\n"            # the old one, cached, ran
    asked, result, err = talk(tmp_path, new)
    assert asked and result["root"] == str(tmp_path), err
    assert (tmp_path / "old-ran").read_text() == "ran\nran\n"            # ... and not after the upgrade
    assert not talk(tmp_path, new)[0]
    # the sweep removes the agent that is no longer current, and only that
    (cached(tmp_path) / "notes.txt").write_text("not nev's\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert agent_root.cached_agents() == sorted([old.hash, new.hash, "notes.txt"])
    stale = sw.stale_agents(agent_root.cached_agents(), new.hash)
    assert stale == [old.hash]
    assert agent_root.remove_agents(stale + ["../escape"]) == (stale, {"../escape": "not a cached agent's name; kept"})
    assert sorted(p.name for p in cached(tmp_path).iterdir()) == sorted([new.hash, "notes.txt"])


def test_a_cache_that_cannot_be_written_still_runs_the_agent_sent(tmp_path):
    agent = agentpack.lane_agent()
    (tmp_path / ".local").write_text("a file where the state folder would go\n")
    for _ in range(2):
        asked, result, err = talk(tmp_path, agent)
        assert asked and result["root"] == str(tmp_path), err


def test_stale_agents_are_every_cached_agent_but_the_current_one():
    cur, old = "c" * 64, "0" * 64
    assert sw.stale_agents([cur, old, f"{cur}.tmp123", "notes.txt", f"{old}.tmp", "ab", f"{cur}.code",
                            f"{old}.code", f"{cur}.code.tmp9"], cur) == [old, f"{old}.code", f"{cur}.code.tmp9", f"{cur}.tmp123"]
    assert sw.stale_agents([cur, f"{cur}.code"], cur) == []
    assert [layout.agent_entry_ok(n) for n in (old, f"{old}.tmp7", f"{old}.tmpx", "../" + old, cur.upper(),
                                               f"{old}.code", f"{old}.codex", f"{old}.code.tmp3")] == \
        [True, True, False, False, False, True, False, True]


def test_the_bootstrap_is_small_single_quotable_and_names_only_the_hash():
    agent = agentpack.lane_agent()
    line = agentpack.lane_command(agent.hash)
    assert "'" not in agentpack.BOOTSTRAP          # quoted whole, nothing escaped on the slow uplink
    assert line.endswith(" " + agent.hash) and len(line) < 1024
    assert layout.AGENT_CACHE in agentpack.BOOTSTRAP


def test_a_compiled_form_planted_beside_the_cached_agent_is_never_run(tmp_path):
    """Only the cached agent whose content hashes to the name the development box sent runs: a
    compiled form of its modules beside it (`<hash>.code`, as agents once kept it, checked only
    against a hash stored in the same file) is not read, whatever it holds."""
    import hashlib
    import marshal
    import sys

    agent = agentpack.lane_agent()
    assert talk(tmp_path, agent)[0]
    marker = compile(h_marker_source(tmp_path), "x", "exec")
    forged = marshal.dumps([marker] * len(agentpack.LANE_MODULES))
    code = cached(tmp_path) / (agent.hash + ".code")
    code.write_bytes(marshal.dumps((agent.hash, sys.implementation.cache_tag,
                                    hashlib.sha256(forged).hexdigest(), forged)))
    asked, result, err = talk(tmp_path, agent)
    assert not asked and result["root"] == str(tmp_path), err
    assert not (tmp_path / "forged-ran").exists(), "the planted compiled code ran"


def h_marker_source(home: Path) -> str:
    return f"open({str(home / 'forged-ran')!r}, 'w').write('ran')\n"


def test_the_users_cache_keeps_only_the_newest_built_agents(tmp_path, monkeypatch):
    """One agent is built per version of its sources: the oldest leave the cache as new ones come."""
    import os

    cache = tmp_path / "nev"
    cache.mkdir()
    for i in range(6):
        f = cache / f"agent-{i:020d}.zlib"
        f.write_bytes(b"x")
        os.utime(f, (1_000_000 + i, 1_000_000 + i))
    (cache / "agent-old.blob").write_bytes(b"x")
    os.utime(cache / "agent-old.blob", (10, 10))
    (cache / "gate-argv.json").write_text("{}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    agentpack._blob()                           # builds this version's agent there (the newest)
    left = sorted(p.name for p in cache.iterdir())
    assert len([n for n in left if n.startswith("agent-")]) == agentpack.AGENT_CACHE_KEEP
    assert "gate-argv.json" in left and "agent-old.blob" not in left
    assert {f"agent-{i:020d}.zlib" for i in (3, 4, 5)} <= set(left)


def test_each_start_of_a_cached_agent_marks_it_used(tmp_path, monkeypatch):
    agent = agentpack.lane_agent()
    assert talk(tmp_path, agent)[0]
    copy = cached(tmp_path) / agent.hash
    old = copy.stat().st_mtime - 3 * 86400
    import os

    os.utime(copy, (old, old))
    assert not talk(tmp_path, agent)[0]           # the cached copy ran ...
    assert copy.stat().st_mtime > old + 86400     # ... and says it was used now
    monkeypatch.setenv("HOME", str(tmp_path))
    ages = agent_root.agent_ages(agent_root.cached_agents())
    assert set(ages) == {agent.hash} and ages[agent.hash] < 60


def test_the_sweep_keeps_another_boxs_agent_used_recently():
    mine, teammate, old = "c" * 64, "d" * 64, "0" * 64
    cached = [mine, f"{mine}.code", teammate, f"{teammate}.code", old, f"{old}.code",
              f"{old}.tmp5", f"{teammate}.tmp6"]
    hour = 3600.0
    ages = {mine: 1.0, teammate: 2 * hour, f"{teammate}.code": 30 * hour, old: 30 * hour,
            f"{old}.code": 30 * hour, f"{old}.tmp5": 30 * hour, f"{teammate}.tmp6": 10.0}
    # a teammate's agent used two hours ago stays with its compiled modules and its write under way
    assert sw.stale_agents(cached, mine, ages, 24) == [old, f"{old}.code", f"{old}.tmp5"]
    # with no keeping (or ages unknown: an old lane) every other agent goes, as before
    assert sw.stale_agents(cached, mine, ages, 0) == sorted(set(cached) - {mine, f"{mine}.code"})
    assert sw.stale_agents(cached, mine, {}, 24) == sorted(set(cached) - {mine, f"{mine}.code"})
