"""The kept connection per lane (OpenSSH ControlMaster/ControlPersist, `lanes.base.ssh.control`):
its socket only in a folder of this user's alone, checked before every use; one master carries
consecutive commands; a master that died leaves a stale socket that the next client replaces; a
failure with a stale socket is classified as any other (docs/lanes.md, "The kept connection")."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lanes import quick
from lanes.base import ssh, sshfail
from lanes.base.openssh import OpenSsh, wait_readable
from lanes.base.ssh import Target
from tests.helpers import local_sshd


@pytest.fixture
def tmp_path():
    """A short folder: a socket's path holds at most 107 bytes (pytest's own are long)."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="nc-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _env(tmp_path: Path, **kw: str) -> dict[str, str]:
    return {"XDG_RUNTIME_DIR": str(tmp_path / "run"), "HOME": str(tmp_path / "home"), **kw}


def test_the_socket_folder_is_made_0700_and_the_name_says_nothing_of_the_host(tmp_path):
    (tmp_path / "run").mkdir(mode=0o700)
    env = _env(tmp_path)
    got = ssh.control(
        Target("lane-7.rig.example", "lane", 2222),
        Target("jump.example", "nev"),
        tmp_path / "known_hosts",
        None,
        env,
    )
    assert got is not None
    path, persist = got
    folder = tmp_path / "run" / "nev-ssh"
    assert Path(path).parent == folder and persist == 60
    assert (os.lstat(folder).st_mode & 0o777) == 0o700
    assert re.fullmatch(r"[0-9a-f]{24}", Path(path).name)
    # another hop, pin file or key: another master
    other = ssh.control(
        Target("lane-7.rig.example", "lane", 2222), None, tmp_path / "known_hosts", None, env
    )
    assert other is not None and other[0] != path
    # without XDG_RUNTIME_DIR: the cache folder, made 0700 too
    home = ssh.control(Target("h"), None, tmp_path / "kh", None, {"HOME": str(tmp_path / "home")})
    assert home is not None and Path(home[0]).parent == tmp_path / "home" / ".cache" / "nev" / "ssh"
    assert (os.lstat(Path(home[0]).parent).st_mode & 0o777) == 0o700


def test_a_folder_of_the_wrong_mode_or_owner_is_refused_with_one_line(tmp_path, caplog):
    (tmp_path / "run").mkdir()
    folder = tmp_path / "run" / "nev-ssh"
    folder.mkdir(mode=0o700)
    os.chmod(folder, 0o755)
    with caplog.at_level(logging.DEBUG, logger="nev.ssh"):
        got = ssh.control(Target("h"), None, tmp_path / "kh", None, _env(tmp_path))
    assert got is None
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"ssh: no kept connection: {folder} is mode 0755, not 0700; a connection of its own"
    ], said
    # the quick start refuses a recorded client naming a socket there
    argv = ["ssh", "-T", "-o", f"ControlPath {folder}/abc", "-p", "22", "lane@h"]
    assert not quick.control_ok(argv)
    os.chmod(folder, 0o700)
    assert quick.control_ok(argv)
    # a link in its place is no folder of ours
    folder.rename(tmp_path / "real")
    folder.symlink_to(tmp_path / "real")
    assert ssh.folder_problem(folder) == f"{folder} is not a folder"
    assert ssh.control(Target("h"), None, tmp_path / "kh", None, _env(tmp_path)) is None
    # someone else's folder
    theirs = tmp_path / "real"
    if os.getuid() == 0:
        os.chown(theirs, 12345, 12345)
    else:
        theirs = Path("/")
    uid = os.lstat(theirs).st_uid
    assert ssh.folder_problem(theirs) == f"{theirs} belongs to uid {uid}, not to this user"
    # 0 turns it off
    assert (
        ssh.control(Target("h"), None, tmp_path / "kh", None, _env(tmp_path, NEV_SSH_PERSIST="0"))
        is None
    )


@pytest.fixture
def route(tmp_path):
    jump = local_sshd.start(tmp_path / "jump", "127.0.0.1")
    lane = local_sshd.start(tmp_path / "lane", "127.0.0.2")
    (tmp_path / "lane" / "authorized_keys").write_text(
        jump.client_key.with_suffix(".pub").read_text()
    )
    kh = tmp_path / "known_hosts"
    kh.write_text(jump.known_hosts.read_text() + lane.known_hosts.read_text())
    yield jump, lane, kh
    jump.stop()
    lane.stop()


def _run(o: OpenSsh, command: str) -> str:
    """`command` over `o`: its stdout, or the classified SshError raised."""
    ch = o.open_session(command)
    out = bytearray()
    while not ch.closed:
        wait_readable(ch, 0.2)
        while ch.recv_ready():
            out += ch.recv(65536)
        while ch.recv_stderr_ready():
            ch.recv_stderr(65536)
    problem = ch.unreachable()
    ch.close()
    if problem is not None:
        raise problem
    return out.decode()


def _master(path: str) -> int | None:
    p = subprocess.run(
        ["ssh", "-O", "check", "-o", f"ControlPath {path}", "x"], capture_output=True, text=True
    )
    m = re.search(r"pid=(\d+)", p.stderr)
    return int(m.group(1)) if p.returncode == 0 and m else None


@pytest.mark.parts
def test_one_master_carries_two_commands_and_a_stale_socket_falls_back(
    route, tmp_path, monkeypatch
):
    jump, lane, kh = route
    (tmp_path / "run").mkdir(mode=0o700)
    for k, v in _env(tmp_path, NEV_SSH_PERSIST="30").items():
        monkeypatch.setenv(k, v)
    o = OpenSsh(
        Target("127.0.0.2", lane.user, lane.port),
        kh,
        jump.client_key,
        jump=Target("127.0.0.1", jump.user, jump.port),
    )
    control = ssh.control(o.target, o.jump, kh, jump.client_key)
    assert control is not None
    path = control[0]
    try:
        first = _run(o, "echo $SSH_CONNECTION")
        pid = _master(path)
        assert pid is not None, "no master kept after the first command"
        # the second command rides the same TCP connection (the same source port at the lane)
        assert _run(o, "echo $SSH_CONNECTION") == first
        assert _master(path) == pid
        # the master dies without cleaning up: its socket stays, stale; the next client replaces it
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.3)
        assert os.path.exists(path)
        third = _run(o, "echo $SSH_CONNECTION")
        assert third.split()[:2] != first.split()[:2] and third.split()[2:] == first.split()[2:]
        again = _master(path)
        assert again is not None and again != pid
        # a stale socket and the lane down: the failure is classified as without a master
        os.kill(again, signal.SIGKILL)
        lane.stop()
        time.sleep(0.3)
        with pytest.raises(sshfail.Unreachable) as e:
            _run(o, "true")
        assert e.value.cause is sshfail.Cause.REFUSED, str(e.value)
        assert "127.0.0.2" in str(e.value), str(e.value)
    finally:
        subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath {path}", "x"], capture_output=True)
