"""The tick mends what it safely can, on the rig-in-a-box (rig/serving/mend.py): the pools' HAProxy
stopped, the probe holds every alias failing; the next tick starts HAProxy through the proxy
role's own `start` (its unit on the proxy host, over SSH through the jump host), the aliases
answer again, and the change log and a real webhook receiver say what was started and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rig import rigfile
from rig.box.netns import run_in
from tests.helpers.webhook import Receiver

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.box


@pytest.fixture
def receiver():
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def _env(box, tmp: Path, hook: Receiver) -> dict[str, str]:
    """The box's settings with this test's own state, snapshot, notes, and a rig file with a
    webhook; the probe turns an alias after one round either way."""
    src = Path(box.env["NEV_RIG_FILE"])
    loaded, doc = rigfile.load(src), json.loads(src.read_text())
    for key in ("known_hosts", "ssh_key"):
        if getattr(loaded, key) is not None:
            doc[key] = str(getattr(loaded, key))
    doc["notify"] = {"webhook": hook.url, "rig": "box"}
    (tmp / "rig.json").write_text(json.dumps(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "TRACKS_"))}
    env.update(box.env)
    env.pop("NEV_INVENTORY_LANE", None)
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "NEV_STATE_DIR": str(tmp / "state"),
            "NEV_RIG_FILE": str(tmp / "rig.json"),
            "NEV_INVENTORY": str(tmp / "inventory.json"),
            "NEV_RIG_NOTES": str(tmp / "notes"),
            "NEV_PROBE_FAILS": "1",
            "NEV_PROBE_OKS": "1",
        }
    )
    return env


def nev(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rig.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def statuses(env: dict[str, str], cwd: Path) -> dict[str, str]:
    r = nev(env, cwd, "rig", "probe", "--json")
    assert r.returncode == 0, r.stderr
    return {
        a["alias"]: a["status"]
        for a in json.loads(nev(env, cwd, "rig", "status", "--json").stdout)["aliases"]
    }


def test_a_stopped_haproxy_is_started_again_by_the_next_tick_and_the_log_and_webhook_say_why(
    box, tmp_path, receiver
):
    env = _env(box, tmp_path, receiver)
    repo = tmp_path / "repo"  # the tick's repository (no tracks, no jobs of its own)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "base",
        ],
        check=True,
    )
    unit = str(Path(box.dir) / "proxy" / "unit")
    assert set(statuses(env, repo).values()) == {"ready"}

    stop = run_in(box, "proxy", [unit, "stop"])
    assert stop.returncode == 0, stop.stderr
    assert run_in(box, "proxy", [unit, "status"]).returncode != 0
    down = statuses(env, repo)
    assert set(down.values()) == {"failing"}, down

    tick = nev(env, repo, "job", "poll")
    out = tick.stdout + tick.stderr
    assert tick.returncode == 0, out
    assert "mend: proxy proxy: HAProxy is not running" in out, out
    assert run_in(box, "proxy", [unit, "status"]).returncode == 0
    wait = nev(env, repo, "job", "poll")  # before the probe's next round: nothing named
    assert wait.returncode == 0 and "after the probe's last round" in wait.stderr + wait.stdout
    assert "not mended" not in wait.stderr + wait.stdout
    assert set(statuses(env, repo).values()) == {"ready"}  # ready again after one tick

    log = (tmp_path / "notes" / "changelog.md").read_text()
    entry = log[log.index(" mend proxy:proxy") :]
    assert "- who: the tick (" in entry and "HAProxy is not running" in entry
    assert f"- proxy proxy: `{unit} start` on root@" in entry
    assert "through the gateway: answered" in entry and "- result: done" in entry
    mended = [p for p in receiver.posts if p["kind"] == "mended"]
    assert [(p["state"], p["subject"]) for p in mended] == [("event", "proxy proxy")]
    assert "was failing: HAProxy is not running" in mended[0]["detail"]
    assert not [p for p in receiver.posts if p["kind"] == "not_mended"]

    again = nev(env, repo, "job", "poll")  # nothing left to mend
    assert again.returncode == 0 and "mend:" not in again.stdout + again.stderr
    assert len([p for p in receiver.posts if p["kind"] == "mended"]) == 1
