"""`nev lane run` / `nev lane on` / `nev lane list` against a real sshd, real git and a real forge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lanes import agentpack, gate, lanesfile, payload
from lanes.agent import layout
from lanes.base.errors import DiskShortError
from lanes.forge import forge_for
from tests.helpers import lane_helpers as h
from tests.helpers import lane_rig as rigs

SECRET_TOKEN = "forgetok-4f1d9c2b7e" + "a8815d3c"
SECRET_KEY = "sk-gatekey-93ab61f0" + "7c2d"


@pytest.fixture(scope="module")
def lane_rig(box, tmp_path_factory):
    rig = rigs.on_box(box, tmp_path_factory.mktemp("lanerig"))
    rig.shared_worktree = worktree(rig, "shared")
    yield rig
    rig.stop()


def worktree(rig, name: str) -> Path:
    """A clone of the forge's engine repository named `name` (plus the rig's tag)."""
    return h.clone_worktree(rig.clone_url, rig.tmp / (name + rig.tag), rig.push_env)


def read_until(stream, needle: bytes, timeout: float = 20) -> bytes:
    got = b""
    deadline = time.monotonic() + timeout
    os.set_blocking(stream.fileno(), False)
    while needle not in got:
        if time.monotonic() > deadline:
            raise AssertionError(f"{needle!r} not seen within {timeout} s; got {got!r}")
        try:
            chunk = stream.read()
        except BlockingIOError:
            chunk = None
        if chunk:
            got += chunk
        else:
            time.sleep(0.02)
    return got


def lane_tree(rig, copy: str) -> str:
    """The tree hash of the lane copy as it is on disk (same recipe as h.tree_hash)."""
    return rig.lane_git(copy, 'export GIT_INDEX_FILE="$(mktemp)"; git read-tree HEAD && git add -A . '
                              '&& git write-tree; rm -f "$GIT_INDEX_FILE"')


def lane_copy(rig, name: str) -> Path:
    """The lane copy of `worktree(rig, name)` (its name keyed by its repository), made or not."""
    return rig.lane_root / h.clone_copy_name(rig.tmp / (name + rig.tag))


def env_files(rig, name: str) -> list[Path]:
    return [p for p in (lane_copy(rig, name) / ".env", lane_copy(rig, name) / ".env.nev-rewrite",
                        rig.lane_root / f".payload-{lane_copy(rig, name).name}" / ".env")
            if os.path.lexists(p)]


def test_lane_copy_equals_dev_tree_byte_for_byte(lane_rig):
    wt = worktree(lane_rig, "exact")
    h.make_changes(wt)
    r = h.nev(["lane", "run", str(wt), "true"], lane_rig.env)
    assert r.returncode == 0, r.stderr
    copy = lane_copy(lane_rig, "exact")
    assert lane_tree(lane_rig, copy.name) == h.tree_hash(wt)
    assert lane_rig.lane_git(copy.name, "git rev-parse HEAD") == h.git(wt, "rev-parse", "HEAD")
    assert not (copy / "target").exists(), "ignored files stay home"
    # A second run after more changes (an untracked file gone, a rename undone) still matches.
    os.unlink(wt / "raw.bin")
    h.git(wt, "mv", "new näme.txt", "old name.txt")
    (wt / "late.txt").write_text("late\n")
    r = h.nev(["lane", "run", str(wt), "true"], lane_rig.env)
    assert r.returncode == 0, r.stderr
    assert lane_tree(lane_rig, copy.name) == h.tree_hash(wt)


@pytest.mark.parametrize("code", [0, 1, 7, 255])
def test_exit_status_passes_through(lane_rig, code):
    wt = lane_rig.shared_worktree
    r = h.nev(["lane", "run", str(wt), "sh", "-c", f"echo to-out; echo to-err >&2; exit {code}"], lane_rig.env)
    assert r.returncode == code, r.stderr
    assert "to-out" in r.stdout and "to-err" in r.stderr


def test_output_arrives_while_command_still_runs(lane_rig):
    wt = worktree(lane_rig, "stream")
    go = lane_copy(lane_rig, "stream") / "go"
    p = h.nev_popen(["lane", "run", str(wt), "sh", "-c",
                     "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second"], lane_rig.env)
    try:
        read_until(p.stdout, b"first")
        assert p.poll() is None, "the command is still waiting, yet its first line arrived"
        go.write_text("")
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        assert b"second" in out
    finally:
        p.kill()


def test_pull_brings_folders_back(lane_rig):
    wt = worktree(lane_rig, "pull")
    r = h.nev(["lane", "run", "--pull", "out/results", "--pull", "logs", str(wt), "sh", "-c",
               "mkdir -p out/results/deep logs && echo 42 > out/results/deep/answer.txt && "
               "printf 'a b' > 'logs/run log.txt'"], lane_rig.env)
    assert r.returncode == 0, r.stderr
    assert (wt / "out/results/deep/answer.txt").read_text() == "42\n"
    assert (wt / "logs/run log.txt").read_text() == "a b"


def test_no_lane_answering_exits_3_and_runs_nothing(lane_rig, tmp_path):
    wt = lane_rig.shared_worktree
    marker = tmp_path / "ran"
    env = dict(lane_rig.env, NEV_LANE_SSH=f"lane@127.0.0.1:{h_free_port()}")
    r = h.nev(["lane", "run", str(wt), "touch", str(marker)], env)
    assert r.returncode == 3, r.stderr
    assert "no build lane answered" in r.stderr and "nothing ran" in r.stderr
    assert not marker.exists()
    r = h.nev(["lane", "on", "--lane-only", str(wt), "touch", str(marker)], env)
    assert r.returncode == 3 and not marker.exists()
    r = h.nev(["lane", "on", str(wt), "touch", str(marker)], dict(env, NEV_LANE_STRICT="1"))
    assert r.returncode == 3 and not marker.exists()


def test_lane_on_runs_locally_when_no_lane_and_not_lane_only(lane_rig, tmp_path):
    wt = lane_rig.shared_worktree
    env = dict(lane_rig.env, NEV_LANE_SSH=f"lane@127.0.0.1:{h_free_port()}")
    r = h.nev(["lane", "on", str(wt), "sh", "-c", "pwd; exit 5"], env)
    assert r.returncode == 5, r.stderr
    assert r.stdout.strip() == str(wt)
    assert "running on this machine" in r.stderr


def test_lane_on_with_nev_on_lane_runs_in_place_and_reads_no_lane_settings(lane_rig, tmp_path):
    wt = lane_rig.shared_worktree
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    env = dict(lane_rig.env, NEV_ON_LANE="1", NEV_LANES_FILE=str(bad))
    r = h.nev(["lane", "on", "--lane-only", "--pull", "x", str(wt), "sh", "-c", "pwd; exit 9"], env)
    assert r.returncode == 9, r.stderr
    assert r.stdout.strip() == str(wt)
    assert "--pull ignored" in r.stderr


def test_env_is_installed_for_the_run_only(lane_rig):
    wt = worktree(lane_rig, "envrun")
    (wt / ".env").write_text(f"NEV_MODEL_URL=http://127.0.0.1:4000\nNEV_MODEL_API_KEY={SECRET_KEY}\n")
    assert lane_rig.lane_home is not None
    model_env = lane_rig.lane_home / ".lane-model-env"
    kept = model_env.read_bytes() if model_env.exists() else None
    model_env.write_text("NEV_LANE_MODEL_URL=http://gateway.lane:4000\n")
    try:
        _env_run_checks(lane_rig, wt)
    finally:   # the box's lane keeps its real gateway address for the tests after this one
        if kept is None:
            model_env.unlink(missing_ok=True)
        else:
            model_env.write_bytes(kept)


def _env_run_checks(lane_rig, wt: Path) -> None:
    r = h.nev(["lane", "run", str(wt), "sh", "-c", "test -f .env && cat .env && exit 1"], lane_rig.env)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == ["NEV_MODEL_URL=http://gateway.lane:4000", f"NEV_MODEL_API_KEY={SECRET_KEY}"]
    assert env_files(lane_rig, "envrun") == []
    r = h.nev(["lane", "run", str(wt), "true"], lane_rig.env)
    assert r.returncode == 0 and env_files(lane_rig, "envrun") == []
    r = h.nev(["lane", "run", str(wt), "true"], dict(lane_rig.env, NEV_LANE_KEEP_ENV="1"))
    assert r.returncode == 0 and (lane_copy(lane_rig, "envrun") / ".env").exists()
    r = h.nev(["lane", "run", str(wt), "true"], lane_rig.env)
    assert env_files(lane_rig, "envrun") == []


def _tree_started(rig, name: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, list[int]]:
    wt = worktree(rig, name)
    tag = str(os.getpid() % 1000 + len(name) * 1000)
    (wt / ".env").write_text(f"NEV_MODEL_API_KEY={SECRET_KEY}\n")
    p = h.nev_popen(["lane", "run", str(wt), "sh", "-c",
                     f"sleep 301.{tag} & sleep 302.{tag} & sh -c 'sleep 303.{tag}' & "
                     f"(setsid sleep 304.{tag} &); echo started; wait"],
                    env or rig.env)
    read_until(p.stdout, b"started")
    time.sleep(0.2)
    pids = [pid for pid, cmd in rig.lane_cmdlines() if cmd.startswith("sleep 30") and cmd.strip().endswith(tag)]
    assert len(pids) >= 4, rig.lane_cmdlines()  # one of them left the tree (setsid, parent gone)
    return p, pids


def _all_gone(pids: list[int], within: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        if not any(Path(f"/proc/{p}").exists() and b"Z" not in _state(p) for p in pids):
            return time.monotonic() - t0
        time.sleep(0.02)
    raise AssertionError(f"lane processes still alive {within} s after the interrupt: {pids}")


def _state(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return b"Z"


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_stops_lane_process_tree_within_2s(lane_rig, sig, code):
    name = f"intr{code}"
    p, pids = _tree_started(lane_rig, name)
    t0 = time.monotonic()
    p.send_signal(sig)
    _all_gone(pids, 2.0)
    assert time.monotonic() - t0 < 2.0
    _, err = p.communicate(timeout=10)
    assert p.returncode == code, err
    assert b"stopped" in err
    assert env_files(lane_rig, name) == []


def test_cut_connection_stops_run_and_second_call_removes_env(lane_rig):
    p, pids = _tree_started(lane_rig, "cut")
    lane_rig.cut_connections()
    _, err = p.communicate(timeout=30)
    assert p.returncode == 255, err
    assert b"dropped" in err and b"second SSH call" in err
    _all_gone(pids, 5.0)
    assert env_files(lane_rig, "cut") == []


def test_no_secret_in_any_argv_during_run_nor_in_gate_log(lane_rig):
    wt = worktree(lane_rig, "secrets")
    (wt / ".env").write_text(f"NEV_MODEL_API_KEY={SECRET_KEY}\nNEV_FORGE_TOKEN={SECRET_TOKEN}\n")
    env = dict(lane_rig.env, NEV_LANE_FETCH_MAX_AGE="0")  # every run fetches from the forge
    seen: list[str] = []
    fetched = lane_rig.fetch_count()
    p = h.nev_popen(["lane", "run", str(wt), "sh", "-c",
                     "cat .env; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.1; done; echo done"], env)
    while p.poll() is None:
        seen += [c for _, c in lane_rig.lane_cmdlines() + h.cmdlines()]
        time.sleep(0.02)
    out, err = p.communicate()
    assert p.returncode == 0, err
    assert SECRET_KEY.encode() in out, "the command itself may read .env"
    assert lane_rig.fetch_count() == fetched + 1, "the lane fetched the forge with the token during the run"
    assert len(seen) > 50
    leaks = [c for c in seen if SECRET_TOKEN in c or SECRET_KEY in c]
    assert leaks == []
    logs_dir = lane_rig.nas / "archive" / "gate-logs" / lane_copy(lane_rig, "secrets").name
    logs = list(logs_dir.glob("*.log"))
    assert len(logs) == 1
    text = logs[0].read_text()
    assert "done" in text and "***" in text
    assert SECRET_KEY not in text and SECRET_TOKEN not in text


def test_untracked_symlink_out_of_worktree_is_refused_and_nothing_changes(lane_rig):
    wt = worktree(lane_rig, "escape")
    os.symlink("../../../../etc", wt / "outlink")
    r = h.nev(["lane", "run", str(wt), "touch", "ran"], lane_rig.env)
    assert r.returncode == 1
    assert "outlink" in r.stderr and "points out of the worktree" in r.stderr
    assert not (lane_copy(lane_rig, "escape") / "ran").exists()
    assert not os.path.lexists(lane_copy(lane_rig, "escape") / "outlink")


def test_crafted_payload_escaping_worktree_is_refused(lane_rig, monkeypatch):
    wt = worktree(lane_rig, "crafted")
    outside = lane_rig.lane_root / "escaped.txt"
    evil = (b"diff --git a/../escaped.txt b/../escaped.txt\nnew file mode 100644\n"
            b"--- /dev/null\n+++ b/../escaped.txt\n@@ -0,0 +1 @@\n+owned\n")
    real_build = payload.build

    def crafted(w, tips, forge, extra=None, local=None):
        p = real_build(w, tips, forge, extra, local)
        p.diff = evil
        return p

    monkeypatch.setattr(payload, "build", crafted)
    monkeypatch.setenv("NEV_LANES_FILE", lane_rig.env["NEV_LANES_FILE"])
    monkeypatch.setenv("NEV_KNOWN_HOSTS", lane_rig.env["NEV_KNOWN_HOSTS"])
    monkeypatch.setenv("NEV_SSH_KEY", lane_rig.env["NEV_SSH_KEY"])
    with pytest.raises(Exception) as e:
        gate.run(wt, ["touch", "ran"])
    assert "escapes the worktree" in str(e.value)
    assert not outside.exists()
    assert not (lane_copy(lane_rig, "crafted") / "ran").exists()


def test_stray_directory_at_lane_path_is_moved_aside(lane_rig):
    stray = lane_copy(lane_rig, "stray")
    stray.mkdir(parents=True)
    (stray / "precious.txt").write_text("left by hand\n")
    st = lane_rig.lane_root.stat()
    for p in (stray, stray / "precious.txt"):
        os.chown(p, st.st_uid, st.st_gid)  # left there by the lane user
    wt = worktree(lane_rig, "stray")
    r = h.nev(["lane", "run", str(wt), "true"], lane_rig.env)
    assert r.returncode == 0, r.stderr
    assert "moved it aside" in r.stderr
    aside = list(lane_rig.lane_root.glob(f".stray-{stray.name}-*"))
    assert len(aside) == 1 and (aside[0] / "precious.txt").read_text() == "left by hand\n"
    assert (stray / ".git").is_file()


def test_second_gate_of_same_worktree_waits_for_the_first(lane_rig):
    wt = worktree(lane_rig, "twice")
    go = lane_copy(lane_rig, "twice") / "go"
    # the one file outside its copy a gate writes and keeps (from its own jail): its own ledger
    order = lane_rig.nas / "ledger" / f"{lane_copy(lane_rig, 'twice').name}.jsonl"
    first = h.nev_popen(["lane", "run", str(wt), "sh", "-c",
                         'echo first-in; while [ ! -e go ]; do sleep 0.05; done; echo one >> "$NEV_LEDGER"'],
                        lane_rig.env)
    read_until(first.stdout, b"first-in")
    second = h.nev_popen(["lane", "run", str(wt), "sh", "-c", 'echo two >> "$NEV_LEDGER"'], lane_rig.env)
    read_until(second.stderr, b"waiting for it to finish")
    assert second.poll() is None and order.read_text() == ""   # made (empty) for the first gate
    listed = json.loads(h.nev(["lane", "list", "--json"], lane_rig.env).stdout)
    assert listed[0]["running"] == [h.copy_name(wt)]
    go.write_text("")
    assert first.wait(30) == 0
    assert second.wait(30) == 0
    assert order.read_text() == "one\ntwo\n"


def test_mirror_policy_new_local_commit_needs_no_fetch_unknown_basis_fetches_once(lane_rig):
    wt = worktree(lane_rig, "policy")
    r = h.nev(["lane", "run", str(wt), "true"], lane_rig.env)
    assert r.returncode == 0, r.stderr
    before = lane_rig.fetch_count()
    (wt / "new.txt").write_text("new\n")
    h.git(wt, "add", "new.txt")
    h.git(wt, "commit", "-qm", "local only")
    r = h.nev(["lane", "run", str(wt), "true"], lane_rig.env)
    assert r.returncode == 0, r.stderr
    assert lane_rig.fetch_count() == before, "a new local commit travels in the bundle"
    # Someone pushes to the forge; the worktree picks it up: the bundle leaves it out (the forge
    # has it), so the lane fetches exactly once.
    other = worktree(lane_rig, "policy-other")
    (other / "pushed.txt").write_text("pushed\n")
    h.git(other, "add", "pushed.txt")
    h.git(other, "commit", "-qm", "pushed elsewhere")
    h.git(other, "push", "-q", "origin", "HEAD:main", env=lane_rig.push_env)
    assert lane_rig.fetch_count() == before, "the push is not a lane fetch"
    h.git(wt, "pull", "-q", "--rebase", "origin", "main", env=lane_rig.push_env)
    before = lane_rig.fetch_count()
    r = h.nev(["lane", "run", str(wt), "true"], lane_rig.env)
    assert r.returncode == 0, r.stderr
    assert lane_rig.fetch_count() == before + 1
    assert "the bundle cannot supply the commit" in r.stderr


def test_disk_guard_sweeps_then_refuses_with_exit_4(lane_rig, monkeypatch):
    wt = worktree(lane_rig, "disk")
    for k in ("NEV_LANES_FILE", "NEV_KNOWN_HOSTS", "NEV_SSH_KEY"):
        monkeypatch.setenv(k, lane_rig.env[k])
    monkeypatch.setenv("NEV_LANE_MIN_FREE_GB", "1000000")
    swept: list[tuple[int, str]] = []
    with pytest.raises(DiskShortError) as e:
        gate.run(wt, ["true"], sweep=lambda lane, track: swept.append((lane.index, track)))
    assert swept == [(0, h.copy_name(wt))]
    assert e.value.exit_code == 4
    msg = str(e.value)
    assert "lane 0" in msg and "GiB free" in msg and "largest copies" in msg and "nothing ran" in msg
    r = h.nev(["lane", "run", str(wt), "true"], dict(lane_rig.env, NEV_LANE_MIN_FREE_GB="1000000"))
    assert r.returncode == 4 and "lane 0" in r.stderr


def test_lane_list_shows_answering_and_silent_lanes(lane_rig, tmp_path):
    wt = lane_rig.shared_worktree
    assert h.nev(["lane", "run", str(wt), "true"], lane_rig.env).returncode == 0
    lanes = json.loads(Path(lane_rig.env["NEV_LANES_FILE"]).read_text())
    lanes["lanes"].append({"ssh": f"lane@127.0.0.1:{h_free_port()}", "root": "/srv/lane"})
    f = tmp_path / "lanes.json"
    f.write_text(json.dumps(lanes))
    r = h.nev(["lane", "list", "--json"], dict(lane_rig.env, NEV_LANES_FILE=str(f)))
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows[0]["answers"] is True and rows[0]["free_gb"] > 0
    assert h.copy_name(wt) in rows[0]["copies"]
    assert rows[-1]["answers"] is False and rows[-1]["free_gb"] is None
    r = h.nev(["lane", "list"], dict(lane_rig.env, NEV_LANES_FILE=str(f)))
    assert "does not answer" in r.stdout and "answers" in r.stdout


def h_free_port() -> int:
    from tests.helpers.local_sshd import free_port

    return free_port()


def test_first_answering_lane_is_used_and_lane_option_picks_one(lane_rig, box, tmp_path):
    wt = worktree(lane_rig, "pick")
    data = json.loads(Path(lane_rig.env["NEV_LANES_FILE"]).read_text())
    data["lanes"] = [{"ssh": f"lane@127.0.0.1:{h_free_port()}", "root": "/srv/lane"},
                     {"ssh": box.lanes[0].ssh}, {"ssh": box.lanes[1].ssh}]
    f = tmp_path / "lanes.json"
    f.write_text(json.dumps(data))
    env = dict(lane_rig.env, NEV_LANES_FILE=str(f))
    r = h.nev(["lane", "run", str(wt), "true"], env)
    assert r.returncode == 0, r.stderr
    assert "lane 0" in r.stderr and "does not answer" in r.stderr
    assert (box.lanes[0].host_root / h.copy_name(wt)).is_dir()
    assert not (box.lanes[1].host_root / h.copy_name(wt)).exists()
    r = h.nev(["lane", "run", "--lane", "2", str(wt), "true"], env)
    assert r.returncode == 0, r.stderr
    assert (box.lanes[1].host_root / h.copy_name(wt)).is_dir()
    r = h.nev(["lane", "run", "--lane", "5", str(wt), "true"], env)
    assert r.returncode == 2 and "--lane 5" in r.stderr   # a lane the file does not have: usage (#31)


def test_basis_the_forge_cannot_supply_gets_a_second_bundle(lane_rig):
    wt = worktree(lane_rig, "basis")
    (wt / "a.txt").write_text("a\n")
    h.git(wt, "add", "a.txt")
    h.git(wt, "commit", "-qm", "only here")
    # A remote-tracking ref of another remote that the forge has never seen.
    h.git(wt, "update-ref", "refs/remotes/elsewhere/main", "HEAD")
    (wt / "b.txt").write_text("b\n")
    h.git(wt, "add", "b.txt")
    h.git(wt, "commit", "-qm", "on top")
    r = h.nev(["lane", "run", str(wt), "cat", "a.txt", "b.txt"], lane_rig.env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "a\nb\n"
    assert "sending a bundle over the lane's own commits" in r.stderr


def lane_agent_file(rig, agent: agentpack.Agent) -> Path:
    return rig.lane_home / layout.AGENT_CACHE / agent.hash


def test_a_lane_holding_an_old_agent_runs_the_new_one_after_an_upgrade(lane_rig, monkeypatch):
    import zlib

    new = agentpack.lane_agent()
    old = h.agent_variant(new, h.agent_marker(f"old-agent-ran{lane_rig.tag}"))
    ran = lane_rig.lane_home / f"old-agent-ran{lane_rig.tag}"
    wt = worktree(lane_rig, "upgrade")
    for k in ("NEV_LANES_FILE", "NEV_KNOWN_HOSTS", "NEV_SSH_KEY"):
        monkeypatch.setenv(k, lane_rig.env[k])
    monkeypatch.setattr(agentpack, "lane_agent", lambda: old)      # the nev before the upgrade
    assert gate.run(wt, ["true"]) == 0 and gate.run(wt, ["true"]) == 0
    assert ran.read_text() == "ran\nran\n"                       # sent once, then run from the cache
    assert lane_agent_file(lane_rig, old).is_file()
    monkeypatch.undo()
    r = h.nev(["lane", "run", str(wt), "sh", "-c", "echo upgraded"], lane_rig.env)
    assert r.returncode == 0 and r.stdout == "upgraded\n", r.stderr
    assert ran.read_text() == "ran\nran\n", "the old agent ran after the upgrade"
    assert lane_agent_file(lane_rig, new).read_bytes() == zlib.decompress(new.blob)


def test_a_tampered_cached_agent_on_a_lane_is_refused_and_sent_again(lane_rig):
    import zlib

    agent = agentpack.lane_agent()
    wt = worktree(lane_rig, "tamper")
    assert h.nev(["lane", "run", str(wt), "true"], lane_rig.env).returncode == 0
    cached = lane_agent_file(lane_rig, agent)
    st = cached.stat()
    ran = lane_rig.lane_home / f"tampered-ran{lane_rig.tag}"
    cached.write_bytes(h.agent_marker(ran.name) + cached.read_bytes())
    os.chown(cached, st.st_uid, st.st_gid)
    r = h.nev(["lane", "run", str(wt), "sh", "-c", "echo fine"], lane_rig.env)
    assert r.returncode == 0 and r.stdout == "fine\n", r.stderr
    assert "does not match its hash" in r.stderr
    assert not ran.exists(), "the tampered agent ran"
    assert cached.read_bytes() == zlib.decompress(agent.blob)     # rewritten whole


def test_a_warm_gate_sends_no_agent_and_bytes_near_its_payload(lane_rig, monkeypatch):
    wt = worktree(lane_rig, "warm")
    for k in ("NEV_LANES_FILE", "NEV_KNOWN_HOSTS", "NEV_SSH_KEY"):
        monkeypatch.setenv(k, lane_rig.env[k])
    outcomes = []
    for _ in range(2):
        lf = lanesfile.configured()
        picked = gate.pick_lane(lf, 0)
        assert picked is not None
        lane, conn = picked
        w = payload.Worktree.open(wt)
        try:
            outcomes.append(gate.gate_on_lane(lane, conn, w, ["true"], forge=forge_for(w.repo, lf),
                                              on_stdout=lambda b: None, on_stderr=lambda b: None))
        finally:
            conn.close()
    assert [o.status for o in outcomes] == [0, 0]
    warm = outcomes[1]
    assert not warm.agent_sent
    # the requests beside it (the payload's carries the gate's jail, ~1.5 KB of bubblewrap's
    # options), no agent (~26 KB)
    assert warm.bytes_sent < sum(warm.payload_sizes.values()) + 4096


GATE_IMPORTS = Path(__file__).parent / "data" / "gate_imports.txt"


def test_the_gate_imports_no_module_beyond_its_recorded_list(lane_rig):
    """`nev lane run` imports only what a gate needs: every module a whole warm gate imports
    (`python -X importtime`) is in tests/data/gate_imports.txt. A new one fails here until it is
    recorded there, on purpose. Neither paramiko nor click is among them: the plain gate is
    parsed without click (`lanes.gateargs`) and its channel is the OpenSSH client, started before
    the rest of nev is imported (`lanes.ahead`)."""
    wt = lane_rig.shared_worktree
    assert h.nev(["lane", "run", str(wt), "true"], lane_rig.env).returncode == 0
    r = h.nev(["lane", "run", str(wt), "true"], dict(lane_rig.env, PYTHONPROFILEIMPORTTIME="1"))
    assert r.returncode == 0, r.stderr
    imported = {ln.split("|")[2].strip() for ln in r.stderr.splitlines()
                if ln.startswith("import time:") and "cumulative" not in ln}
    recorded = {ln.strip() for ln in GATE_IMPORTS.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    assert {"lanes.gateargs", "lanes.ahead", "lanes.gate", "lanes.payload"} <= imported
    assert len(imported) > 100
    assert not {m for m in imported if m.split(".")[0] in ("paramiko", "cryptography", "nacl", "click")}
    grown = sorted(imported - recorded)
    assert grown == [], f"the gate imports {len(grown)} module(s) more than tests/data/gate_imports.txt records: {grown}"


QUICK_PROBE = """import sys
from lanes import quick
taken = []
take = quick.take
def probe(argv):
    p = take(argv)
    taken.append(p is not None)
    return p
