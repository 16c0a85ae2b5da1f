"""The one process-group stop: SIGTERM, wait, SIGKILL what is left; zombies do not count as alive."""

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
