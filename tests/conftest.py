"""Shared fixtures. `box`: the rig-in-a-box, brought up once per session (see docs/box.md).

NEV_BOX_NAME (default "tbox") and NEV_BOX_NET (default "198.18.9") name and address it, so
several boxes coexist on one machine; NEV_BOX_KEEP=1 leaves it up at the end (the next session's
`up` is then a no-op). It is never skipped: without root it fails with the reason.

Every test that needs the box, directly or through another fixture, is marked `box` here, and so
is every test marked `parts` (it starts one of the box's heavy real parts on this machine without
the box: browsers, Dagu, HAProxy, sshd, the Rust compiler, a stand-in pool), so
`pytest -m "not box"` (the fast loop, about a minute) never brings one up or starts one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import hypothesis
import pytest

from lanes.base import settings

ROOT = Path(__file__).resolve().parent.parent

# Property tests assert outcomes, not speed (speed is for bench/perf): no per-example deadline,
# which a test run beside the box's tests (scripts/pytest-all) would otherwise miss now and then.
hypothesis.settings.register_profile("nev", deadline=None)
hypothesis.settings.load_profile("nev")


def test_box():
    """The session's Box object (not brought up)."""
    from rig.box import Box

    env = dict(os.environ)
    env.setdefault("NEV_BOX_DIR", str(ROOT / ".box"))
    return Box.from_settings(env, default_name="tbox", default_net="198.18.9")


test_box.__test__ = False  # type: ignore[attr-defined]

BOX_FIXTURES = {"box", "box_env"}


def pytest_report_header(config: pytest.Config) -> str:
    """Which lanes the box tests run on: LXC guests (the default, as on the rig) or netns lanes
    (NEV_BOX_LANES=netns, the quick local loop, which share this machine's filesystem)."""
    from lanes import create

    b = test_box()
    where = (f"unprivileged LXC guests (images cached in {create.cache()})" if b.lane_backend == "lxc"
             else "network namespaces sharing this machine's filesystem (not what the rig runs)")
    return f"rig-in-a-box {b.name} on {b.net}.0/24, lanes: {b.lane_backend}: {where}"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    # again at the end, which `pytest -q` (make test) shows too
    terminalreporter.write_line(pytest_report_header(config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # fixturenames is the closure: a fixture that asks for `box` brings it in too.
    for item in items:
        boxed = bool(BOX_FIXTURES & set(getattr(item, "fixturenames", ())))
        if boxed:
            item.add_marker(pytest.mark.boxed)
        if boxed or item.get_closest_marker("parts"):
            item.add_marker(pytest.mark.box)


@pytest.fixture(scope="session")
def box() -> Iterator:
    """The box's BoxInfo: up once for the session, down at the end even after failures."""
    b = test_box()
    try:
        yield b.up(lanes=2)
    finally:
        if not settings.get_flag(settings.BOX_KEEP):
            b.down()


@pytest.fixture
def box_env(box, monkeypatch) -> Iterator:
    """os.environ pointing nev at the box (the NEV_* variables of `nev box env`)."""
    for k, v in box.env.items():
        monkeypatch.setenv(k, v)
    yield box


@pytest.fixture(scope="module")
def ws():
    """The example engine, built (the sandbox's and the judge's tests)."""
    from crates_bridge.workspace import EXAMPLE_ENGINE, Workspace

    w = Workspace(EXAMPLE_ENGINE)
    w.build()
    return w


@pytest.fixture(scope="module")
def block_corpus(ws, tmp_path_factory):
    """A 120-case reference corpus of block_width."""
    from crates_bridge import corpus

    return corpus.write_reference_corpus(ws, "block_width", tmp_path_factory.mktemp("sc") / "block_width", 120)
