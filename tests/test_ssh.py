"""The SSH choke point against a real sshd: pinned host keys, streaming, no secrets in logs."""

import logging
import subprocess

import pytest

from lanes.base.ssh import Connection, HostKeyError, Target, answers
from tests.helpers import local_sshd

pytestmark = pytest.mark.parts  # starts a local sshd here


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    s = local_sshd.start(tmp_path_factory.mktemp("sshd"))
    yield s
    s.stop()


def target(s) -> Target:
    return Target("127.0.0.1", s.user, s.port)


def test_runs_command_with_pinned_key(sshd):
    with Connection(target(sshd), sshd.known_hosts, sshd.client_key) as c:
        r = c.run("echo hello; echo oops >&2; exit 7")
    assert (r.exit_status, r.out, r.err) == (7, "hello\n", "oops\n")


def test_refuses_unknown_host_key(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(HostKeyError) as e:
        Connection(target(sshd), empty, sshd.client_key).connect()
    assert "not pinned" in str(e.value)


def test_refuses_changed_host_key(sshd, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kt, kb = other.with_suffix(".pub").read_text().split()[:2]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {kt} {kb}\n")
    with pytest.raises(HostKeyError) as e:
        Connection(target(sshd), kh, sshd.client_key).connect()
    assert "does not match" in str(e.value)


def test_answers_is_false_for_dead_port(sshd):
    assert answers(Target("127.0.0.1", sshd.user, local_sshd.free_port()), sshd.known_hosts,
                   sshd.client_key, timeout=2) is False
    assert answers(target(sshd), sshd.known_hosts, sshd.client_key) is True


def test_stdin_payload_goes_through_intact(sshd):
    data = bytes(range(256)) * 40000  # ~10 MB, every byte value
    with Connection(target(sshd), sshd.known_hosts, sshd.client_key) as c:
        r = c.run("sha256sum", stdin=data)
    import hashlib
    assert r.out.split()[0] == hashlib.sha256(data).hexdigest()


def test_write_file_keeps_content_off_argv_and_sets_mode(sshd, tmp_path):
    dest = tmp_path / "secret-file"
    with Connection(target(sshd), sshd.known_hosts, sshd.client_key) as c:
        c.write_file(str(dest), b"sk-secret-value-123\n", mode=0o600)
        assert c.read_file(str(dest)) == b"sk-secret-value-123\n"
    assert oct(dest.stat().st_mode & 0o777) == "0o600"


def test_logged_commands_are_masked(sshd, caplog):
    caplog.set_level(logging.DEBUG, logger="nev.ssh")
    with Connection(target(sshd), sshd.known_hosts, sshd.client_key) as c:
        c.run("true # http://u:tok3nvalue99887766554433221100aabbccdd@forge/x.git")
    assert "tok3nvalue" not in caplog.text and "***" in caplog.text


def test_forward_reaches_remote_port(sshd):
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def serve():
        conn, _ = srv.accept()
        conn.sendall(b"pong:" + conn.recv(10))
        conn.close()
    threading.Thread(target=serve, daemon=True).start()
    with Connection(target(sshd), sshd.known_hosts, sshd.client_key) as c, c.forward("127.0.0.1", port) as fwd:
        with socket.create_connection(("127.0.0.1", fwd.local_port), timeout=5) as s:
            s.sendall(b"ping")
            assert s.recv(100) == b"pong:ping"
    srv.close()


def test_output_is_complete_and_background_child_does_not_hold_the_run(sshd):
    import time as _time
    with Connection(target(sshd), sshd.known_hosts, sshd.client_key) as c:
        for _ in range(20):  # the exit status may come before the last output: nothing is lost
            r = c.run("head -c 30000 /dev/zero | base64 -w0; echo; echo =end")
            assert r.out.endswith("=end\n") and len(r.out) == 40000 + 1 + 5
        t0 = _time.monotonic()
        r = c.run("sleep 8 & echo started")  # the child keeps stdout open; no EOF comes
        assert r.out == "started\n" and _time.monotonic() - t0 < 7


# ---- the OpenSSH client's channel (a gate's) -----------------------------------------------------


def _drain(ch) -> tuple[bytes, bytes]:
    from lanes.base.openssh import wait_readable

    out, err = b"", b""
    while not ch.closed:
        wait_readable(ch, 0.2)
        while ch.recv_ready():
            out += ch.recv(65536)
        while not ch.quiet and ch.recv_stderr_ready():
            err += ch.recv_stderr(65536)
    return out, err


def test_openssh_channel_streams_both_ways_with_the_pinned_key(sshd):
    from lanes.base.openssh import OpenSsh

    with OpenSsh(target(sshd), sshd.known_hosts, sshd.client_key) as o:
        ch = o.open_session("cat; echo oops >&2; exit 7")
        data = bytes(range(256)) * 4000
        ch.sendall(data)
        ch.shutdown_write()
        out, err = _drain(ch)
        assert (out, err, ch.recv_exit_status()) == (data, b"oops\n", 7)
        assert ch.unreachable() is None


@pytest.mark.parametrize("pin", ["unknown", "changed"])
def test_openssh_refuses_a_host_key_not_pinned_or_not_matching(sshd, tmp_path, pin):
    from lanes.base.openssh import OpenSsh

    kh = tmp_path / "known_hosts"
    if pin == "unknown":
        kh.write_text("")
    else:
        other = tmp_path / "other"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
        kt, kb = other.with_suffix(".pub").read_text().split()[:2]
        kh.write_text(f"[127.0.0.1]:{sshd.port} {kt} {kb}\n")
    with OpenSsh(target(sshd), kh, sshd.client_key) as o:
        ch = o.open_session("echo ran")
        out, _ = _drain(ch)
        why = ch.unreachable()
    assert out == b"" and isinstance(why, HostKeyError)
    assert ("is not pinned" if pin == "unknown" else "does not match") in str(why)


def test_openssh_to_a_dead_port_is_unreachable_not_a_key_problem(sshd):
    from lanes.base.openssh import OpenSsh
    from lanes.base.ssh import SshError

    with OpenSsh(Target("127.0.0.1", sshd.user, local_sshd.free_port()), sshd.known_hosts, sshd.client_key) as o:
        ch = o.open_session("true")
        ch.sendall(b"dropped: nobody reads it")       # no BrokenPipeError: the reader says why
        _drain(ch)
        why = ch.unreachable()
    assert isinstance(why, SshError) and not isinstance(why, HostKeyError)
    assert "127.0.0.1" in str(why)


def test_a_channel_started_ahead_is_taken_by_the_same_command_only(sshd):
    from lanes.base import openssh as ssh

    o = ssh.OpenSsh(target(sshd), sshd.known_hosts, sshd.client_key)
    o.start_ahead("echo ahead")
    ahead = next(iter(ssh._AHEAD.values()))
    other = o.open_session("echo other")                 # another command: a client of its own
    assert other is not ahead and _drain(other)[0] == b"other\n"
    taken = ssh.OpenSsh(target(sshd), sshd.known_hosts, sshd.client_key).open_session("echo ahead")
    assert taken is ahead and ssh._AHEAD == {}
    assert _drain(taken)[0] == b"ahead\n"
    o.start_ahead("sleep 30")                            # nobody takes it: stopped at exit
    left = next(iter(ssh._AHEAD.values()))
    ssh._stop_ahead()
    assert left.closed and left.p.returncode is not None and ssh._AHEAD == {}
