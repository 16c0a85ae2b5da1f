"""The one process-group stop: SIGTERM, wait, SIGKILL what is left; zombies do not count as alive."""

import os
import subprocess
import sys
import time

from lanes.base import procgroup

# A group of two: the leader and a child that both ignore SIGTERM (the worst case).
STUBBORN = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); print('up', flush=True); time.sleep(60)")


def _start(code: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "up"
    return p


def test_stop_kills_a_group_that_ignores_sigterm_after_the_grace():
    p = _start(STUBBORN)
    time.sleep(0.3)  # the child has set its handler
    assert procgroup.alive(p.pid)
    t0 = time.monotonic()
    procgroup.stop(p.pid, grace=0.5, leader=p)
    assert not procgroup.alive(p.pid)
    assert 0.5 <= time.monotonic() - t0 < 5
    assert p.poll() is not None  # the leader was reaped while waiting


def test_stop_returns_at_once_when_the_group_ends_on_sigterm():
    p = _start("import time; print('up', flush=True); time.sleep(60)")
    t0 = time.monotonic()
    procgroup.stop(p.pid, grace=10, leader=p)
    assert time.monotonic() - t0 < 3 and not procgroup.alive(p.pid)
    assert p.returncode == -15


def test_a_group_that_is_gone_is_left_alone():
    p = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    p.wait()
    assert not procgroup.alive(p.pid)
    procgroup.stop(p.pid, grace=0.1)


def test_the_one_stat_reader_takes_a_command_name_that_looks_like_fields(tmp_path):
    from lanes.base import procs

    fake = tmp_path / "x) Z 1 (y"            # the name in parentheses, with a bracket and a state
    fake.symlink_to("/bin/sleep")
    p = subprocess.Popen([str(fake), "30"], start_new_session=True)
    try:
        s = procs.stat(p.pid)
        assert s is not None and s.state != "Z" and s.ppid == os.getpid() and s.pgrp == p.pid
        assert procs.start_time(p.pid) == s.start and procs.pid_alive(p.pid)
        assert procs.alive(procs.ProcRec(key="k", host="local", pid=p.pid, start=s.start, argv=[]))
    finally:
        p.kill()
        time.sleep(0.2)
    zombie = procs.stat(p.pid)                # killed, not yet reaped: still read, but not alive
    assert zombie is not None and zombie.state == "Z"
    assert procs.start_time(p.pid) is None and not procs.pid_alive(p.pid)
    p.wait()
    assert procs.stat(p.pid) is None and procs.start_time(p.pid) is None
    assert not procs.pid_alive(p.pid)
