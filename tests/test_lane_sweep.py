"""`nev lane sweep`: the decision (pure) and every scenario on a real box lane over SSH.

Each test works under its own root on lane0 (`/srv/lane/sweep-<id>`), so it never touches the
copies other tests' gates leave under `/srv/lane`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

from lanes import agentpack, payload
from lanes import sweep as sw
from lanes.agent import layout
from lanes.agent import root as agent_root
from lanes.agent.messages import RemoveRequest, RemoveResult
from lanes.base.gitrun import Repo
from lanes.base.ssh import Connection
from lanes.lanesfile import Lane
from rig.box.netns import run_in

E = sw.Entry


K, OTHER = "1a2b3c4d", "5e6f7a8b"     # this repository's key, another's


def k(folder: str, key: str = K) -> str:
    return layout.copy_name(folder, key)


def test_decide_removes_only_copies_whose_track_is_gone():
    entries = [E(k("gone")), E(k("kept-track")), E(k("engine")), E(k("stray"), worktree=False),
               E(k("busy"), pids=((7, "sleep"),)), E(k("gated"), locked=True),
               E(k("linked"), symlink=True), E(k("data"), corpus=("corpus/a",)),
               E(k("orphan-payload"), copy=False, dir=False, worktree=False, payload=True)]
    tracks = {k("kept-track"), k("engine")}
    decided = sw.decide(entries, tracks, k("engine"), None, True, K)
    got = {d.name: (d.remove, d.why) for d in decided}
    assert got[k("gone")][0] and got[k("data")][0] and "NAS first" in got[k("data")][1]
    assert got[k("orphan-payload")][0]
    assert got[k("engine")] == (False, "the primary checkout's own copy")
    assert got[k("kept-track")][1] == "its track has a worktree in the primary checkout"
    assert got[k("stray")] == (False, "not a worktree of the lane's mirror")
    assert got[k("busy")] == (False, "a process runs in it (sleep 7)")
    assert got[k("gated")] == (False, "locked by a running gate")
    assert not got[k("linked")][0]


def test_decide_keeps_another_repositorys_copy_and_removes_its_own_stale_one():
    """Issue 31, item 10: two repositories' worktrees named `wt` have two copies on one lane; the
    sweep of one never removes the other's, nor an unkeyed copy it cannot prove its own."""
    entries = [E(k("wt")), E(k("wt", OTHER)), E(k("gone", OTHER)), E("wt"), E("gone"),
               E(k("gone", OTHER), copy=False, dir=False, worktree=False, payload=True)]
    got = {(d.name, d.remove): d.why for d in sw.decide(entries, set(), None, None, True, K)}
    assert (k("wt"), True) in got                                          # its own stale copy goes
    assert "another repository's copy" in got[(k("wt", OTHER), False)]
    assert "another repository's copy" in got[(k("gone", OTHER), False)]
    assert "not provably this repository's" in got[("wt", False)]          # unkeyed: kept
    assert "--track gone" in got[("gone", False)]
    # named by the operator (or the landing's track): its keyed copy and its unkeyed one go
    named = sw.decide(entries, set(), None, "wt", True, K)
    assert sorted((d.name, d.remove) for d in named) == [("wt", True), (k("wt"), True)]
    theirs = sw.decide(entries, set(), None, k("wt", OTHER), True, K)     # a copy named exactly
    assert [(d.name, d.remove) for d in theirs] == [(k("wt", OTHER), True)]


def test_two_repositories_worktrees_of_one_folder_name_get_two_copy_names(tmp_path):
    one = tmp_path / "one" / "wt"
    two = tmp_path / "two" / "wt"
    for r in (one, two):
        r.parent.mkdir()
        Repo(r.parent).git("init", "-q", str(r))
        Repo(r).git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
                    "-m", "x")
    a, b = payload.Worktree.open(one).name, payload.Worktree.open(two).name
    assert a != b and a.startswith("wt-") and b.startswith("wt-")
    assert layout.copy_key(a) != layout.copy_key(b)
    # two worktrees of one repository: one key, two names; each name the same on every run
    Repo(one).git("worktree", "add", "-q", "--detach", str(tmp_path / "one" / "fix"))
    fix = payload.Worktree.open(tmp_path / "one" / "fix").name
    assert fix.startswith("fix-") and layout.copy_key(fix) == layout.copy_key(a) and fix != a
    assert payload.Worktree.open(one).name == a                        # the same on every run
    assert payload.Worktree.open(tmp_path / "one" / "fix").name == fix
    assert payload.Worktree.open(one / ".").name == a                  # however the folder is spelt
    # the sweep names the same copies from the primary checkout, or from any of its worktrees
    assert sw.primary_tracks(Repo(one)) == ({a, fix}, a, layout.copy_key(a))
    assert sw.primary_tracks(Repo(tmp_path / "one" / "fix")) == ({a, fix}, a, layout.copy_key(a))