quick.take = probe
from rig.cli import main
rc = main(sys.argv[1:])
print("probe", rc, taken, len(quick.STARTED))
"""


def _probe(rig, wt: Path, cache: Path) -> tuple[int, list[bool], int, str]:
    r = subprocess.run([sys.executable, "-c", QUICK_PROBE, "lane", "run", str(wt), "true"], cwd=h.WT,
                       env={**os.environ, **rig.env, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(h.WT)},
                       capture_output=True, text=True, timeout=120)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("probe ")]
    assert line, r.stderr
    _, rc, taken, left = line[0].split(" ", 3)
    return int(rc), json.loads(taken.replace("True", "true").replace("False", "false")), int(left), r.stderr


def test_a_gate_starts_its_client_from_the_last_gates_record_and_never_a_stale_one(lane_rig, tmp_path):
    """The second gate's SSH client is the one `lanes.quick` started from the first gate's record;
    a record whose argv is not the gate's (here: another agent hash) is started, not taken, and
    stopped; the gate runs on its own client all the same."""
    wt, cache = lane_rig.shared_worktree, tmp_path / "cache"
    assert _probe(lane_rig, wt, cache)[:3] == (0, [False], 0)          # no record yet
    record = cache / "nev" / "gate-argv.json"
    assert record.is_file()
    assert _probe(lane_rig, wt, cache)[:3] == (0, [True], 0)           # taken from the record
    data = json.loads(record.read_text())
    for entry in data.values():
        entry["argv"][-1] = entry["argv"][-1].rsplit(" ", 1)[0] + " " + "0" * 64
    record.write_text(json.dumps(data))
    rc, taken, left, err = _probe(lane_rig, wt, cache)
    assert (rc, taken, left) == (0, [False], 0), err
    assert "0" * 64 not in record.read_text()                          # recorded anew
    assert _probe(lane_rig, wt, cache)[:3] == (0, [True], 0)
