"""The sandbox on an LXC lane of the rig-in-a-box: a hostile batch against the lane's own targets
(its home, ~/.ssh, caches, the NAS's corpus store, a loopback listener, the forge's rig address),
and a verify through `nev sandbox exec` that tries to read the lane's keys and reach the forge."""

from __future__ import annotations

import pytest

from tests.helpers import lane_helpers as h
from tests.helpers import lane_rig as rigs


@pytest.fixture(scope="module")
def lane0(box, tmp_path_factory):
    rig = rigs.on_box(box, tmp_path_factory.mktemp("sandboxbox"))
    try:
        inst = h.nev(["lane", "install", "--lane", "0"], rig.env, timeout=900)
        assert inst.returncode == 0, inst.stderr[-3000:]
        wt = h.clone_worktree(rig.clone_url, rig.tmp / ("sbx" + rig.tag), rig.push_env)
        yield rig, wt
    finally:
        rig.stop()


def test_a_hostile_batch_on_an_lxc_lane_gets_a_verdict_each_and_changes_nothing(lane0):
    rig, wt = lane0
    r = h.nev(
        ["lane", "run", "--lane", "0", str(wt), "nev", "sandbox", "check", "--hostile"],
        rig.env,
        timeout=900,
    )
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-3000:]
    assert "FAIL" not in out
    lines = [x for x in out.splitlines() if x.startswith("ok    hostile ")]
    # the host's attackers and the verdict's (crates_bridge.hostile.cheaters)
    assert len(lines) == 16 + 7, out
    for words in (
        "forbidden system call: openat",
        "forbidden system call: socket",
        "stack overflow",
        "killed: memory cap 2 GiB",
        "exited 0 before writing its outputs",
        "aborted",
        "timed out",
        "malformed output: line 2",
        "bytes of output, over the",
    ):
        assert any(words in x for x in lines), (words, out)
    assert sum(1 for x in out.splitlines() if x.startswith("ok    good ")) == 2
    assert "ok    unchanged: /srv/lane-shared/corpora" in out or "ok    unchanged: " in out
    assert "ok    no connection reached the loopback listener" in out


def test_a_verify_on_a_lane_sees_no_key_no_share_and_no_forge(lane0):
    rig, wt = lane0
    forge = rig.env.get("NEV_LANE_GIT_URL", "")
    script = (
        "ls -a ~ ; echo home=$HOME; cat ~/.lane-model-env 2>&1; ls $NEV_LANE_SHARED 2>&1; "
        "ls /srv/lane-shared 2>&1; git -C . rev-parse HEAD && echo git-ok; "
        'python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=5)" '
        f"'{forge or 'http://198.18.0.1/'}' 2>&1 | tail -1; echo end"
    )
    r = h.nev(
        ["lane", "run", "--lane", "0", str(wt), "nev", "sandbox", "exec", "--", "sh", "-c", script],
        rig.env,
        timeout=600,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "home=/tmp" in out and "git-ok" in out and "end" in out
    assert "NEV_LANE_MODEL_URL=" not in out  # the lane's model env file is not there
    assert "corpora" not in r.stdout and "gate-logs" not in r.stdout  # nor the share
    assert "Network is unreachable" in out or "URLError" in out or "Errno" in out


def test_a_persons_gate_asks_for_the_sandbox_with_a_flag(lane0):
    rig, wt = lane0
    script = "echo home=$HOME; test -e ~/.lane-model-env && echo model-env-seen; echo done"
    plain = h.nev(["lane", "run", "--lane", "0", str(wt), "sh", "-c", script], rig.env, timeout=600)
    jailed = h.nev(["lane", "run", "--sandbox", "--lane", "0", str(wt), "sh", "-c", script], rig.env,
                   timeout=600)
    assert plain.returncode == 0 and jailed.returncode == 0, plain.stderr[-2000:] + jailed.stderr[-2000:]
    assert "home=/home/lane" in plain.stdout and "done" in plain.stdout     # as the person: as today
    assert "home=/tmp" in jailed.stdout and "model-env-seen" not in jailed.stdout and "done" in jailed.stdout
