"""A team on one rig (issue 33): two development boxes on the rig-in-a-box at once, each with its
own state folder, its own checkout of its own repository on the box's forge, and its own SSH key
(the second authorized on the jump host, the lanes and the service hosts as an operator would).
Interleaved in two threads: 10 gates and 4 jobs each on lane 0, `nev lane sweep` from each between
rounds, each box's `nev job poll` landing its own jobs. Every gate prints its own box's value,
every job lands on its own primary, and no sweep removes the other's copy (docs/team.md).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from lanes.selfinstall import source_key
from rig.box import state
from rig.box.forge import create_repo
from tests.helpers.job_helpers import ROOT, git
from tests.helpers.lane_helpers import copy_name
from tests.test_job_box import Rig

GATES, JOBS = 10, 4
pytestmark = pytest.mark.box


def _authorize(box, pub: str) -> None:
    """Box B's key authorized as an operator adds a teammate: in the box's team keys
    (`rig.box.state.team_keys_file`), which `nev box up` writes to the jump host, the lanes and the
    service hosts beside its own client key; then up (a no-op but for those files' holders)."""
    from tests.conftest import test_box

    f = state.team_keys_file(box.dir)
    text = f.read_text() if f.exists() else ""
    if pub not in text:
        f.write_text(text + pub + "\n")
    test_box().up(lanes=len(box.lanes))
    for keys in [state.keys_file(box.name, "jump"), box.dir / "ssh" / "authorized_keys",
                 *(ln.host_home / ".ssh" / "authorized_keys" for ln in box.lanes)]:
        assert pub in keys.read_text(), keys


def _dev_box(box, tmp: Path, who: str, key: Path | None) -> Rig:
    r = Rig(box, tmp)
    if key is not None:
        r.env["NEV_SSH_KEY"] = str(key)
    url = create_repo(box, f"team-{who}-{int(time.time())}")
    r.env["NEV_LANE_GIT_URL"] = url
    r.env["NEV_FORGE_URL"] = box.dev_url(url)
    git(tmp, "init", "-q", "-b", "main", str(r.dev))
    (r.dev / "README.md").write_text(f"team box {who}\n")
    (r.dev / "tracks.json").write_text('{"verify": "true", "specWatch": {"pollEnv": {}}}\n')
    (r.dev / "specs").mkdir()
    git(r.dev, "add", "-A")
    git(r.dev, "commit", "-qm", "base")
    authed = box.dev_url(url).replace("://", f"://{box.forge_user}@", 1)
    git(r.dev, "remote", "add", "origin", authed)
    subprocess.run(["git", "-C", str(r.dev), "push", "-q", "origin", "main"], check=True,
                   env=r.git_env)
    # the same folder name in both checkouts: only the key tells the two copies apart
    git(r.dev, "worktree", "add", "-q", "-b", "gates", str(tmp / "wt" / "work"))
    return r


@pytest.fixture(scope="module")
def team(box, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("team-box")
    key = tmp / "b_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "team-b", "-f", str(key)],
                   check=True, capture_output=True)
    pub = key.with_suffix(".pub").read_text().strip()
    _authorize(box, pub)
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    a = _dev_box(box, tmp / "a", "a", None)
    b = _dev_box(box, tmp / "b", "b", key)
    # box B runs a newer nev: this tree with one change (its wheel, so its lane install, differs)
    newer = tmp / "newer-nev"
    newer.mkdir()
    subprocess.run(f"git -C {ROOT} ls-files -z | xargs -0 cp --parents -t {newer}", shell=True,
                   check=True, cwd=ROOT)
    with (newer / "jobs" / "__init__.py").open("a") as f:
        f.write("# box B's newer nev (tests/test_team_box.py)\n")
    b.env["PYTHONPATH"] = str(newer)
    a.ok("dagu", "up")
    a.probe()
    b.pub = pub     # type: ignore[attr-defined]
    yield a, b
    # the test's key leaves the team keys (the next up takes it off the hosts)
    f = state.team_keys_file(box.dir)
    f.write_text("".join(ln + "\n" for ln in f.read_text().splitlines() if ln.strip() != pub))


def _copy_exists(r: Rig) -> bool:
    return (r.lane.host_root / copy_name(r.dev.parent / "wt" / "work")).is_dir()


def _loop(who: str, me: Rig, other: Rig, log: list[str], errors: list[BaseException],
          installs: dict[str, str]) -> None:
    try:
        wt = me.dev.parent / "wt" / "work"
        for i in range(GATES):
            value = f"{who}-{i}-{time.monotonic_ns()}"
            (wt / "who.txt").write_text(value + "\n")      # an uncommitted change: shipped per gate
            for _ in range(3):   # the shared box's lead restarts its jump host or a lane at times
                r = me.nev("lane", "run", "--lane", "0", str(wt), "cat", "who.txt", timeout=300)
                if r.returncode != 3 or "does not answer" not in r.stderr:
                    break
                log.append(f"{who} gate {i}: lane did not answer, again: {r.stderr.strip()[-200:]}")
                time.sleep(5)
            assert r.returncode == 0, f"{who} gate {i}: exit {r.returncode}\n{r.stdout}{r.stderr}"
            assert r.stdout.strip() == value, f"{who} gate {i}: printed {r.stdout!r}, not {value!r}"
            log.append(f"{who} gate {i} ok")
            if i < JOBS:
                name = f"{who}-job{i}"
                cmd = f"mkdir -p out/{name} && echo {who} > out/{name}/who.txt"
                me.job(name, [{"name": "w", "kind": "command", "command": cmd}])
                log.append(f"{who} submitted {name}")
                if i == 0:     # its submission installed its own nev on the lane, beside the other's
                    key = source_key(Path(me.env["PYTHONPATH"]))
                    assert (me.lane.host_home / ".local/share/nev/installs" / key).is_dir()
                    installs[who] = key
            if i in (3, 7):
                theirs = copy_name(other.dev.parent / "wt" / "work")
                there = _copy_exists(other)
                s = me.nev("lane", "sweep", "--lane", "0", timeout=300)
                assert s.returncode == 0, f"{who} sweep: {s.stdout}{s.stderr}"
                assert f"removed {theirs}" not in s.stdout, s.stdout
                if there:
                    assert f"kept {theirs}: another repository's copy" in s.stdout, s.stdout
                    assert _copy_exists(other), f"{who}'s sweep removed the other's copy"
                log.append(f"{who} swept, kept {theirs}")
        for j in range(JOBS):
            rec = me.poll_until(f"{who}-job{j}", "landed", timeout=600)
            assert rec["status"] == "landed"
        log.append(f"{who} landed {JOBS}")
    except BaseException as e:   # reported by the main thread
        errors.append(e)


def test_two_development_boxes_share_one_rig(team):
    a, b = team
    _authorize(a.box, b.pub)   # again: an up from a checkout before team keys drops them
    assert a.env["NEV_SSH_KEY"] != b.env["NEV_SSH_KEY"]
    assert copy_name(a.dev.parent / "wt" / "work") != copy_name(b.dev.parent / "wt" / "work")
    log: list[str] = []
    errors: list[BaseException] = []
    installs: dict[str, str] = {}
    t0 = time.monotonic()
    threads = [threading.Thread(target=_loop, args=(w, me, other, log, errors, installs))
               for w, me, other in (("a", a, b), ("b", b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    print(f"\nteam: {GATES} gates and {JOBS} jobs from each of two boxes in {took:.0f} s")
    print("\n".join(log))
    if errors:
        raise errors[0]
    assert len({k for k in installs.values()}) == 2, installs   # two nevs, both jobs' sets landed
    for who, me, other in (("a", a, b), ("b", b, a)):
        git(me.dev, "checkout", "-q", "main")
        subjects = git(me.dev, "log", "--format=%s", "main")
        mine = [f"{who}-job{j}" for j in range(JOBS)]
        theirs = [f"{'b' if who == 'a' else 'a'}-job{j}" for j in range(JOBS)]
        for name in mine:
            assert f"job {name}: passed (exit 0)" in subjects
            assert (me.dev / "out" / name / "who.txt").read_text() == f"{who}\n"
        for name in theirs:
            assert name not in subjects and not (me.dev / "out" / name).exists()
        # the state folder records only its own jobs; a last tick finds nothing of the other's
        recs = json.loads((me.tmp / "state" / "job-results.json").read_text())["jobs"]
        assert set(recs) == set(mine)
        last = me.ok("job", "poll")
        assert not any(n in last.stderr for n in theirs), last.stderr
        assert _copy_exists(me) and _copy_exists(other)


def test_a_job_name_the_other_box_runs_is_refused_until_its_job_ends(team):
    """The lane keeps a job's key file and work folder by its name, and the gateway its key: while
    box A's job `same` runs, box B's submission of a job of that name is refused in one line
    (nothing of A's replaced); once A's tick landed it (its key revoked), B's goes through."""
    a, b = team
    _authorize(a.box, b.pub)
    same = f"same-{int(time.time())}"      # an earlier run's key of a name holds it for its limit
    cmd = "sleep 5; mkdir -p out/{job} && echo {who} > out/{job}/who.txt"
    a.job(same, [{"name": "w", "kind": "command", "command": cmd.format(job=same, who="a")}])
    with pytest.raises(AssertionError) as e:
        b.job(same, [{"name": "w", "kind": "command", "command": cmd.format(job=same, who="b")}],
              free_name=False)       # B does not take A's name away: that is what is refused
    assert "another development box's job of that name runs" in str(e.value)
    assert a.poll_until(same, "landed", timeout=600)["status"] == "landed"
    git(a.dev, "checkout", "-q", "main")
    assert (a.dev / "out" / same / "who.txt").read_text() == "a\n"
    b.ok("job", "submit", str(b.dev / "jobs" / f"{same}.yaml"))
    assert b.poll_until(same, "landed", timeout=600)["status"] == "landed"
    git(b.dev, "checkout", "-q", "main")
    assert (b.dev / "out" / same / "who.txt").read_text() == "b\n"
