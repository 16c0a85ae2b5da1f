"""nev's store builder for a gate (`bench/oracle/store_service.py`, started by the lane agent,
`lanes/agent/storeserve.py`): a gate's request is checked before anything is built or fetched,
and the agent starts the builder only when a gate asks."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from bench.oracle import store_service
from lanes.agent.storeserve import STORE_SOCKET, StoreService


@pytest.fixture
def builder(tmp_path, monkeypatch):
    """The builder serving on a socket in a short folder, in a thread; the socket's path."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="ss-", dir="/tmp"))
    monkeypatch.chdir(d)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(d / STORE_SOCKET))
    sock.listen(4)
    threading.Thread(target=store_service.serve, args=(sock.detach(),), daemon=True).start()
    yield d / STORE_SOCKET


def _ask(path: Path, raw: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(path))
        s.sendall(raw + b"\n")
        lines = s.makefile("rb").read().splitlines()
    return json.loads(lines[-1])


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (b"not json", "the request is not one JSON line"),
        (b'{"op": "plant"}', "op must be build or suites"),
        (
            b'{"op": "build", "corpora": ["../x"], "engines": ["chromium"], "count": 5}',
            "corpora must be a list of names",
        ),
        (
            b'{"op": "build", "corpora": ["block_width"], "engines": ["lynx"], "count": 5}',
            "engines must be among",
        ),
        (
            b'{"op": "build", "corpora": ["block_width"], "engines": ["chromium"], "count": 0}',
            "count must be a whole number from 1 to",
        ),
        (
            b'{"op": "build", "corpora": ["no_such_corpus"], "engines": ["chromium"], "count": 5}',
            "no_such_corpus",
        ),
        (
            b'{"op": "build", "corpora": ["block_width"], "engines": ["chromium"], "count": 5, '
            b'"store": "/home/lane/.ssh"}',
            "the corpus store must be a folder corpora* right under",
        ),
        (
            b'{"op": "suites", "suites": [{"name": "../x", "url": "file:///x", "commit": "a"}]}',
            "a suite needs a name, a url and a whole commit id",
        ),
        (
            b'{"op": "suites", "suites": [{"name": "x", "url": "ssh://git@elsewhere/x.git", "commit": "'
            + b"a" * 40
            + b'"}]}',
            "its url must be http(s), or a file: URL on the share",
        ),
        (
            b'{"op": "suites", "suites": [{"name": "x", "url": "file:///home/lane/dagu/job-mirror.git", '
            b'"commit": "' + b"a" * 40 + b'"}]}',
            "its url must be http(s), or a file: URL on the share",
        ),
    ],
)
def test_a_gates_request_is_checked_before_anything_is_built(builder, request_, words):
    got = _ask(builder, request_)
    assert not got.get("ok") and words in got["error"], got
    assert not (builder.parent / store_service.STAGING).exists()


def test_inside_a_gate_the_builders_refusal_is_one_error(builder, monkeypatch, tmp_path):
    from lanes.base.errors import NevError

    monkeypatch.setenv("NEV_STORE_SOCKET", str(builder))
    assert store_service.available()
    with pytest.raises(NevError, match="no_such_corpus"):
        store_service.build(store_service.Asked(["no_such_corpus"], ["chromium"], 5), tmp_path)
    monkeypatch.setenv("NEV_STORE_SOCKET", str(tmp_path / "gone.sock"))
    assert not store_service.available()


def test_the_agent_starts_no_builder_until_a_gate_asks_and_removes_its_folder(tmp_path):
    home = tmp_path / "home"
    nev = home / ".local" / "bin" / "nev"
    nev.parent.mkdir(parents=True)
    ran = tmp_path / "ran"
    nev.write_text(f'#!/bin/sh\necho "$@" > {ran}\nsleep 30\n')
    nev.chmod(0o755)
    folder = tmp_path / "payload" / "store"
    svc = StoreService(str(folder), str(home), dict(os.environ))
    assert svc.open()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_ISSOCK(os.stat(folder / STORE_SOCKET).st_mode)
    threading.Event().wait(0.5)
    assert svc.proc is None and not ran.exists()  # nobody asked: nothing started
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        dfd = os.open(folder, os.O_PATH | os.O_DIRECTORY)
        try:
            s.connect(f"/proc/self/fd/{dfd}/{STORE_SOCKET}")
        finally:
            os.close(dfd)
        for _ in range(50):
            if ran.exists() and ran.read_text():
                break
            threading.Event().wait(0.1)
    assert ran.read_text().startswith("oracle serve-store --fd "), ran.read_text()
    proc = svc.proc
    assert proc is not None
    svc.close()
    assert proc.poll() is not None and not folder.exists()
    # no nev on the lane: no socket, nothing made
    assert not StoreService(str(folder), str(tmp_path / "nohome"), {}).open()
    assert not folder.exists()
