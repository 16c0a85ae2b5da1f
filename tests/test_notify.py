"""The operator's webhook (lanes/base/notify.py): a real HTTP receiver gets one POST per event when
it is caused at its hook site (the tick with real repositories, the disk guard of a real gate,
a forward's supervisor, the probe's alias check), one per incident for what stays down, the
outbox keeps what the receiver did not take until a later tick, and the URL's token is in no
line nev writes."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lanes.base import notify
from lanes.base.errors import ConfigError
from lanes.base.inventory_record import Snapshot
from rig import rigfile
from rig.inventory import status as inv_status
from tests.helpers.job_helpers import ROOT, nev
from tests.helpers.webhook import TOKEN, Receiver, rig_file
from tests.test_job_poll import _env as poll_env
from tests.test_job_poll import _forge_with_result


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def _tick_env(tmp: Path, forge: Path, hook: Receiver) -> dict[str, str]:
    env = poll_env(tmp, forge)
    env["NEV_RIG_FILE"] = str(rig_file(tmp / "rig", hook.url))
    return env


def _lines_hold_no_token(*texts: str) -> None:
    for t in texts:
        assert TOKEN not in t, t
        assert "hooks/" not in t, t


def _state_files(tmp: Path) -> str:
    return "".join(p.read_text() for p in (tmp / "state" / "notify").glob("*.json"))


# -- the tick: jobs landed and failed, ticks failing ----------------------------------------------


def test_a_job_failed_for_good_posts_once_with_the_documented_payload(tmp_path, receiver):
    forge, dev = _forge_with_result(tmp_path, "failed", 10)
    env = _tick_env(tmp_path, forge, receiver)
    r1 = nev(["job", "poll", "--repo", str(dev)], env)
    assert r1.returncode == 1 and "demo: failed" in r1.stderr
    assert receiver.kinds() == [("job_failed", "event", "demo")]
    r2 = nev(["job", "poll", "--repo", str(dev)], env)  # recorded already: nothing new
    assert r2.returncode == 0
    assert receiver.kinds() == [("job_failed", "event", "demo")]
    p = receiver.posts[0]
    assert set(p) == {"nev", "kind", "state", "at", "rig", "subject", "detail", "key"}
    assert (
        p["rig"] == "testrig"
        and "exit 10" in p["detail"]
        and p["key"].startswith("job_failed/demo/")
    )
    assert dt.datetime.fromisoformat(p["at"]).tzinfo is not None
    assert receiver.paths == [f"/hooks/{TOKEN}"]
    _lines_hold_no_token(r1.stderr, r1.stdout, r2.stderr, _state_files(tmp_path))


def test_a_job_failed_first_without_then_with_its_result_posts_once(tmp_path, receiver):
    """A run that ended without a result fails the job (one tick); its result, seen by a later
    tick, fails it again: one POST, not two."""
    import dataclasses

    from jobs import records

    forge, dev = _forge_with_result(tmp_path, "failed", 10)
    env = _tick_env(tmp_path, forge, receiver)
    assert nev(["job", "poll", "--repo", str(dev)], env).returncode == 1
    with records.locked(env) as recs:          # as if the first tick had seen no result yet
        recs.jobs["demo"] = dataclasses.replace(recs.job("demo"), result=None)
    r2 = nev(["job", "poll", "--repo", str(dev)], env)
    assert "demo: failed" in r2.stderr
    assert receiver.kinds() == [("job_failed", "event", "demo")]


def test_a_landing_posts_landed_once(tmp_path, receiver):
    forge, dev = _forge_with_result(tmp_path, "passed", 0, spec_on_main=True, verify="true")
    env = {
        **_tick_env(tmp_path, forge, receiver),
        "NEV_LANES_FILE": str(tmp_path / "no-lanes.json"),
        "NEV_ON_LANE": "1",
    }
    r = nev(["job", "poll", "--repo", str(dev)], env, timeout=180)
    assert "demo: landed" in r.stderr, r.stderr
    assert receiver.kinds() == [("landed", "event", "demo")]
    # the landing's announcement (jobs/land_after.py): the batches of its ledger (none here)
    post = receiver.posts[0]
    assert post["detail"].startswith("no batch of `demo` in the ledger")
    assert "\nmain " in post["detail"]
    assert post["announcement"]["title"].startswith("demo landed")
    assert nev(["job", "poll", "--repo", str(dev)], env).returncode == 0
    assert receiver.kinds() == [("landed", "event", "demo")]
    assert notify.counts({"NEV_STATE_DIR": str(tmp_path / "state")}) == {"landed": 1}


def test_a_tick_that_failed_twice_running_posts_once_and_the_next_good_tick_recovers(
    tmp_path, receiver
):
    forge, dev = _forge_with_result(tmp_path, "failed", 10)
    good = _tick_env(tmp_path, forge, receiver)
    bad = {**good, "NEV_LANE_GIT_URL": str(tmp_path / "no-such-forge.git")}
    first = nev(["job", "poll", "--repo", str(dev)], bad)
    assert "nev: git ls-remote failed" in first.stderr, first.stderr  # the tick itself failed
    assert receiver.kinds() == []  # once is no pattern yet
    for _ in range(2):
        assert "nev: git ls-remote failed" in nev(["job", "poll", "--repo", str(dev)], bad).stderr
    assert receiver.kinds() == [("tick_failed", "down", "tick")]  # the second and third: one POST
    assert "3 ticks failed running" not in receiver.posts[0]["detail"]
    assert (
        nev(["job", "poll", "--repo", str(dev)], good).returncode == 1
    )  # a job failed: a good tick
    assert receiver.kinds() == [
        ("tick_failed", "down", "tick"),
        ("job_failed", "event", "demo"),
        ("tick_failed", "recovered", "tick"),
    ]
    down, rec = receiver.posts[0], receiver.posts[2]
    assert rec["key"] == down["key"] + "/recovered"
    assert notify.counts({"NEV_STATE_DIR": str(tmp_path / "state")}) == {
        "tick_failed": 3,
        "job_failed": 1,
    }


def test_a_post_the_receiver_refuses_is_kept_in_the_outbox_and_the_next_tick_delivers_it(
    tmp_path, receiver
):
    forge, dev = _forge_with_result(tmp_path, "failed", 10)
    env = _tick_env(tmp_path, forge, receiver)
    receiver.status = 500
    r1 = nev(["job", "poll", "--repo", str(dev)], env)
    assert r1.returncode == 1 and receiver.kinds() == []
    said = [ln for ln in r1.stderr.splitlines() if ln.startswith("notify:")]
    assert len(said) == 1 and "job_failed demo: not delivered (HTTP 500)" in said[0], r1.stderr
    assert "http://127.0.0.1" not in said[0]
    outbox = json.loads((tmp_path / "state" / "notify" / "outbox.json").read_text())["pending"]
    assert [m["kind"] for m in outbox] == ["job_failed"]
    receiver.status = 200
    r2 = nev(["job", "poll", "--repo", str(dev)], env)
    assert r2.returncode == 0
    assert receiver.kinds() == [("job_failed", "event", "demo")]
    assert receiver.posts[0]["key"] == outbox[0]["key"]  # the same message: a receiver can dedupe
    assert json.loads((tmp_path / "state" / "notify" / "outbox.json").read_text())["pending"] == []
    _lines_hold_no_token(r1.stderr, r2.stderr, _state_files(tmp_path))


def test_a_receiver_that_does_not_answer_never_fails_the_caller(tmp_path, receiver):
    url = receiver.url
    receiver.close()  # nobody listens there now
    env = {
        "NEV_STATE_DIR": str(tmp_path / "state"),
        "NEV_RIG_FILE": str(rig_file(tmp_path / "rig", url)),
        "NEV_NOTIFY_TIMEOUT": "2",
    }
    t0 = time.monotonic()
    for i in range(3):
        notify.event(notify.Kind.LANDED, f"job{i}", "landed on main", f"c{i}", env)
    assert time.monotonic() - t0 < 10
    pending = json.loads((tmp_path / "state" / "notify" / "outbox.json").read_text())["pending"]
    assert [m["subject"] for m in pending] == [
        "job0",
        "job1",
        "job2",
    ]  # in order, for the next tick


def test_a_receiver_that_hangs_costs_one_timeout_for_a_whole_tick_of_events(tmp_path):
    import socket

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)                 # connections are taken by the kernel, never answered
    try:
        url = f"http://127.0.0.1:{hung.getsockname()[1]}/hooks/{TOKEN}"
        env = {"NEV_STATE_DIR": str(tmp_path / "state"),
               "NEV_RIG_FILE": str(rig_file(tmp_path / "rig", url)), "NEV_NOTIFY_TIMEOUT": "1.5"}
        t0 = time.monotonic()
        for i in range(5):
            notify.event(notify.Kind.JOB_FAILED, f"job{i}", "failed", f"r{i}", env)
        took = time.monotonic() - t0
    finally:
        hung.close()
    assert 1.4 < took < 4, took                  # one timeout, not five
    box = json.loads((tmp_path / "state" / "notify" / "outbox.json").read_text())["pending"]
    assert len(box) == 5


# -- what stays down: one POST per incident -------------------------------------------------------


def _snap(now: dt.datetime, **aliases: tuple[str, float]) -> dict:
    return {
        "probed_at": now.isoformat(),
        "aliases": {
            name: {
                "status": st,
                "since": (now - dt.timedelta(seconds=ago)).isoformat(),
                "last_error": "HTTP 503: overloaded" if st != "ready" else None,
            }
            for name, (st, ago) in aliases.items()
        },
    }


def test_an_alias_down_for_three_hours_posts_once_and_its_recovery_once(tmp_path, receiver):
    env = {
        "NEV_STATE_DIR": str(tmp_path / "state"),
        "NEV_RIG_FILE": str(rig_file(tmp_path / "rig", receiver.url)),
        "NEV_NOTIFY_ALIAS_DOWN_S": "3600",
    }
    now = dt.datetime.now(dt.UTC)
    for minutes in range(0, 180, 5):  # a probe round every 5 min for 3 h; the alias failing from 0
        t = now + dt.timedelta(minutes=minutes)
        snap = _snap(t, big=("failing", 60 * minutes), small=("ready", 9000), new=("failing", 60))
        snap["aliases"]["big"]["since"] = now.isoformat()
        inv_status.notify_aliases(Snapshot.from_json(snap, "t"), t, env)
    assert receiver.kinds() == [("alias_down", "down", "big")]  # `new` is under the threshold
    assert (
        "failing for" in receiver.posts[0]["detail"] and "HTTP 503" in receiver.posts[0]["detail"]
    )
    inv_status.notify_aliases(Snapshot.from_json(_snap(now, big=("ready", 10)), "t"), now, env)
    inv_status.notify_aliases(Snapshot.from_json(_snap(now, big=("ready", 300)), "t"), now, env)
    assert receiver.kinds() == [("alias_down", "down", "big"), ("alias_down", "recovered", "big")]
    assert receiver.posts[1]["key"] == receiver.posts[0]["key"] + "/recovered"


def test_a_lane_whose_disk_is_short_posts_once_and_a_gate_with_room_recovers(
    tmp_path, receiver, monkeypatch
):
    import contextlib

    from lanes import gate
    from lanes import sweep as sw
    from lanes.base.errors import DiskShortError
    from lanes.lanesfile import Lane
    from tests.helpers.local_lane import LocalLane, make_repo

    lane = LocalLane(tmp_path)
    for k in [k for k in os.environ if k.startswith(("NEV_", "GENERA_"))]:
        monkeypatch.delenv(k)
    env = lane.env(
        NEV_LANE_MIN_FREE_GB="1000000",
        NEV_STATE_DIR=str(tmp_path / "state"),
        NEV_RIG_FILE=str(rig_file(tmp_path / "rig", receiver.url)),
    )
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(sw, "sweep_lane", lambda conn, ln, *a: sw.LaneSweep(ln))  # nothing to sweep
    monkeypatch.setattr(Lane, "connect", lambda self, timeout=5: contextlib.nullcontext(None))
    repo = make_repo(tmp_path / "engine")
    for _ in range(3):
        with pytest.raises(DiskShortError):
            gate.run(repo, ["true"])
    assert receiver.kinds() == [("disk_short", "down", "lane 0")]
    assert (
        "GiB free" in receiver.posts[0]["detail"]
        and "NEV_LANE_MIN_FREE_GB" in receiver.posts[0]["detail"]
    )
    monkeypatch.setenv("NEV_LANE_MIN_FREE_GB", "0")
    assert gate.run(repo, ["true"]) == 0
    assert receiver.kinds() == [
        ("disk_short", "down", "lane 0"),
        ("disk_short", "recovered", "lane 0"),
    ]


def test_a_forward_whose_client_keeps_failing_posts_once(tmp_path, receiver):
    from tests.helpers.job_helpers import free_port

    closed = free_port()  # the jump host: nobody listens there
    rig = tmp_path / "rig"
    path = rig_file(rig, receiver.url)
    doc = json.loads(path.read_text())
    (rig / "known_hosts").write_text("")
    doc.update(
        {
            "jump": f"root@127.0.0.1:{closed}",
            "known_hosts": str(rig / "known_hosts"),
            "forwards": {
                "forge": {"local_port": free_port(), "target": "127.0.0.1:9", "check": "tcp"}
            },
        }
    )
    path.write_text(json.dumps(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update(
        {
            "NEV_RIG_FILE": str(path),
            "NEV_STATE_DIR": str(tmp_path / "state"),
            "PYTHONPATH": str(ROOT),
            "NEV_NOTIFY_FORWARD_DOWN_S": "1",
        }
    )
    err = (tmp_path / "supervisor.err").open("w")
    sup = subprocess.Popen(
        [sys.executable, "-m", "rig.cli", "rig", "forward", "supervise", "forge"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,
    )
    try:
        assert receiver.wait(1, timeout=20) == [("forward_down", "down", "forge")]
        time.sleep(4)  # more failed clients: no more POSTs
        assert receiver.kinds() == [("forward_down", "down", "forge")]
    finally:
        os.kill(sup.pid, signal.SIGTERM)
        sup.wait(timeout=20)
        err.close()
    detail = receiver.posts[0]["detail"]
    assert "no client up for" in detail and f"127.0.0.1:{closed}" in detail
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "state").rglob("*.log"))
    _lines_hold_no_token(logs, (tmp_path / "supervisor.err").read_text())


# -- the webhook's URL is a secret ----------------------------------------------------------------


def test_the_rig_file_names_a_bad_webhook_without_showing_it(tmp_path):
    path = tmp_path / "rig.local.json"
    path.write_text(json.dumps({"notify": {"webhook": f"ftp://chat.example/{TOKEN}"}}))
    with pytest.raises(ConfigError) as e:
        rigfile.load(path)
    assert "notify.webhook" in e.value.message and str(path) in e.value.message
    _lines_hold_no_token(e.value.message, repr(e.value))
    path.write_text(json.dumps({"notify": {"webhook": "https://a.example/x", "webhook_file": "f"}}))
    with pytest.raises(ConfigError, match="one of webhook"):
        rigfile.load(path)
    path.write_text(json.dumps({"notify": {"webhook_file": "hook.url", "rig": "lab"}}))
    hook = rigfile.load(path).notify
    assert hook is not None and hook.rig == "lab" and hook.file == tmp_path / "hook.url"
    assert TOKEN not in repr(hook)


def test_a_missing_webhook_file_keeps_the_message_and_names_the_file(tmp_path, capsys):
    path = tmp_path / "rig.local.json"
    path.write_text(json.dumps({"notify": {"webhook_file": "hook.url"}}))
    env = {"NEV_STATE_DIR": str(tmp_path / "state"), "NEV_RIG_FILE": str(path)}
    notify.event(notify.Kind.JOB_FAILED, "demo", "failed", "r1", env)
    err = capsys.readouterr().err
    assert "hook.url" in err and "kept in" in err
    assert (
        len(json.loads((tmp_path / "state" / "notify" / "outbox.json").read_text())["pending"]) == 1
    )


def test_no_notify_in_the_rig_file_sends_and_keeps_nothing(tmp_path):
    env = {"NEV_STATE_DIR": str(tmp_path / "state"), "NEV_RIG_FILE": str(tmp_path / "none.json")}
    notify.event(notify.Kind.LANDED, "demo", "landed", "c1", env)
    notify.down(notify.Kind.DISK_SHORT, "lane 0", "short", environ=env)
    assert not (tmp_path / "state" / "notify" / "outbox.json").exists()
    assert not (tmp_path / "state" / "notify" / "conditions.json").exists()
    assert notify.counts(env) == {"landed": 1}  # counted all the same (metrics)