def test_copy_names_and_keys_pure():
    one = layout.repo_key("devbox", "/home/me/engine/.git")
    assert one == layout.repo_key("devbox", "/home/me/engine/.git")
    keys = {layout.repo_key(h, d) for h in ("devbox", "laptop") for d in ("/a/.git", "/b/.git")}
    assert len(keys) == 4 and all(len(x) == 8 for x in keys)
    assert layout.copy_name("engine", K) == f"engine-{K}"
    odd = layout.copy_name("a:b", K)
    assert odd == f"{layout.plain_name('a:b')}-{K}" != layout.copy_name("a;b", K)
    assert layout.copy_key(f"engine-{K}") == K and layout.copy_key("engine") is None
    assert layout.copy_key("-" + K) is None and layout.copy_key(f"x-{K.upper()}") is None


def test_decide_keeps_corpus_data_without_a_nas_and_filters_by_track():
    entries = [E(k("data"), corpus=("corpus/a",)), E(k("other"))]
    got = sw.decide(entries, set(), None, None, False, K)
    assert [(d.name, d.remove) for d in got] == [(k("data"), False), (k("other"), True)]
    assert "no NAS folder" in got[0].why
    assert [d.name for d in sw.decide(entries, set(), None, "other", True, K)] == [k("other")]


def test_the_copies_under_a_root_are_its_copies_and_payloads_left_without_one():
    entries = [".git-mirror", ".git-mirror.lock", ".lock-a", ".payload-a", "a", ".payload-b",
               ".stray-c-20260101T000000-7", "d", ".hidden"]
    assert layout.copy_names(entries) == {"a", "b", "d"}
    assert [layout.lock_owner(e) for e in entries[:3]] == [None, None, "a"]


