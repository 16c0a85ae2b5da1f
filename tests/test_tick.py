"""The unattended tick (`nev job poll`, `jobs/tick.py`): approved tracks and finished jobs in one
run under one lock, installed as the scheduler runs it; retention once a day; the share's
archives and the mirrors' deleted refs (the pure decisions and the lane agent's side, here)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

pytest.register_assert_rewrite("tests.helpers.landkit")

from jobs import result as result_mod  # noqa: E402
from jobs import tick as tick_mod  # noqa: E402
from lanes import sweep as sw  # noqa: E402
from lanes.agent import layout, retention  # noqa: E402
from lanes.agent import messages as msg  # noqa: E402
from lanes.agent.mirror import Mirror  # noqa: E402
from lanes.agent.procs import Child  # noqa: E402
from tests.helpers.landkit import Kit, git  # noqa: E402

DAY = 86400.0


def _job_result(k: Kit, forge: Path, job: str, spec: str) -> str:
    """specs/<spec>.md on main, and a passed result of `job` for it on the forge (as publish leaves it)."""
    k.spec(spec, ["out/**"])
    k.commit_main({f"specs/{spec}.md": (k.primary / f"specs/{spec}.md").read_text()}, f"spec {spec}")
    git(k.primary, "push", "-q", str(forge), "main")
    work = k.base / f"job-{job}"
    git(k.base, "clone", "-q", "-b", "main", str(forge), str(work))
    (work / "out").mkdir()
    (work / "out" / f"{job}.txt").write_text("made by the job\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", f"job {job}: stage one")
    git(work, "commit", "-q", "--allow-empty", "-m", result_mod.message(job, "passed", 0, "run-1", [], spec))
    git(work, "push", "-q", str(forge), f"HEAD:refs/heads/result/{job}", f"HEAD:refs/heads/job/{job}")
    return git(work, "rev-parse", "HEAD")


def _installed_step(k: Kit, env: dict[str, str]) -> tuple[str, str, dict[str, str]]:
    """`nev job poll --install --dagu-home`: the scheduled workflow's one step, as Dagu runs it."""
    home = k.base / "dagu-home"
    r = subprocess.run([*k.argv()[:-1], "job", "poll", "--install", "--dagu-home", str(home)], cwd=k.primary,
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load((home / "dags" / "nev-job-poll.yaml").read_text())
    step = doc["steps"][0]
    return step["command"], step["dir"], {k2: v for e in doc["env"] for k2, v in e.items()}


def test_one_installed_tick_lands_two_approved_tracks_and_a_finished_job_each_once(tmp_path: Path) -> None:
    """Acceptance (#21, here; the box's is in test_job_box): one run of the installed tick lands
    both approved tracks and the passed job, each through one gate, and says what it did for each."""
    k = Kit.create(tmp_path)
    forge = tmp_path / "forge.git"
    git(tmp_path, "init", "-q", "--bare", str(forge))
    k.track("alpha", {"src/alpha.txt": "alpha\n"})
    k.track("beta", {"lib/beta.txt": "beta\n"})
    _job_result(k, forge, "gen-gamma", "gamma")
    # submitted from this state folder (`nev job submit` records it): only its submitter lands it
    from jobs import records as job_records
    from jobs.records import JobRecord

    with job_records.locked({"NEV_STATE_DIR": str(tmp_path / "state")}) as recs:
        recs.jobs["gen-gamma"] = JobRecord(job="gen-gamma", sends=1, run_id="run-1", spec="gamma")
    for n in ("alpha", "beta"):
        assert k.nev("approve", n).rc == 0
    env = k.env(NEV_LANE_GIT_URL=str(forge))
    command, cwd, wf_env = _installed_step(k, env)
    assert wf_env["NEV_LANE_STRICT"] == "1"  # pollEnv
    before = k.rev("main")
    r = subprocess.run(["sh", "-c", command], cwd=cwd, env={**wf_env, **{x: env[x] for x in ("GIT_AUTHOR_NAME",
                       "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL") if x in env}},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    log = r.stderr
    assert "land: track alpha: landed" in log and "land: track beta: landed" in log
    assert "gen-gamma: landed: landed on main" in log, log
    main = k.rev("main")
    assert main != before
    for path, text in (("src/alpha.txt", "alpha\n"), ("lib/beta.txt", "beta\n"), ("out/gen-gamma.txt", "made by the job\n")):
        assert k.show("main", path) == text
    assert k.gates_started() == 3 and len(k.gated_passed()) == 3  # each gated once
    first_parent = git(k.primary, "log", "--format=%s", f"{before}..main").splitlines()
    assert sum("job gen-gamma: stage one" == s for s in first_parent) == 1
    records = json.loads((tmp_path / "state" / "job-results.json").read_text())["jobs"]
    assert records["gen-gamma"]["status"] == "landed"
    assert not list((k.common() / "nev" / "approvals").glob("*.json"))
    assert git(forge, "for-each-ref", "refs/heads/result", "refs/heads/job") == ""
    # the next tick has nothing left to land
    r2 = subprocess.run(["sh", "-c", command], cwd=cwd, env={**wf_env, **{x: env[x] for x in env if x.startswith("GIT_")}},
                        capture_output=True, text=True, timeout=300)
    assert r2.returncode == 0, r2.stderr
    assert k.rev("main") == main and k.gates_started() == 3
    assert "land: tick: 0 landed, 0 skipped, 0 refused" in r2.stderr


def test_a_second_tick_while_one_runs_does_nothing(tmp_path: Path) -> None:
    k = Kit.create(tmp_path)
    k.track("alpha")
    assert k.nev("approve", "alpha").rc == 0
    k.gate(sleep=3)
    first = subprocess.Popen([*k.argv()[:-1], "job", "poll"], cwd=k.primary, env=k.env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while k.gates_started() == 0:
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        r = subprocess.run([*k.argv()[:-1], "job", "poll"], cwd=k.primary, env=k.env(), capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0 and f"another tick (PID {first.pid}) is still running" in r.stderr
    finally:
        assert first.wait(timeout=120) == 0
    assert k.gates_started() == 1 and k.show("main", "src/new.txt") == "alpha work\n"


def test_a_land_script_other_than_nev_land_approved_is_run_in_the_repository(tmp_path: Path) -> None:
    k = Kit.create(tmp_path)
    t = k.tracks()
    t["specWatch"]["landScript"] = "echo custom > ../custom-ran"
    k.commit_main({"tracks.json": json.dumps(t)})
    r = subprocess.run([*k.argv()[:-1], "job", "poll"], cwd=k.primary, env=k.env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "custom-ran").read_text() == "custom\n"
    assert "running specWatch.landScript: echo custom" in r.stderr and "exited 0" in r.stderr
    assert "tick: jobs: skipped: no forge URL" in r.stderr


def test_retention_is_due_once_a_day(tmp_path: Path) -> None:
    stamp = tmp_path / "retention.stamp"
    now = time.time()
    assert tick_mod.retention_due(stamp, now)  # never ran
    stamp.touch()
    os.utime(stamp, (now - 3600, now - 3600))
    assert not tick_mod.retention_due(stamp, now)
    os.utime(stamp, (now - DAY - 1, now - DAY - 1))
    assert tick_mod.retention_due(stamp, now)


# ---------------------------------------------------------------- archives


def test_decide_archives_removes_what_is_older_and_keeps_the_newest_per_name() -> None:
    now = 100 * DAY
    A = sw.Archive
    entries = [A("gate-logs", "wt-a", "old.log", now - 40 * DAY), A("gate-logs", "wt-a", "new.log", now - 35 * DAY),
               A("gate-logs", "wt-b", "recent.log", now - 2 * DAY), A("gate-logs", "wt-b", "old.log", now - 31 * DAY),
               A("job-logs", "job-x", "run-1", now - 90 * DAY), A("corpus", "wt-a", "t.tar", now - 60 * DAY)]
    got = {(a.kind, a.name, a.entry): (rm, why) for a, rm, why in sw.decide_archives(entries, now, 30)}
    assert got[("gate-logs", "wt-a", "old.log")][0]
    assert got[("gate-logs", "wt-a", "new.log")] == (False, "the newest of gate-logs/wt-a")  # 35 days, the newest
    assert got[("gate-logs", "wt-b", "old.log")][0] and not got[("gate-logs", "wt-b", "recent.log")][0]
    assert not got[("job-logs", "job-x", "run-1")][0] and not got[("corpus", "wt-a", "t.tar")][0]  # alone: newest


def _aged(p: Path, days: float) -> None:
    t = time.time() - days * DAY
    os.utime(p, (t, t), follow_symlinks=False)


def test_the_agent_lists_and_removes_archives_only_inside_the_share(tmp_path: Path) -> None:
    share = tmp_path / "share"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.log").write_text("not the share's\n")
    gl = share / "archive" / "gate-logs" / "wt-a"
    jl = share / "archive" / "job-logs" / "job-x"
    gl.mkdir(parents=True)
    (jl / "run-old").mkdir(parents=True)
    (jl / "run-new").mkdir()
    (jl / "run-old" / "archive.txt").write_text("x\n")
    for name, days in (("a-old.log", 45), ("a-new.log", 40), (".b.log.part", 50)):
        (gl / name).write_text(name)
        _aged(gl / name, days)
    (gl / "link.log").symlink_to(outside / "keep.log")
    _aged(jl / "run-old", 31)
    _aged(jl / "run-new", 1)
    facts = retention.archives(msg.ArchivesRequest(shared=str(share)))
    seen = {(e.kind, e.name, e.entry) for e in facts.entries}
    assert seen == {("gate-logs", "wt-a", "a-old.log"), ("gate-logs", "wt-a", "a-new.log"),
                    ("job-logs", "job-x", "run-old"), ("job-logs", "job-x", "run-new")}
    plan = sw.decide_archives(facts.entries, time.time(), 30)
    gone = [msg.ArchiveRef(a.kind, a.name, a.entry) for a, rm, _ in plan if rm]
    bad = [msg.ArchiveRef("gate-logs", "wt-a", "link.log"), msg.ArchiveRef("gate-logs", "..", "outside")]
    ans = retention.drop_archives(msg.DropArchivesRequest(shared=str(share), entries=gone + bad))
    assert sorted(Path(p).name for p in ans.removed) == ["a-old.log", "run-old"]
    assert len(ans.failed) == 2
    assert sorted(p.name for p in gl.iterdir()) == [".b.log.part", "a-new.log", "link.log"]
    assert sorted(p.name for p in jl.iterdir()) == ["run-new"]
    assert (outside / "keep.log").read_text() == "not the share's\n"


def test_the_corpus_store_keeps_the_newest_per_function_and_an_entry_a_build_holds(tmp_path: Path) -> None:
    """The oracle's store on the share: entries unused for longer than the retention go, the newest
    per function stays, an entry whose lock a builder holds is kept, a build's temporary folder and
    the lock files are not entries; a build that finds an entry makes it new again (touch)."""
    import fcntl

    from bench.oracle import shared

    share = tmp_path / "share"
    store = share / shared.FOLDER
    for name, days in (("block_width-aaaa", 60), ("block_width-bbbb", 45), ("block_width-cccc", 40),
                       ("abspos_width-dddd", 90), (".tmp-block_width-eeee-12", 90)):
        (store / name).mkdir(parents=True)
        (store / name / "cases.jsonl").write_text("{}\n")
        _aged(store / name, days)
    (store / "block_width-aaaa.lock").write_text("")
    shared.touch(store / "block_width-bbbb")          # a build found it just now
    facts = retention.archives(msg.ArchivesRequest(shared=str(share)))
    seen = {(e.kind, e.name, e.entry) for e in facts.entries}
    assert seen == {("corpora", "block_width", "block_width-aaaa"), ("corpora", "block_width", "block_width-bbbb"),
                    ("corpora", "block_width", "block_width-cccc"), ("corpora", "abspos_width", "abspos_width-dddd")}
    plan = sw.decide_archives(facts.entries, time.time(), 30)
    gone = {a.entry for a, rm, _ in plan if rm}
    assert gone == {"block_width-aaaa", "block_width-cccc"}     # bbbb used now; dddd the newest of its function
    assert {a.label for a, rm, _ in plan if rm} == {"corpora/block_width-aaaa", "corpora/block_width-cccc"}
    fd = os.open(store / "block_width-cccc.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)                   # a build of cccc in progress
    try:
        ans = retention.drop_archives(msg.DropArchivesRequest(shared=str(share), entries=[
            msg.ArchiveRef("corpora", "block_width", e) for e in sorted(gone)] + [
            msg.ArchiveRef("corpora", "x", "../archive")]))
    finally:
        os.close(fd)
    assert [Path(p).name for p in ans.removed] == ["block_width-aaaa"]
    assert "a build holds it" in ans.failed[str(store / "block_width-cccc")]
    assert len(ans.failed) == 2
    assert sorted(p.name for p in store.iterdir() if p.is_dir()) == [
        ".tmp-block_width-eeee-12", "abspos_width-dddd", "block_width-bbbb", "block_width-cccc"]


# ---------------------------------------------------------------- mirror refs


def test_prune_refs_removes_what_the_forge_deleted_from_the_gates_mirror_and_the_job_mirror(tmp_path: Path) -> None:
    """The mirrors as the gate and the job workflow's prepare make them (no `origin` remote)."""
    from jobs import lane_main

    forge = tmp_path / "forge.git"
    git(tmp_path, "init", "-q", "--bare", str(forge))
    src = tmp_path / "src"
    git(tmp_path, "init", "-q", "-b", "main", str(src))
    git(src, "commit", "-q", "--allow-empty", "-m", "x")
    for b in ("main", "job/a", "job/b", "result/a", "feature/x"):
        git(src, "push", "-q", str(forge), f"HEAD:refs/heads/{b}")
    root = layout.Root(str(tmp_path / "lane-root"))
    os.makedirs(root.path)
    m = Mirror(root, str(forge), None, 0, lambda _m: None, Child(root.path))
    m.ensure()
    assert m.fetch("test")
    job_mirror = tmp_path / "dagu" / "job-mirror.git"
    for job in ("a", "b"):
        assert lane_main.prepare(job, str(forge), str(job_mirror), str(tmp_path / "jobs-work"), str(tmp_path)) == 0
    assert git(Path(root.mirror), "remote") == "" and git(job_mirror, "remote") == ""
    for b in ("job/a", "result/a", "feature/x"):
        git(forge, "update-ref", "-d", f"refs/heads/{b}")
    ans = retention.prune_refs(msg.PruneRefsRequest(
        mirrors=[root.mirror, str(job_mirror), str(tmp_path / "none.git")], git_url=str(forge))).mirrors
    assert ans[root.mirror] == msg.MirrorPrune(pruned=["refs/heads/job/a", "refs/heads/result/a"])
    assert ans[str(job_mirror)] == msg.MirrorPrune(pruned=["refs/heads/job/a"])
    assert ans[str(tmp_path / "none.git")] == msg.MirrorPrune(missing=True)
    left = git(Path(root.mirror), "for-each-ref", "--format=%(refname)").split()
    assert "refs/heads/job/b" in left and "refs/heads/feature/x" in left and "refs/heads/main" in left
    assert git(job_mirror, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/job/b"]


def test_stale_refs_keeps_what_the_forge_still_has() -> None:
    assert retention.stale_refs({"refs/heads/job/a": "1", "refs/heads/job/b": "2"}, {"refs/heads/job/b"}) == \
        {"refs/heads/job/a": "1"}
