"""Jobs on the rig-in-a-box: `nev job submit` from this (dev) box, the job workflow on lane0's real
Dagu 1.30.2, results on the box's real HTTP forge, `nev job poll` landing them through `nev land`,
the inventory probed through the real LiteLLM gateway and stand-in pools.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rig.box.forge import create_repo
from rig.box.poolctl import pool_control
from tests.helpers.job_helpers import ROOT, git
from tests.helpers.lane_helpers import copy_name

DAGU = "/opt/nev/dagu-1.30.2/dagu"
_CLEAR = ("NEV_", "GENERA_", "TRACKS_")


class Rig:
    def __init__(self, box, tmp: Path) -> None:
        self.box = box
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(_CLEAR)}
        self.env.update(box.env)
        self.env.update({"PYTHONPATH": str(ROOT), "NEV_DAGU_BINARY": DAGU, "NEV_DAGU_POLL": "1",
                         "NEV_STATE_DIR": str(tmp / "state"), "NEV_INVENTORY": str(tmp / "inventory.json")})
        self.lane = box.lanes[0]
        self.uid = os.stat(self.lane.host_home).st_uid
        self.dev = tmp / "dev"

    def nev(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=self.dev if self.dev.exists() else ROOT,
                              env=env or self.env, capture_output=True, text=True, timeout=timeout)

    def ok(self, *args: str, **kw) -> subprocess.CompletedProcess:
        r = self.nev(*args, **kw)
        assert r.returncode == 0, f"nev {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def probe(self, rounds: int = 2) -> None:
        """Rounds of lane0's own probe now (`nev rig services once probe` on the lane), beside the
        one its supervisor runs every NEV_PROBE_EVERY: nothing copies a snapshot. Two by default:
        an alias an earlier test left failing is ready again only after NEV_PROBE_OKS=2 rounds."""
        for _ in range(rounds):
            collector = self.box.lanes[0]      # the lane that probes (`nev rig services install`)
            host = f"{self.box.name}-{collector.name}"
            r = subprocess.run(["ssh", "-F", str(self.box.ssh_config), host,
                                ".local/bin/nev rig services once probe"], capture_output=True, text=True,
                               timeout=120)
            assert r.returncode == 0, r.stderr

    def job(self, name: str, stages: list[dict], env: dict[str, str] | None = None, touches: tuple[str, ...] = (),
            free_name: bool = True) -> str:
        """Write specs/<name>.md on main and the job's manifest, submit it; the run id."""
        import yaml

        paths = "".join(f"  - {t}\n" for t in (f"out/{name}/**", *touches))
        (self.dev / "specs" / f"{name}.md").write_text(f"---\ntouches:\n{paths}---\n# {name}\n")
        git(self.dev, "add", "-A")
        git(self.dev, "commit", "-qm", f"spec {name}")
        base = git(self.dev, "rev-parse", "HEAD")
        m = self.dev / "jobs" / f"{name}.yaml"
        m.parent.mkdir(exist_ok=True)
        m.write_text(yaml.safe_dump({"name": name, "base": base, "spec": f"specs/{name}.md", "key": "batch",
                                     "limit": "1h", "stages": stages}, sort_keys=False))
        # a box kept across sessions may still hold this name's key from an earlier run (a name
        # another state folder holds is refused): freed as its operator would
        if free_name:
            self.nev("job", "revoke", name, env=env)
        r = self.ok("job", "submit", str(m), env=env)
        return r.stdout.strip().splitlines()[-1]

    def step_exit(self, run_id: str, step: str, timeout: float = 180) -> str:
        t0 = time.monotonic()
        while True:
            r = self.nev("dagu", "watch", "--once", "--step", step, run_id)
            out = r.stdout.strip().split()
            if out and re.fullmatch(r"\d+|-", out[0]):
                return out[0]
            assert time.monotonic() - t0 < timeout, f"step {step} of {run_id} did not end: {r.stdout}{r.stderr}"
            time.sleep(2)

    def record(self, name: str) -> dict:
        return json.loads((self.tmp / "state" / "job-results.json").read_text())["jobs"][name]

    def poll_until(self, name: str, status: str, timeout: float = 240) -> dict:
        t0 = time.monotonic()
        out = ""
        while time.monotonic() - t0 < timeout:
            r = self.nev("job", "poll")
            out += r.stderr
            try:
                rec = self.record(name)
            except (FileNotFoundError, KeyError):
                rec = {}
            if rec.get("status") == status:
                return rec
            if rec.get("status") in ("landed", "failed", "not-landed"):    # final, and not the one
                raise AssertionError(f"{name} became {rec['status']} ({rec.get('why')}), not {status}:\n"
                                     f"{out[-4000:]}")
            time.sleep(3)
        raise AssertionError(f"{name} never became {status}:\n{out[-4000:]}")

    def forge_has(self, branch: str) -> bool:
        r = subprocess.run(["git", "-C", str(self.dev), "ls-remote", "--heads", "origin", branch],
                           capture_output=True, text=True, env=self.git_env)
        return bool(r.stdout.strip())

    @property
    def git_env(self) -> dict[str, str]:
        return {**os.environ, "GIT_ASKPASS": str(self.box.forge_askpass), "GIT_TERMINAL_PROMPT": "0"}


