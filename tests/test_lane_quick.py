"""`lanes.quick`: the gate's SSH client started from an earlier gate's record, before nev loads."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from lanes import agentpack, gateargs, quick
from lanes.base.openssh import OpenSsh, client_options
from lanes.base.ssh import Target

GATE = gateargs.GateArgs("run", "wt", ("true",))
SECRET = "forgetok-quick-" + "5d1e9a77c3"


def nev_argv(tmp, digest: str = "a" * 64, host: str = "lane@10.0.0.1:22", jump: str | None = None) -> list[str]:
    """The gate's client argv as nev builds it (`OpenSsh.argv` of the lane agent's start)."""
    kh = tmp / "known hosts %x"                # a space and a % in a path, as a user may have
    kh.write_text("")
    o = OpenSsh(Target.parse(host), known_hosts=kh, key_file=tmp / "key", jump=Target.parse(jump) if jump else None)
    return o.argv(agentpack.lane_command(digest))


def write_cache(cache, data, mode: int = 0o600) -> str:
    path = cache / "cache" / "nev" / quick.CACHE_NAME
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    os.chmod(path, mode)
    return str(path)


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("NEV_LANES_FILE", str(tmp_path / "lanes.json"))
    monkeypatch.delenv("NEV_ON_LANE", raising=False)
    monkeypatch.delenv("GENERA_ON_LANE", raising=False)
    (tmp_path / "lanes.json").write_text('{"lanes": []}')
    (tmp_path / "agent.py").write_text("x = 1\n")
    yield tmp_path
    quick.stop_all()


@pytest.mark.parametrize("args,lane", [
    (["wt", "true"], ""), (["--lane", "2", "wt", "true"], "2"), (["--lane=1", "--pull", "o", "wt", "x"], "1"),
    (["--lane", "01", "wt", "true"], "1"), (["wt", "sh", "-c", "--lane 3"], ""),
])
def test_a_record_is_keyed_by_the_lane_the_gate_asks_for(args, lane):
    assert quick.lane_key(gateargs.parse("run", args).lane_index) == lane


@pytest.fixture
def echo_ssh(cache, monkeypatch):
    """`ssh` on PATH: a stand-in that echoes its input (the client nev starts is `ssh` by PATH)."""
    bindir = cache / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text("#!/bin/sh\nexec cat\n")
    (bindir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


def test_the_recorded_client_starts_and_only_the_same_argv_takes_it(cache, echo_ssh):
    argv = nev_argv(cache)
    quick.record("", argv, [str(cache / "lanes.json")])
    quick.start(GATE)
    assert list(quick.STARTED) == [tuple(argv)]
    p = quick.take(argv)
    assert isinstance(p, subprocess.Popen) and quick.STARTED == {}
    out, _ = p.communicate(b"through the client\n", timeout=10)
    assert out == b"through the client\n"

    quick.start(GATE)
    stale = next(iter(quick.STARTED.values()))
    assert quick.take(argv[:-1] + ["pass"]) is None                    # another argv: none taken,
    assert isinstance(stale, subprocess.Popen) and stale.returncode is not None   # the started one ended
    assert quick.STARTED == {}


def test_nothing_starts_on_a_lane_or_without_a_record(cache, monkeypatch, echo_ssh):
    argv = nev_argv(cache)
    quick.start(GATE)
    assert quick.STARTED == {}
    quick.record("", argv, [])
    monkeypatch.setenv("NEV_ON_LANE", "1")
    quick.start(GATE)
    assert quick.STARTED == {}
    monkeypatch.delenv("NEV_ON_LANE")
    quick.start(gateargs.GateArgs("run", "wt", ("true",), lane_index=1))   # another lane: none
    assert quick.STARTED == {}


def test_a_removed_working_folder_is_no_crash(cache, tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    argv = nev_argv(cache)
    monkeypatch.chdir(gone)
    gone.rmdir()
    quick.record("", argv, [])
    assert quick.lookup("") == argv


# -- issue 31, item 4: a cached record that can start a program is trusted only as the user's own --


def test_the_argv_nev_builds_is_what_a_record_may_hold_and_the_two_stay_in_step(tmp_path):
    import hashlib

    start = agentpack.lane_command("0" * 64).rpartition(" ")[0]
    assert hashlib.sha256(start.encode()).hexdigest() == quick.LANE_COMMAND_SHA256, \
        "the lane agent's start changed: set lanes/quick.py LANE_COMMAND_SHA256 to this sha256"
    # with a kept connection (`lanes.base.ssh.control`): every option a record may hold
    opts = client_options(tmp_path / "kh", tmp_path / "key", 5, (str(tmp_path / "ctl"), 60))
    assert {o.partition(" ")[0] for o in opts[3::2] if o != "-i"} | {"IdentitiesOnly"} >= set(quick.OPTIONS)
    assert {o.partition(" ")[0] for o in opts if " " in o} == set(quick.OPTIONS)
    assert all(quick._option_ok(o) for o in opts if " " in o)
    assert not quick._option_ok("ControlPath relative/ctl") and not quick._option_ok("ControlMaster yes")
    for jump in (None, "me@jump.example:2222"):
        assert quick.argv_ok(nev_argv(tmp_path, jump=jump))


def _evil(tmp, marker) -> list[list[str]]:
    good = nev_argv(tmp, jump="me@jump:22")
    i = next(i for i, a in enumerate(good) if a.startswith("ProxyCommand "))
    hop = good[i][len("ProxyCommand "):]
    touch = f"touch {marker}"
    return [
        ["sh", "-c", touch],
        [str(tmp / "ssh")] + good[1:],                                             # another ssh binary
        good[:i] + [f"ProxyCommand {touch}"] + good[i + 1:],                      # a ProxyCommand of its own
        good[:i] + ["ProxyCommand " + hop.replace(" -W ", f" \"$({touch})\" -W ")] + good[i + 1:],   # shell words
        good[:i] + ["LocalCommand " + touch] + good[i + 1:],                      # an option nev never gives
        good[:i] + ["PermitLocalCommand yes"] + good[i + 1:],
        good[:-1] + [touch],                                                       # another command
        good[:2] + ["-o", "ProxyCommand " + touch] + good[2:],
    ]


@pytest.mark.parametrize("which", range(8))
def test_a_record_that_is_not_nevs_client_is_never_started(cache, which, echo_ssh):
    marker = cache / "ran"
    argv = _evil(cache, marker)[which]
    assert not quick.argv_ok(argv)
    write_cache(cache, {quick.record_key(""): {"argv": argv, "files": []}})
    quick.start(GATE)
    assert quick.STARTED == {}
    assert not marker.exists()
    quick.record("", nev_argv(cache), [])                             # the next gate writes it anew
    assert [e["argv"] for e in json.loads((cache / "cache" / "nev" / quick.CACHE_NAME).read_text()).values()] \
        == [nev_argv(cache)]


@pytest.mark.parametrize("how", ["mode-666", "mode-644", "folder-777", "symlink", "too-large", "other-owner"])
def test_a_record_file_others_could_write_is_ignored_and_written_anew(cache, how, echo_ssh):
    argv = nev_argv(cache)
    path = write_cache(cache, {quick.record_key(""): {"argv": argv, "files": []}})
    assert quick.lookup("") == argv                                    # as the user's own: taken
    if how.startswith("mode-"):
        os.chmod(path, int(how[5:], 8))
    elif how == "folder-777":
        os.chmod(os.path.dirname(path), 0o777)
    elif how == "symlink":
        os.rename(path, path + ".real")
        os.symlink(path + ".real", path)
    elif how == "too-large":
        data = json.loads(open(path).read())
        data["junk"] = "x" * (quick.MAX_BYTES + 1)
        write_cache(cache, data)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(path, 4321, 4321)
    assert quick.lookup("") is None
    quick.start(GATE)
    assert quick.STARTED == {}
    quick.record("", argv, [])
    st = os.lstat(path)
    assert oct(st.st_mode & 0o777) == oct(0o600) and st.st_uid == os.geteuid() and not os.path.islink(path)
    assert not os.stat(os.path.dirname(path)).st_mode & 0o022
    assert st.st_size < quick.MAX_BYTES and quick.lookup("") == argv




def test_a_gate_never_starts_a_tampered_record_and_writes_it_anew(tmp_path):
    """End to end (`tests/helpers/local_lane.py`): the issue's case, an entry `sh -c ...` under the
    gate's own key at mode 666, is not run by the next `nev lane run`, which runs and records anew."""
    from tests.helpers.local_lane import LocalLane, make_repo

    lane = LocalLane(tmp_path)
    wt = make_repo(tmp_path / "wt")
    r = lane.nev(["lane", "run", str(wt), "true"])
    assert r.returncode == 0, r.stderr
    record = lane.cache / "nev" / quick.CACHE_NAME
    data = json.loads(record.read_text())
    assert len(data) == 1 and oct(record.stat().st_mode & 0o777) == oct(0o600)
    marker = tmp_path / "ran-from-the-cache"
    for entry in data.values():
        entry["argv"] = ["sh", "-c", f"touch {marker}"]
    record.write_text(json.dumps(data))
    for mode in (0o600, 0o666):
        os.chmod(record, mode)
        r = lane.nev(["lane", "run", str(wt), "true"])
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert not marker.exists()
        assert [e["argv"][0] for e in json.loads(record.read_text()).values()] == ["ssh"]
        assert oct(record.stat().st_mode & 0o777) == oct(0o600)
        data = json.loads(record.read_text())
        for entry in data.values():
            entry["argv"] = ["sh", "-c", f"touch {marker}"]
        record.write_text(json.dumps(data))