def test_remove_keeps_a_copy_whose_lock_a_gate_took_after_the_survey(tmp_path):
    import fcntl
    import os

    root = layout.Root(str(tmp_path))
    Repo(tmp_path).git("init", "-q", "--bare", root.mirror)
    Repo(tmp_path).git("init", "-q", "src")
    Repo(tmp_path / "src").git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    Repo(tmp_path / "src").git("push", "-q", root.mirror, "HEAD:refs/heads/main")
    for name in ("held", "free"):
        Repo(Path(root.mirror)).git("worktree", "add", "-q", "--detach", root.copy(name), "main")
    fd = os.open(root.lock("held"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        ans = agent_root.remove(RemoveRequest(root=root.path, names=["held", "free"], nas=None, stamp="t"))
    finally:
        os.close(fd)
    assert ans == RemoveResult(removed={"free": ""}, failed={"held": "locked by a running gate; kept"})
    assert Path(root.copy("held")).is_dir() and not Path(root.copy("free")).exists()


# ---- on the box ----------------------------------------------------------------------------


class Scene:
    def __init__(self, box, tmp_path: Path, shared: str = "/srv/lane-shared") -> None:
        self.box = box
        self.id = uuid.uuid4().hex[:8]
        self.root = f"/srv/lane/sweep-{self.id}"
        self.host_root = box.lanes[0].host_root / f"sweep-{self.id}"
        self.lane = Lane(0, box.lanes[0].ssh, root=self.root, shared=shared, jump=box.jump)
        self.primary = tmp_path / "engine"
        self.conn = Connection(self.lane.target, box.known_hosts, box.ssh_key, jump=self.lane.jump_target).connect()
        Repo(tmp_path).git("init", "-q", str(self.primary))
        Repo(self.primary).git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")

    def name(self, folder: str) -> str:
        """The copy name of the primary checkout's worktree `folder` (keyed by its repository)."""
        return payload.copy_name_of(Repo(self.primary), folder)

    def track(self, name: str) -> None:
        """A worktree of the primary checkout: its copy stays."""
        Repo(self.primary).git("worktree", "add", "-q", "--detach", str(self.primary.parent / name))

    def sh(self, script: str) -> str:
        res = self.conn.run(["sh", "-c", script])
        assert res.exit_status == 0, res.err
        return res.out

    def copies(self, *names: str) -> None:
        r = self.root
        self.sh(f"""set -e; mkdir -p {r}; cd {r}
git init -q src; git -C src -c user.name=t -c user.email=t@t commit -q --allow-empty -m one
git init -q --bare .git-mirror; git -C src push -q {r}/.git-mirror HEAD:refs/heads/main; rm -rf src
for n in {' '.join(names)}; do git -C .git-mirror worktree add -q --detach ../$n main; mkdir .payload-$n; echo p > .payload-$n/x; done""")

    def run(self, dry_run: bool = False, track: str | None = None) -> sw.LaneSweep:
        status, results = sw.sweep(track=track, dry_run=dry_run, repo=Repo(self.primary), lanes=[self.lane])
        assert status == 0
        return results[0]

    def why(self, s: sw.LaneSweep, name: str) -> tuple[bool, str]:
        return next((d.remove, d.why) for d in s.decisions if d.name == name)

    def close(self) -> None:
        self.sh(f"rm -rf {self.root}")
        self.conn.close()


@pytest.fixture
def scene(box, box_env, tmp_path):
    s = Scene(box, tmp_path)
    yield s
    s.close()


def test_sweep_removes_copy_without_worktree_and_archives_its_untracked_corpus_to_the_nas(scene, box):
    name = scene.name(f"gone-{scene.id}")
    scene.copies(name)
    scene.sh(f"cd {scene.root}/{name} && mkdir -p corpus/sub && echo a > corpus/a.txt && head -c 3000 /dev/zero > corpus/sub/b.bin")
    s = scene.run()
    assert s.removed == [name]
    assert not (scene.host_root / name).exists() and not (scene.host_root / f".payload-{name}").exists()
    tars = list((box.nas / "archive" / "corpus" / name).glob("*.tar"))
    assert len(tars) == 1
    with tarfile.open(tars[0]) as tf:
        assert sorted(tf.getnames()) == ["corpus/a.txt", "corpus/sub/b.bin"]
    # the mirror stays consistent: no stale worktree, the branch is still there
    out = scene.sh(f"git -C {scene.root}/.git-mirror worktree list --porcelain; git -C {scene.root}/.git-mirror branch")
    assert name not in out and "main" in out


def test_sweep_keeps_the_primary_checkouts_own_copy(scene):
    own = scene.name("engine")
    scene.copies(own, scene.name(f"gone-{scene.id}"))
    s = scene.run()
    assert scene.why(s, own) == (False, "the primary checkout's own copy")
    assert (scene.host_root / own / ".git").exists()


def test_sweep_keeps_another_repositorys_copy_and_an_unkeyed_one(scene):
    """Issue 31, item 10: another repository's worktree of the same folder name has its own copy,
    and this repository's sweep keeps it, as it keeps a copy from before copies were keyed."""
    other = layout.copy_name(f"gone-{scene.id}", "0" * 8)
    legacy = f"gone-{scene.id}x"
    mine = scene.name(f"gone-{scene.id}")
    scene.copies(other, legacy, mine)
    s = scene.run()
    assert s.removed == [mine]
    assert scene.why(s, other)[0] is False and "another repository's copy" in scene.why(s, other)[1]
    assert scene.why(s, legacy)[0] is False and "not provably" in scene.why(s, legacy)[1]
    assert (scene.host_root / other).is_dir() and (scene.host_root / legacy).is_dir()


def test_sweep_keeps_a_copy_whose_track_has_a_worktree(scene):
    scene.track(f"live-{scene.id}")
    name = scene.name(f"live-{scene.id}")
    scene.copies(name)
    s = scene.run()
    assert scene.why(s, name)[0] is False and (scene.host_root / name).is_dir()


def test_sweep_keeps_copy_with_running_process(scene):
    name = scene.name(f"busy-{scene.id}")
    scene.copies(name)
    pid = scene.sh(f"cd {scene.root}/{name} && (sleep 60 >/dev/null 2>&1 </dev/null & echo $!)").strip()
    try:
        s = scene.run()
        removed, why = scene.why(s, name)
        assert not removed and why.startswith("a process runs in it (sleep ")
        assert (scene.host_root / name).is_dir()
    finally:
        scene.sh(f"kill {pid} || true")


def test_sweep_keeps_a_directory_that_is_not_a_worktree_of_the_mirror(scene):
    scene.copies()
    stray = scene.name("stray")
    scene.sh(f"mkdir -p {scene.root}/{stray} && echo keep > {scene.root}/{stray}/file")
    s = scene.run()
    assert scene.why(s, stray) == (False, "not a worktree of the lane's mirror")
    assert (scene.host_root / stray / "file").read_text() == "keep\n"


def test_sweep_leaves_the_nas_target_of_a_corpus_link_untouched(scene, box):
    name = scene.name(f"linky-{scene.id}")
    scene.copies(name)
    gt = f"/srv/lane-shared/ground-truth/{name}"
    scene.sh(f"mkdir -p {gt} && echo truth > {gt}/case.json && cd {scene.root}/{name} && mkdir corpus && "
             f"ln -s {gt} corpus/{name}-ground-truth")
    try:
        s = scene.run()
        assert s.removed == [name]
        assert (box.nas / "ground-truth" / name / "case.json").read_text() == "truth\n"
        assert not (box.nas / "archive" / "corpus" / name).exists()     # a link is not data to archive
    finally:
        scene.sh(f"rm -rf {gt}")


def test_dry_run_changes_nothing_and_its_sizes_match_du(scene):
    names = [scene.name(f"d{i}-{scene.id}") for i in range(3)]
    scene.copies(*names)
    scene.sh(f"head -c 200000 /dev/urandom > {scene.root}/{names[0]}/blob")
    before = scene.sh(f"cd {scene.root} && find . | sort")
    s = scene.run(dry_run=True)
    assert scene.sh(f"cd {scene.root} && find . | sort") == before
    for n in names:
        du = subprocess.run(["du", "-sb", str(scene.host_root / n), str(scene.host_root / f".payload-{n}")],
                            capture_output=True, text=True, check=True).stdout.split()
        assert next(d.size for d in s.decisions if d.name == n) == int(du[0]) + int(du[2])
    lines = sw.report(s, True)
    assert any(ln.startswith(f"lane 0: would remove {names[0]} (") for ln in lines)
    assert lines[-1].startswith("lane 0: would free ")
    j = json.loads(json.dumps(sw.as_json(s)))      # `nev lane sweep --dry-run --json`: the same
    got = {c["name"]: (c["remove"], c["size"]) for c in j["copies"]}
    assert got == {d.name: (d.remove, d.size) for d in s.decisions}
    assert j["lane"] == 0 and j["removed"] == []


def test_sweep_removes_the_cached_agents_that_are_not_current(scene, box):
    """Agents of another nev unused for longer than NEV_AGENT_KEEP_HOURS (a day) go; one used
    within it (a teammate's box on another nev) stays."""
    current, old, mate = agentpack.lane_agent().hash, "0" * 64, "1" * 64
    cache = box.lanes[0].host_home / layout.AGENT_CACHE
    scene.sh(f"mkdir -p {scene.root} ~/{layout.AGENT_CACHE} && cd ~/{layout.AGENT_CACHE} && echo old > {old} "
             f"&& echo oc > {old}.code && echo part > {current}.tmp99 && echo mine > notes.txt "
             f"&& echo mate > {mate} && touch -d '2 days ago' {old} {old}.code {current}.tmp99 "
             f"&& {{ [ -e {current} ] || echo x > {current}; }}")
    s = scene.run(dry_run=True)
    # (a box kept across sessions may hold other agents unused for days: they go too)
    assert {old, f"{old}.code", f"{current}.tmp99"} <= set(s.agents) and (cache / old).exists()
    assert mate not in s.agents and current not in s.agents
    said = f"lane 0: would remove cached lane agent {old[:12]}: not the one this nev sends, not used within "
    assert any(line.startswith(said) for line in sw.report(s, True)), sw.report(s, True)
    s = scene.run()
    assert {old, f"{old}.code", f"{current}.tmp99"} <= set(s.agents_removed)
    # the current agent stays; no compiled form of it is kept beside it (issue 41: nothing but the
    # agent whose content hashes to its name is run)
    left = {p.name for p in cache.iterdir()}       # (and other boxes' agents used within a day)
    assert {current, "notes.txt", mate} <= left and f"{current}.code" not in left
    assert not {old, f"{old}.code", f"{current}.tmp99"} & left
    (cache / "notes.txt").unlink()
    (cache / mate).unlink()


def test_sweep_without_a_nas_folder_keeps_a_copy_with_corpus_data(box, box_env, tmp_path):
    scene = Scene(box, tmp_path, shared="/srv/no-such-nas")
    try:
        name = scene.name(f"nonas-{scene.id}")
        scene.copies(name)
        scene.sh(f"cd {scene.root}/{name} && mkdir corpus && echo a > corpus/a.txt")
        s = scene.run()
        removed, why = scene.why(s, name)
        assert not removed and "no NAS folder" in why
        assert (scene.host_root / name / "corpus" / "a.txt").exists()
    finally:
        scene.close()


def test_disk_guard_sweeps_then_exits_4_naming_lane_free_space_and_largest_copies(box, tmp_path):
    """The real sweep as the gate's hook: a lane root of its own, a copy whose worktree is gone is
    swept, another repository's copy stays (issue 31, item 10), then the guard (threshold far above
    the disk) refuses with exit 4."""
    import json

    from tests.helpers import lane_helpers as h
    from tests.helpers import lane_rig as rigs

    rig = rigs.on_box(box, tmp_path / "rig")
    root = f"/srv/lane/guard{rig.tag}"
    lanes = json.loads(Path(rig.env["NEV_LANES_FILE"]).read_text())
    lanes["lanes"][0]["root"] = root
    lf = tmp_path / "lanes.json"
    lf.write_text(json.dumps(lanes))
    env = dict(rig.env, NEV_LANES_FILE=str(lf))
    keep = h.clone_worktree(rig.clone_url, tmp_path / f"keep{rig.tag}", rig.push_env)
    gone = tmp_path / f"gone{rig.tag}"           # a worktree of keep's repository, removed below
    h.git(keep, "worktree", "add", "-q", "--detach", str(gone))
    (tmp_path / "theirs").mkdir()                # another repository, its worktree named as `gone`
    other = h.clone_worktree(rig.clone_url, tmp_path / "theirs" / f"gone{rig.tag}", rig.push_env)
    try:
        for wt in (keep, gone, other):
            r = h.nev(["lane", "run", str(wt), "true"], env, cwd=wt)
            assert r.returncode == 0, r.stderr
        host_root = box.lanes[0].host_root / f"guard{rig.tag}"
        kept, gone_c, theirs = h.copy_name(keep), h.copy_name(gone), h.copy_name(other)
        assert gone_c != theirs and all((host_root / n).is_dir() for n in (kept, gone_c, theirs))
        h.git(keep, "worktree", "remove", "--force", str(gone))
        r = h.nev(["lane", "run", str(keep), "true"], dict(env, NEV_LANE_MIN_FREE_GB="1000000"), cwd=keep)
        assert r.returncode == 4, r.stdout + r.stderr
        assert f"lane 0 (lane0): removed {gone_c} (" in r.stderr
        assert f"lane 0 (lane0): kept {kept}: the primary checkout's own copy" in r.stderr
        assert f"lane 0 (lane0): kept {theirs}: another repository's copy" in r.stderr
        assert "lane 0 has" in r.stderr and "GiB free" in r.stderr and "largest copies" in r.stderr
        assert kept in r.stderr.split("largest copies")[1]
        assert not (host_root / gone_c).exists()
        assert (host_root / kept).is_dir() and (host_root / theirs).is_dir()
    finally:
        run_in(box, "lane0", ["rm", "-rf", root])


def test_sweep_archives_removes_what_is_older_than_the_retention_and_keeps_the_newest_per_name(box, box_env, tmp_path):
    """Acceptance (#21): `nev lane sweep --archives` on a share the lane mounts: gate logs, job logs
    and corpus tars older than NEV_ARCHIVE_KEEP_DAYS go, the newest per worktree or job stays; the
    oracle's corpus store too, the newest per function staying."""
    sid = uuid.uuid4().hex[:8]
    shared = f"/srv/lane-shared/retention-{sid}"
    scene = Scene(box, tmp_path, shared=shared)
    try:
        a = f"{shared}/archive"
        scene.sh(f"""set -e
mkdir -p {a}/gate-logs/wt-a {a}/job-logs/job-x/run-old/logs {a}/job-logs/job-x/run-new {a}/corpus/wt-a
cd {a}/gate-logs/wt-a; echo o > old.log; echo m > mid.log; echo n > new.log
touch -d '45 days ago' old.log; touch -d '40 days ago' mid.log; touch -d '35 days ago' new.log
echo s > {a}/job-logs/job-x/run-old/logs/s.log; touch -d '31 days ago' {a}/job-logs/job-x/run-old
touch -d '2 days ago' {a}/job-logs/job-x/run-new
echo t > {a}/corpus/wt-a/1.tar; touch -d '90 days ago' {a}/corpus/wt-a/1.tar
mkdir -p {shared}/corpora/block_width-aaaa {shared}/corpora/block_width-bbbb
touch -d '50 days ago' {shared}/corpora/block_width-aaaa; touch -d '40 days ago' {shared}/corpora/block_width-bbbb""")
        data = json.loads(box.lanes_file.read_text())
        data["lanes"] = [{**data["lanes"][0], "root": scene.root, "shared": shared}]
        lanes = tmp_path / "lanes.json"
        lanes.write_text(json.dumps(data))
        env = {**os.environ, "NEV_ARCHIVE_KEEP_DAYS": "30", "NEV_LANES_FILE": str(lanes)}
        r = subprocess.run([sys.executable, "-m", "rig.cli", "lane", "sweep", "--archives"],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        left = scene.sh(f"cd {a} && find . -mindepth 3 -maxdepth 3 | sort").split()
        assert left == ["./corpus/wt-a/1.tar", "./gate-logs/wt-a/new.log", "./job-logs/job-x/run-new"]
        assert "removed archive/gate-logs/wt-a/old.log" in r.stdout and "removed 4 of 8" in r.stdout
        assert "removed corpora/block_width-aaaa" in r.stdout
        # the newest of its function stays (the entry's lock file stays too: a builder may hold it open)
        assert scene.sh(f"find {shared}/corpora -mindepth 1 -type d -printf '%f\\n'").split() == ["block_width-bbbb"]
    finally:
        scene.sh(f"rm -rf {shared}")
        scene.close()


def test_decide_writers_removes_only_orphan_records_whose_commits_were_fetched():
    W = sw.WriterRecord
    recs = [W(k("running"), True, False, True),
            W(k("unfetched"), True, False, False, ("abc writer: first",)),
            W(k("broken"), False, False, False), W(k("hascopy"), True, True, False),
            W(k("going"), True, True, False), W(k("orphan"), True, False, False),
            W(k("orphan", OTHER), True, False, False), W("orphan", True, False, False)]
    got = {d.name: (d.remove, d.why) for d in sw.decide_writers(recs, {k("going")}, None, K)}
    w = layout.WRITER
    assert {n for n, (rm, _) in got.items() if rm} == {w + k("going"), w + k("orphan")}
    unfetched = got[w + k("unfetched")][1]
    assert "never fetched" in unfetched and "abc writer: first" in unfetched
    assert "running" in got[w + k("running")][1] and "copy stays" in got[w + k("hascopy")][1]
    assert "another repository's" in got[w + k("orphan", OTHER)][1]       # never another's record
    assert "not provably" in got[w + "orphan"][1]
    named = sw.decide_writers(recs, set(), "orphan", K)
    assert sorted(d.name for d in named) == [w + "orphan", w + k("orphan")]
