"""`nev box env` from any folder (the machine's registry finds the box) and what it prints: the
rig's own snapshot and Dagu lane, and a git credential helper for the forge's forward that a
real `git clone` over HTTP with basic auth uses (no box: a box.json written from the box's own
layout, a registry folder of the test's, a small HTTP git server)."""

from __future__ import annotations

import base64
import http.server
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lanes.base import gitrun
from rig.box import plan, state
from rig.box.core import Box, git_credential_env
from rig.box.state import BoxState

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "tok-0123456789abcdef"


def _entry(tmp: Path, name: str, net: str, up: bool = True) -> dict:
    d = tmp / name
    d.mkdir(parents=True)
    if up:
        (d / "box.json").write_text("{}")
    return {"name": name, "net": net, "dir": str(d), "users": []}


@pytest.mark.parametrize(
    ("name", "boxes", "want"),
    [
        ("a", ["a", "b"], "a"),  # by name
        (None, ["b"], "b"),  # no name: the only box up
        (None, ["nevbox", "b"], "nevbox"),  # no name: the default's, among several
    ],
)
def test_resolve_finds_the_box_a_reading_command_means(tmp_path, name, boxes, want):
    entries = {n: _entry(tmp_path, n, f"198.18.{i}") for i, n in enumerate(boxes)}
    got = state.resolve(name, entries, "nevbox")
    assert isinstance(got, dict) and got["name"] == want


def test_resolve_names_the_registry_and_the_folders_when_no_such_box_is_up(tmp_path):
    entries = {
        "tbox": _entry(tmp_path, "tbox", "198.18.9"),
        "gone": _entry(tmp_path, "gone", "198.18.8", up=False),
    }
    why = state.resolve("nevbox", entries, "nevbox")
    assert isinstance(why, str)
    assert "no box named nevbox is up" in why and f"tbox ({tmp_path / 'tbox'})" in why
    assert "gone" not in why and "nev box up" not in why  # a stale entry is no box
    both = {**entries, "x": _entry(tmp_path, "x", "198.18.7")}
    assert "several boxes are up" in str(state.resolve(None, both, "nevbox"))
    assert "`nev box up` builds one" in str(
        state.resolve("a", {}, "nevbox")
    )  # only when none is up


def _write_box(tmp: Path, name: str, net: str) -> Path:
    """A box folder with the box.json `nev box up` writes (its info from the box's own layout)."""
    b = Box(name, net, tmp / "boxes" / name, lanes="netns")
    info = b._info(plan.Layout(name, net, 2))
    b.dir.mkdir(parents=True)
    state.write_state(
        b.dir, BoxState(info=info, complete=True, lane_count=2, forward_state=str(tmp / "fwstate"))
    )
    return b.dir


def _nev_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "GIT_CONFIG"))
    }
    env.update({"PYTHONPATH": str(ROOT), "NEV_BOX_REGISTRY": str(tmp / "registry"), **extra})
    return env


def _box_env(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rig.cli", "box", "env"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _exports(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        out[k] = shlex.split(v)[0] if v else ""
    return out


def test_box_env_from_another_folder_finds_the_box_through_the_registry(tmp_path, monkeypatch):
    d = _write_box(tmp_path, "hbox", "198.18.41")
    monkeypatch.setattr(state, "REGISTRY", tmp_path / "registry")
    state.register("hbox", "198.18.41", d, [])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _box_env(elsewhere, _nev_env(tmp_path))  # neither NEV_BOX_DIR nor NEV_BOX_NAME
    assert r.returncode == 0, r.stderr
    ex = _exports(r.stdout)
    assert ex["NEV_BOX_DIR"] == str(d.parent) and ex["NEV_BOX_NAME"] == "hbox"
    assert ex["NEV_BOX_NET"] == "198.18.41"  # the box's net, not the setting's default
    assert ex["NEV_LANES_FILE"] == str(d / "lane.local.json")
    assert ex["NEV_INVENTORY_LANE"] == "0" and ex["NEV_DAGU_LANE"] == "0"
    assert ex["NEV_STATE_DIR"] == str(tmp_path / "fwstate")
    assert (
        ex["GIT_CONFIG_KEY_0"].startswith("credential.http://127.0.0.1:")
        and "NEV_INVENTORY" not in ex
    )
    (d / "forge").mkdir()
    (d / "forge" / "token").write_text(TOKEN + "\n")
    assert TOKEN not in _box_env(elsewhere, _nev_env(tmp_path)).stdout

    other = _box_env(elsewhere, _nev_env(tmp_path, NEV_BOX_NAME="nobox"))
    assert other.returncode == 1 and other.stderr.count("\n") == 1
    assert "no box named nobox is up" in other.stderr and f"hbox ({d})" in other.stderr
    assert str(tmp_path / "registry" / "boxes") in other.stderr and "nev box up" not in other.stderr
    wrong = _box_env(
        elsewhere, _nev_env(tmp_path, NEV_BOX_DIR=str(tmp_path / "nothing"), NEV_BOX_NAME="hbox")
    )
    assert wrong.returncode == 1 and f"the registry has it in {d}" in wrong.stderr


class _GitHttp(http.server.SimpleHTTPRequestHandler):
    """Dumb-HTTP git behind basic auth (nev:TOKEN), as the box's forge asks for a credential."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        want = "Basic " + base64.b64encode(f"nev:{TOKEN}".encode()).decode()
        if self.headers.get("Authorization") != want:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="forge"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def forge(tmp_path) -> Iterator[str]:
    work = gitrun.init(tmp_path / "work")
    (tmp_path / "work" / "f").write_text("x\n")
    work.git("add", "f")
    work.git("commit", "-q", "-m", "one")
    repos = tmp_path / "repos"
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(tmp_path / "work"), str(repos / "engine.git")],
        check=True,
    )
    subprocess.run(["git", "-C", str(repos / "engine.git"), "update-server-info"], check=True)
    srv = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: _GitHttp(*a, directory=str(repos))
    )
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()


def test_clone_through_the_forward_asks_nothing_with_box_envs_credential_helper(tmp_path, forge):
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    base.update({"GIT_TERMINAL_PROMPT": "0", "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"})
    url = forge + "engine.git"
    bare = subprocess.run(
        ["git", "clone", "-q", url, str(tmp_path / "a")],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert bare.returncode != 0  # the server does ask for a credential
    cred = git_credential_env(forge + "git/", "nev", tf)
    assert TOKEN not in "".join(cred.values())
    ok = subprocess.run(
        ["git", "clone", "-q", url, str(tmp_path / "b")],
        env={**base, **cred},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "b" / "f").read_text() == "x\n"
    elsewhere = git_credential_env(
        "http://127.0.0.2:9/git/", "nev", tf
    )  # another host: not answered
    no = subprocess.run(
        ["git", "clone", "-q", url, str(tmp_path / "c")],
        env={**base, **elsewhere},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert no.returncode != 0