@pytest.fixture(scope="module")
def rig(box, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jobs-box")
    r = Rig(box, tmp)
    url = create_repo(box, f"jobs-e2e-{int(time.time())}")
    r.env["NEV_LANE_GIT_URL"] = url                  # the lanes fetch and publish at the rig address
    r.env["NEV_FORGE_URL"] = box.dev_url(url)        # the dev box pushes through its forward
    archive = box.nas / "archive"
    archive.mkdir(exist_ok=True)
    os.chown(archive, r.uid, r.uid)
    git(tmp, "init", "-q", "-b", "main", str(r.dev))
    (r.dev / "README.md").write_text("jobs on the box\n")
    (r.dev / "tracks.json").write_text(json.dumps({"verify": "true", "specWatch": {"pollEnv": {}}}) + "\n")
    (r.dev / "specs").mkdir()
    git(r.dev, "add", "-A")
    git(r.dev, "commit", "-qm", "base")
    authed = box.dev_url(url).replace("://", f"://{box.forge_user}@", 1)
    git(r.dev, "remote", "add", "origin", authed)
    subprocess.run(["git", "-C", str(r.dev), "push", "-q", "origin", "main"], check=True, env=r.git_env)
    r.ok("dagu", "up")
    r.probe()
    yield r
    r.nev("dagu", "stop")


def _model_stage(name: str, alias: str) -> dict:
    # The key goes from its file into a header file (printf is a shell builtin: never in an argv).
    return {"name": name, "kind": "batch", "models": [alias], "command": (
        f'mkdir -p out/{{job}}; umask 077; printf "Authorization: Bearer %s\\n" "$(cat "$NEV_MODEL_KEY_FILE")" '
        f'> "$JOB_STATE/h"; code=$(curl -s -o out/{{job}}/answer.json -w "%{{http_code}}" -H @"$JOB_STATE/h" '
        f'-H "Content-Type: application/json" -d \'{{"model": "{alias}", "max_tokens": 8, "messages": '
        f'[{{"role": "user", "content": "write clamp_px"}}]}}\' "$NEV_LANE_MODEL_URL/v1/chat/completions"); '
        f'rm -f "$JOB_STATE/h"; echo "gateway answered $code"; test "$code" = 200')}


def _stages(job: str, alias: str) -> list[dict]:
    return [
        {"name": "gen", "kind": "command", "command": f"mkdir -p out/{job} && echo generated > out/{job}/a.txt"},
        {**_model_stage("ask", alias), "command": _model_stage("ask", alias)["command"].replace("{job}", job)},
        {"name": "check", "kind": "verify", "command": f"test -s out/{job}/a.txt && test -s out/{job}/answer.json"},
    ]


def _secrets(box) -> list[str]:
    out = [box.forge_token_file.read_text().strip()]
    out += [p.read_text().strip() for p in box.keys.values()]
    if box.master_key_file:
        out.append(box.master_key_file.read_text().strip())
    return [s for s in out if s]


def _forge_requests(box, job: str) -> list[tuple[str, str]]:
    """(client address, request) of every forge request about this job's branches or repository."""
    out = []
    for line in box.forge_access_log.read_text().splitlines():
        if "jobs-e2e-" in line and ("git-receive-pack" in line or "git-upload-pack" in line):
            out.append((line.split(" ", 1)[0], line))
    return out


def test_three_stage_job_runs_on_the_lane_publishes_and_poll_lands_it(rig, box):
    seen_before = len(_forge_requests(box, "threestage"))
    run_id = rig.job("threestage", _stages("threestage", "qwen3.8-27b-fast"))
    assert re.fullmatch(r"[0-9a-f-]{36}", run_id)
    assert rig.step_exit(run_id, "run") == "0"
    assert rig.step_exit(run_id, "publish") == "0"
    rec = rig.poll_until("threestage", "landed")
    assert rec["resends"] == 0
    # its queue wait: submitted to the first stage started, which the result told the poll
    wait = (dt.datetime.fromisoformat(rec["first_stage_at"].replace("Z", "+00:00"))
            - dt.datetime.fromisoformat(rec["submitted_at"])).total_seconds()
    assert 0 < wait < 240
    from prometheus_client.parser import text_string_to_metric_families

    text = rig.ok("rig", "metrics", "--skip", "lanes", "--skip", "dagu").stdout
    fam = {f.name: f.samples for f in text_string_to_metric_families(text)}
    assert any(s.name == "nev_job_queue_wait_seconds_count" and s.value >= 1
               for s in fam["nev_job_queue_wait_seconds"])
    assert fam["nev_job_queue_wait_max_seconds"][0].value >= round(wait, 3) - 0.001
    git(rig.dev, "checkout", "-q", "main")
    assert (rig.dev / "out" / "threestage" / "a.txt").read_text() == "generated\n"
    assert json.loads((rig.dev / "out" / "threestage" / "answer.json").read_text())["choices"]
    assert "job threestage: passed (exit 0)" in git(rig.dev, "log", "--format=%s", "main")
    assert not rig.forge_has("job/threestage") and not rig.forge_has("result/threestage")
    # the archived logs: every file listed, and no key, token, credential URL or address in any
    run = box.nas / "archive" / "job-logs" / "threestage" / run_id
    listed = {ln.rsplit(" ", 1)[0] for ln in (run / "archive.txt").read_text().splitlines()}
    assert {"state.json", "events.jsonl", "logs/gen.log", "logs/ask.log", "logs/check.log"} <= listed
    blob = "\n".join(p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())
    assert "gateway answered 200" in blob
    for s in _secrets(box):
        assert s not in blob
    assert box.net not in blob and "://" not in blob
    assert not re.search(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", blob)
    assert not (rig.lane.host_home / "dagu" / "jobs-work" / "threestage").exists()  # cleaned up
    # Two addresses of one forge: the dev box pushed the job branch through its forward (the
    # forge sees the jump host's rig address), the lane fetched and published the result at the
    # forge's rig address itself (the forge sees the lane).
    reqs = _forge_requests(box, "threestage")[seen_before:]
    pushes_dev = [r for a, r in reqs if a == box.jump_rig_addr and "git-receive-pack" in r]
    lane_fetch = [r for a, r in reqs if a == rig.lane.addr and "git-upload-pack" in r]
    lane_push = [r for a, r in reqs if a == rig.lane.addr and "git-receive-pack" in r]
    assert pushes_dev and lane_fetch and lane_push, reqs
    assert {a for a, _ in reqs} <= {box.jump_rig_addr, rig.lane.addr}, reqs


def test_pool_answering_503_gives_exit_3_is_resent_and_passes_after_recovery(rig, box):
    alias = "deepseek-v4.1-flash"
    pool = next(p for p, info in box.pools.items() if info.alias == alias)
    pool_control(box, pool, fail="503")
    try:
        rig.probe(rounds=2)  # failing after NEV_PROBE_FAILS=2 rounds
        run_id = rig.job("flaky", _stages("flaky", alias))
        assert rig.step_exit(run_id, "run") == "3"
        assert not rig.forge_has("result/flaky")  # the not-run result stays on the lane
    finally:
        pool_control(box, pool, reset=True)
    rig.probe(rounds=2)  # ready again after NEV_PROBE_OKS=2 rounds
    rec = rig.poll_until("flaky", "landed", timeout=300)
    assert rec["resends"] >= 1 and rec["sends"] == 1
    assert rec["run_id"] != run_id
    assert (rig.dev / "out" / "flaky" / "answer.json").exists() or \
        "out/flaky/answer.json" in git(rig.dev, "ls-tree", "-r", "--name-only", "main")


def test_retired_model_gives_exit_10_a_failed_result_and_is_not_resent(rig, box):
    declared = json.loads(Path(box.folknet_file).read_text())
    declared["aliases"]["glm-5.3-flash"] = {"pool": "gpu0", "max_inflight": 8, "provider": "self-hosted",
                                            "tier": "sampling", "retired": "2026-09-22", "keys": ["batch"]}
    f = rig.tmp / "folknet-retired.json"
    f.write_text(json.dumps(declared))
    run_id = rig.job("retired", _stages("retired", "glm-5.3-flash"), env={**rig.env, "NEV_FOLKNET_FILE": str(f)})
    assert rig.step_exit(run_id, "run") == "10"
    rec = rig.poll_until("retired", "failed")
    assert rec["exit"] == 10 and rec["resends"] == 0
    rig.nev("job", "poll")
    assert rig.record("retired")["resends"] == 0 and rig.record("retired")["run_id"] == run_id
    st = rig.ok("job", "status", "retired")
    assert "retired: failed (exit 10)" in st.stdout
    # another declared file made another declared copy; the first submission's copy is untouched
    first, second = rig.record("threestage")["params"]["DECLARED"], rig.record("retired")["params"]["DECLARED"]
    assert first != second
    on_host = rig.lane.host_home / Path(second).relative_to("/home/lane")
    assert on_host.read_bytes() == f.read_bytes()
    # every step ran the lane's installed nev; no copy of nev's sources went to the lane
    assert rig.record("retired")["params"]["NEV"] == "/home/lane/.local/bin/nev"
    assert not (rig.lane.host_home / "dagu" / "src").exists()


GEN = "crates_bridge/engine/crates/layout/src/generated"
# Each removable line makes a generated function wrong on part of its corpus; the two tracks and the
# job each remove one (far apart, so no landing conflicts with another), so each landing raises a floor.
GUARDS = {
    "A": (f"{GEN}/block_width.rs", "pub fn block_width(input: &BlockWidthInput) -> BlockWidthOutput {\n",
          "    if input.cb_width > 600.0 { return solve(input, Len::Px(1.0)); } // nev-test guard A\n"),
    "B": (f"{GEN}/block_width.rs", "    let cb = input.cb_width;\n",
          "    if cb < 150.0 { return BlockWidthOutput { width: -1.0, margin_left: 0.0, margin_right: 0.0 }; }"
          " // nev-test guard B\n"),
    "C": (f"{GEN}/abspos_width.rs", "pub fn abspos_width(input: &AbsposWidthInput) -> AbsposWidthOutput {\n",
          "    if input.cb_width > 600.0 { return solve(input, Len::Px(1.0)); } // nev-test guard C\n"),
}


def _engine_with_guards(dev: Path) -> None:
    """The example engine on main, floors 0/0, each guard line after its anchor (its first occurrence)."""
    from crates_bridge.workspace import EXAMPLE_ENGINE

    shutil.copytree(EXAMPLE_ENGINE, dev / "crates_bridge" / "engine", ignore=shutil.ignore_patterns("target"))
    for path, anchor, line in GUARDS.values():
        f = dev / path
        text = f.read_text()
        assert anchor in text, (path, anchor)
        f.write_text(text.replace(anchor, anchor + line, 1))
    with open(dev / ".gitignore", "a") as g:
        g.write("target/\n/corpus/\n")


def _unguard(wt: Path, guard: str) -> None:
    path, _anchor, line = GUARDS[guard]
    f = wt / path
    f.write_text(f.read_text().replace(line, "", 1))


def _floor(rig, rev: str, fn: str) -> dict:
    return json.loads(git(rig.dev, "show", f"{rev}:{GEN}/{fn}.floor.json"))


def test_one_installed_tick_lands_two_approved_tracks_and_a_finished_job_each_once(rig, box):
    """Acceptance (#21): two approved hand-written tracks and one finished job; one run of the
    tick as `nev job poll --install` scheduled it lands all three, each once, verify on the lane,
    and after each landing raises the floors on fresh three-browser ground truth built on a lane
    that had no corpus before (each landing fixes part of a generated function: each raises)."""
    import yaml

    names = ("ticka", "tickb")
    fixes = {"ticka": ("A", f"{GEN}/block_width.rs"), "tickb": ("C", f"{GEN}/abspos_width.rs")}
    git(rig.dev, "checkout", "-q", "main")
    _engine_with_guards(rig.dev)
    for n in names:
        (rig.dev / "specs" / f"{n}.md").write_text(f"---\ntouches:\n  - hand/{n}/**\n  - {fixes[n][1]}\n---\n# {n}\n")
    git(rig.dev, "add", "-A")
    git(rig.dev, "commit", "-qm", "the example engine, and specs of two hand-written tracks")
    subprocess.run(["git", "-C", str(rig.dev), "push", "-q", "origin", "main"], check=True, env=rig.git_env)
    for n in names:
        wt = rig.tmp / f"wt-{n}"
        git(rig.dev, "worktree", "add", "-q", "-b", n, str(wt), "main")
        (wt / "hand" / n).mkdir(parents=True)
        (wt / "hand" / n / "f.txt").write_text(f"{n}\n")
        _unguard(wt, fixes[n][0])
        git(wt, "add", "-A")
        git(wt, "commit", "-qm", f"track {n}")
        rig.ok("land", "approve", n)
    run_id = rig.job("tickjob", [{"name": "gen", "kind": "command", "command":
                                  f"mkdir -p out/tickjob && echo made > out/tickjob/a.txt && "
                                  f"sed -i '/nev-test guard B/d' {GEN}/block_width.rs"}],
                     touches=(f"{GEN}/block_width.rs",))
    assert rig.step_exit(run_id, "publish") == "0"
    assert rig.forge_has("result/tickjob")
    # The lane has never built a corpus for main's copy: none in the copy, none in the share's store.
    shutil.rmtree(rig.lane.host_root / copy_name(rig.dev) / "corpus", ignore_errors=True)
    shutil.rmtree(box.nas / "corpora", ignore_errors=True)
    home = rig.tmp / "tick-dagu-home"
    rig.ok("job", "poll", "--install", "--dagu-home", str(home), env={**rig.env, "NEV_CORPUS_CASES": "100"})
    doc = yaml.safe_load((home / "dags" / "nev-job-poll.yaml").read_text())
    step = doc["steps"][0]
    env = {k: v for e in doc["env"] for k, v in e.items()}
    assert env["NEV_CORPUS_CASES"] == "100"
    before = git(rig.dev, "rev-parse", "main")
    r = subprocess.run(["sh", "-c", step["command"]], cwd=step["dir"], env=env, capture_output=True, text=True,
                       timeout=2400)
    print(r.stderr[-8000:])
    assert r.returncode == 0, r.stderr[-4000:]
    for n in names:
        assert f"land: track {n}: landed" in r.stderr
    assert "tickjob: landed: landed on main" in r.stderr
    subjects = git(rig.dev, "log", "--format=%s", f"{before}..main").splitlines()
    assert sum(s == "track ticka" for s in subjects) == 1 and sum(s == "track tickb" for s in subjects) == 1
    assert sum(s == "job tickjob: passed (exit 0)" for s in subjects) == 1
    for path, text in (("hand/ticka/f.txt", "ticka"), ("hand/tickb/f.txt", "tickb"), ("out/tickjob/a.txt", "made")):
        assert git(rig.dev, "show", f"main:{path}") == text
    assert "nev-test guard" not in git(rig.dev, "show", f"main:{GEN}/block_width.rs") + \
        git(rig.dev, "show", f"main:{GEN}/abspos_width.rs")
    assert rig.record("tickjob")["status"] == "landed"
    assert not rig.forge_has("result/tickjob")
    # after each landing, one floors line, each a raise (the first of both functions, from 0/0)
    floors = [ln for ln in r.stderr.splitlines() if "land: after: floors" in ln]
    assert len(floors) == 3 and all(": floors: raised " in ln for ln in floors), floors
    assert "floors: raised 2 in" in floors[0] and all("floors: raised 1 in" in ln for ln in floors[1:]), floors
    raises = [s for s in subjects if s.startswith("floors: raise ")]
    assert len(raises) == 3, subjects
    # each corpus rendered once by the three browsers, on the first raise; found after that
    rendered = [ln for ln in r.stderr.splitlines() if " agreed of 100 generated" in ln]
    assert sorted(re.search(r"corpus/(\w+): \d+ agreed", ln).group(1) for ln in rendered) == \
        ["abspos_width", "block_width"], rendered
    for fn in ("block_width", "abspos_width"):
        copy = rig.lane.host_root / copy_name(rig.dev)
        man = json.loads((copy / "corpus" / fn / "manifest.json").read_text())
        assert sorted(man["engines"]) == ["chromium", "firefox", "webkit"] and man["generated"] == 100
        last = _floor(rig, "main", fn)
        assert 0 < last["cases_passed"] <= last["cases_run"] == man["cases"]
    # every raise went up: each floor file's history on main strictly increases; 2 + 1 + 1 raises
    changes = 0
    for fn in ("block_width", "abspos_width"):
        revs = git(rig.dev, "log", "--format=%H", "--reverse", f"{before}..main", "--",
                   f"{GEN}/{fn}.floor.json").splitlines()
        passed = [_floor(rig, rev, fn)["cases_passed"] for rev in revs]
        assert passed == sorted(set(passed)), (fn, passed)
        changes += len(passed)
    assert changes == 4
    # the next tick has nothing left
    main = git(rig.dev, "rev-parse", "main")
    r2 = subprocess.run(["sh", "-c", step["command"]], cwd=step["dir"], env=env, capture_output=True, text=True,
                        timeout=600)
    assert r2.returncode == 0 and "land: tick: 0 landed, 0 skipped, 0 refused" in r2.stderr, r2.stderr[-3000:]
    assert git(rig.dev, "rev-parse", "main") == main


def _restart_lane(box, lane) -> bool:
    """The lane rebooted. An LXC lane is a system container booting its own init (as the rig's
    lanes are): rebooted from inside (`reboot` as the guest's root), it comes back by itself and
    its cron runs the lane user's @reboot lines (Dagu's autostart); the box does nothing. True
    then. A netns lane cannot boot: every process of it is killed and the box starts its sshd
    again (False: Dagu must be started by hand)."""
    import signal

    from lanes.base import procs
    from rig.box import Box, state
    from tests.helpers.reboot import boots, reboot_lane

    st = state.read_state(box.dir)
    assert st is not None
    if boots(box):
        reboot_lane(box, lane.name)
        return True
    rec = st.procs[f"{lane.name}.sshd"]
    assert procs.alive(rec)
    ns = os.readlink(f"/proc/{rec.pid}/ns/net")
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and os.readlink(p / "ns" / "net") == ns:
                os.kill(int(p.name), signal.SIGKILL)
        except OSError:
            pass
    t0 = time.monotonic()
    while procs.alive(rec):
        assert time.monotonic() - t0 < 30, "the lane did not go down"
        time.sleep(0.2)
    r = Box(box.name, box.net, box.dir).bring_up(len(box.lanes))
    assert f"started {lane.name}.sshd" in r.changed, r.changed
    return False


def test_a_job_cut_off_by_a_lane_restart_is_resent_once_and_lands_without_rerunning_stage_one(rig, box):
    """Acceptance (#21): the lane restarted (its sshd and Dagu killed, then started) in the middle
    of a job's second stage; the tick resends the job once (counted), the resumed run does not run
    stage one again (its counter on the lane says 1), reruns stage two, and the job lands."""
    name = "cutoff"
    home = rig.lane.host_home
    one, two = home / f"{name}-one.count", home / f"{name}-two.count"
    for p in (one, two):
        p.unlink(missing_ok=True)
    git(rig.dev, "checkout", "-q", "main")
    run_id = rig.job(name, [
        {"name": "one", "kind": "command",
         "command": f'echo ran >> "$HOME/{one.name}" && mkdir -p out/{name} && echo one > out/{name}/one.txt'},
        # the first run of stage two holds until the lane goes down under it; the rerun passes
        {"name": "two", "kind": "command",
         "command": f'echo ran >> "$HOME/{two.name}"; if [ "$(wc -l < "$HOME/{two.name}")" -lt 2 ]; then '
                    f'sleep 600; fi; echo two > out/{name}/two.txt'},
    ])
    t0 = time.monotonic()
    while not two.exists():
        assert time.monotonic() - t0 < 180, f"stage two of {name} never started"
        time.sleep(1)
    assert "waiting: run" in rig.ok("job", "poll").stderr
    rig.ok("dagu", "autostart", "on")              # the lane user's @reboot line
    t_down = time.monotonic()
    if _restart_lane(box, rig.lane):
        # Dagu comes back by the lane's own autostart: nothing here starts it
        t0 = time.monotonic()
        while rig.nev("dagu", "status").returncode != 0:
            assert time.monotonic() - t0 < 120, "Dagu did not come back after the lane's reboot"
            time.sleep(1)
    else:
        rig.ok("dagu", "start")
    out = ""
    t0 = time.monotonic()
    t_resent = None
    while rig.record(name)["status"] != "landed":
        assert time.monotonic() - t0 < 420, f"{name} did not land:\n{out[-5000:]}"
        out += rig.nev("job", "poll").stderr
        if t_resent is None and "resent" in out:
            t_resent = time.monotonic()
        time.sleep(3)
    print(out[-4000:])
    print(f"lane down to up with Dagu: {t0 - t_down:.1f} s; Dagu up to the resend: "
          f"{(t_resent or t0) - t0:.1f} s (its zombie check); resend to landed: {time.monotonic() - (t_resent or t0):.1f} s")
    rec = rig.record(name)
    assert f"{name}: resent (run {run_id} was cut off:" in out
    assert rec["sends"] == 1 and rec["resends"] == 1 and rec["cutoffs"] == 1 and rec["run_id"] != run_id
    assert one.read_text() == "ran\n"              # stage one ran once, before the restart
    assert two.read_text() == "ran\nran\n"         # stage two: cut off, then rerun from its start
    assert git(rig.dev, "show", f"main:out/{name}/one.txt") == "one"
    assert git(rig.dev, "show", f"main:out/{name}/two.txt") == "two"
    subjects = git(rig.dev, "log", "--format=%s", "main").splitlines()
    assert subjects.count(f"job {name}: stage one (command)") == 1
    assert f"job {name}: passed (exit 0)" in subjects
    st = rig.ok("job", "status", name).stdout
    assert "1 resend(s)" in st and "1 cut-off(s)" in st


def _other_nev(tmp: Path, who: str) -> Path:
    """Another development box's nev: this checkout's sources with one line more (another key)."""
    from lanes import selfinstall

    other = tmp / f"nev-{who}"
    skip = shutil.ignore_patterns("__pycache__", "target", ".pytest_cache", ".mypy_cache", "*.pyc")
    for pkg in selfinstall.PACKAGES:
        shutil.copytree(ROOT / pkg, other / pkg, ignore=skip, dirs_exist_ok=True)
    for f in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / f, other / f)
    with open(other / "rig" / "__init__.py", "a") as f:
        f.write(f"# the nev of development box {who}\n")
    selfinstall.wheelhouse(selfinstall.default_cache(), other)   # built now: shorter waits later
    return other


def _stage_waiting(marker: bytes) -> bool:
    """Whether a process whose command line holds `marker` runs (the lanes' processes are this
    machine's too)."""
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and marker in (p / "cmdline").read_bytes():
                return True
        except OSError:
            pass
    return False


def test_a_stage_keeps_its_own_nev_while_another_box_installs_a_different_one(rig, box, tmp_path):
    """Acceptance (#33): a job stage that runs while another development box installs a different
    nev on the same lane finishes with its own nev (the stage waits for that install to end, not a
    fixed minute); afterwards the sweep removes the old install, never while it runs. The job runs
    development box B's nev, box C installs its own meanwhile. (This checkout's nev, A, stays for
    the lane's inventory services, which run it: the sweep keeps it while they do.)"""
    from lanes import selfinstall

    lane = str(rig.lane.index)
    home = rig.lane.host_home
    share = home / ".local" / "share" / "nev"
    box_b, box_c = _other_nev(tmp_path, "b"), _other_nev(tmp_path, "c")
    key_b, key_c = selfinstall.source_key(box_b), selfinstall.source_key(box_c)
    assert len({key_b, key_c, selfinstall.source_key()}) == 3

    def install_from(tree: Path) -> str:
        r = subprocess.run([sys.executable, "-m", "rig.cli", "lane", "install", "--lane", lane],
                           env={**rig.env, "PYTHONPATH": str(tree)}, cwd=tree, capture_output=True,
                           text=True, timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    assert f"changed: nev {key_b}" in install_from(box_b)
    go = home / ".pinned-go"
    go.unlink(missing_ok=True)
    which = 'readlink -f "$(command -v nev)"'
    run_id = rig.job("pinned", [{"name": "hold", "kind": "command", "command": (
        f'echo "first $({which})"; n=0; while [ ! -e "$HOME/.pinned-go" ] && [ $n -lt 600 ]; '
        f'do sleep 1; n=$((n+1)); done; echo "after $({which}) $NEV_INSTALL"; nev --version; '
        f'mkdir -p out/pinned && echo held > out/pinned/a.txt')}],
        env={**rig.env, "NEV_JOB_INSTALL_NEV": "0"})        # the job runs B's nev, current now
    t0 = time.monotonic()
    while not _stage_waiting(b".pinned-go"):
        assert time.monotonic() - t0 < 240, "the stage never started"
        time.sleep(1)
    t_install = time.monotonic()
    assert f"changed: nev {key_c}" in install_from(box_c)            # a fresh build, beside B
    print(f"box C's install while the stage ran: {time.monotonic() - t_install:.1f} s")
    assert os.readlink(share / "current") == f"installs/{key_c}"
    assert (share / "installs" / key_b / "bin" / "nev").exists()     # the running one untouched
    keep1 = {**rig.env, "NEV_INSTALLS_KEEP": "1"}
    only_installs = ("lane", "sweep", "--lane", lane, "--track", "no-such-track")
    dry = rig.ok(*only_installs, "--dry-run", env=keep1)
    assert f"kept nev install {key_b}: in use by" in dry.stdout, dry.stdout
    go.touch()
    try:
        assert rig.step_exit(run_id, "archive", timeout=600) == "0"
    finally:
        go.unlink(missing_ok=True)
    assert rig.step_exit(run_id, "run") == "0"
    log = (box.nas / "archive" / "job-logs" / "pinned" / run_id / "logs" / "hold.log").read_text()
    pinned = f"/home/lane/.local/share/nev/installs/{key_b}"
    assert f"first {pinned}/bin/nev" in log and f"after {pinned}/bin/nev {pinned}" in log, log
    assert "nev, version" in log
    # the stage ended: the sweep removes B's install now, and never the current one (C's)
    swept = rig.ok(*only_installs, env=keep1)
    assert f"removed nev install {key_b}" in swept.stdout, swept.stdout
    assert not (share / "installs" / key_b).exists() and (share / "installs" / key_c).exists()
    mine = selfinstall.source_key()
    again = rig.ok("lane", "install", "--lane", lane)   # this checkout's nev current again
    assert f"nev {mine}" in again.stdout and os.readlink(share / "current") == f"installs/{mine}"
