"""`nev job run` / `nev job check preflight` / `nev job status`: durable state, resume, requirements.

Real git checkouts, the real CLI as a subprocess, real processes killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from jobs import manifest as manifest_mod
from jobs import result as result_mod
from jobs.state import Event, JobState, Status, replay, valid_prefix
from lanes.base.errors import ConfigError
from lanes.base.gitrun import Repo
from lanes.base.procgroup import alive as group_alive
from tests.helpers.job_helpers import (
    Listener,
    events,
    free_port,
    git,
    lane_env,
    make_checkout,
    nev,
    nev_popen,
    tool_dir,
    write_manifest,
)


@pytest.fixture
def gateway():
    g = Listener()
    yield g
    g.close()


# --- manifest ------------------------------------------------------------------------------------

BASE = "a" * 40


def _parse(**over):
    data = {"name": "demo", "base": BASE, "spec": "specs/x.md", "stages": [{"name": "a", "kind": "command",
                                                                           "command": "true"}]}
    data.update(over)
    return manifest_mod.parse(data, "job.yaml")


@pytest.mark.parametrize("over,field", [
    ({"name": "Bad Name"}, "field name"),
    ({"base": "main"}, "field base"),
    ({"spec": ""}, "field spec"),
    ({"limit": "soon"}, "field limit"),
    ({"stages": []}, "field stages"),
    ({"stages": [{"name": "a", "kind": "shell", "command": "x"}]}, "field stages[0].kind"),
    ({"stages": [{"name": "a", "kind": "command"}]}, "field stages[0].command"),
    ({"stages": [{"name": "a", "kind": "writer", "model": "m"}]}, "field stages[0].brief"),
    ({"stages": [{"name": "a", "kind": "writer", "brief": "b", "model": "m", "command": "x"}]},
     "field stages[0].command"),
    ({"stages": [{"name": "a", "kind": "verify"}, {"name": "a", "kind": "verify"}]}, "field stages[1].name"),
    ({"stages": [{"name": "a", "kind": "batch", "command": "x", "models": [3]}]}, "field stages[0].models[0]"),
    ({"colour": "red"}, "field colour"),
    ({"budget": 1000}, "field budget"),
    ({"budget": {}}, "field budget"),
    ({"budget": {"tokens": 0}}, "field budget.tokens"),
    ({"budget": {"tokens": "lots"}}, "field budget.tokens"),
    ({"budget": {"gpu_s": -1}}, "field budget.gpu_s"),
    ({"budget": {"dollars": 5}}, "field budget.dollars"),
])
def test_manifest_errors_name_the_field(over, field):
    with pytest.raises(ConfigError) as e:
        _parse(**over)
    assert field in str(e.value) and "job.yaml" in str(e.value)


def test_manifest_limit_durations_and_needs():
    m = _parse(limit="90m", stages=[
        {"name": "gen", "kind": "batch", "command": "x", "models": ["m1", {"alias": "m2", "provider": "p"}]},
        {"name": "v", "kind": "verify"},
        {"name": "w", "kind": "writer", "brief": "b.md", "model": "m3"}])
    assert m.limit_s == 5400
    assert m.has_writer() and m.calls_model() and m.calls_gate() and m.needs_inventory()
    assert [x.alias for x in m.stage("w").models] == ["m3"]
    assert manifest_mod.parse_duration("2h") == 7200 and manifest_mod.parse_duration(30) == 30
    assert _parse(stages=[{"name": "a", "kind": "command", "command": "nev lane on . make"}]).calls_gate()
    assert not _parse().calls_gate() and not _parse().calls_model()


def test_manifest_budget_is_optional_and_read_as_tokens_and_gpu_seconds():
    assert (_parse().budget_tokens, _parse().budget_gpu_s) == (None, None)
    m = _parse(budget={"tokens": 200000, "gpu_s": 90})
    assert (m.budget_tokens, m.budget_gpu_s) == (200000, 90.0)
    assert _parse(budget={"tokens": 5}).digest != _parse(budget={"tokens": 6}).digest


# --- durable state (pure parts) -------------------------------------------------------------------

def test_job_events_are_an_enum_whose_values_are_the_ones_on_disk(tmp_path):
    assert [e.value for e in Event] == [
        "run-started", "preflight-passed", "preflight-failed", "inventory-skipped", "inventory-passed",
        "inventory-transient", "inventory-permanent", "stage-started", "stage-passed", "stage-failed",
        "stage-stopped", "stage-interrupted", "result-committed", "job-ended"]
    js = JobState.open(tmp_path / "s")
    js.record(Event.RUN_STARTED, job="j", stages=["a"], inputs={})
    js.record(Event.INVENTORY_TRANSIENT, exit=3, reasons=[])
    js.record(Event.STAGE_STARTED, stage="a", inputs={"head": "x"})
    with pytest.raises(ValueError):
        js.record("stage-pased", stage="a")          # type: ignore[arg-type]  # nothing written
    js.close()
    lines = (tmp_path / "s" / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["run-started", "inventory-transient",
                                                               "stage-started"]
    view = replay(valid_prefix("\n".join(lines) + "\n")[0])
    assert view.inventory is not None and view.inventory.outcome == "transient"
    assert view.stages["a"].status is Status.RUNNING
    bad = json.dumps({**json.loads(lines[0]), "event": "stage-pased"})
    with pytest.raises(ConfigError, match="did you mean 'stage-passed'"):
        valid_prefix(bad + "\n")


def test_events_valid_prefix_stops_at_a_torn_or_broken_line(tmp_path):
    js = JobState.open(tmp_path / "s")
    js.record("run-started", job="j", stages=["a"], inputs={})
    js.record("stage-started", stage="a", inputs={"head": "x"})
    js.close()
    p = tmp_path / "s" / "events.jsonl"
    good = p.read_text()
    p.write_text(good + '{"seq": 3, "event": "stage-pa')  # killed mid-write
    js = JobState.open(tmp_path / "s")
    assert len(js.events) == 2 and p.read_text() == good  # the torn tail is cut before the next append
    js.record("stage-passed", stage="a")
    js.close()
    evs, _ = valid_prefix(p.read_text())
    assert [e.seq for e in evs] == [1, 2, 3]
    # an edited line breaks the chain: what follows it is not trusted
    lines = p.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"x"', '"y"')
    evs, _ = valid_prefix("".join(lines))
    assert len(evs) == 2  # line 2 still parses, line 3's prev no longer matches
    assert replay(evs).stages["a"].status is Status.RUNNING


# --- the runner ---------------------------------------------------------------------------------

def _three_stage(tmp_path: Path, gate_marker: Path) -> tuple[Path, Path]:
    work = tmp_path / "work"
    base = make_checkout(work)
    m = write_manifest(tmp_path / "job.yaml", base, [
        {"name": "one", "kind": "command", "command": "echo one >> one.txt; echo ran >> $JOB_STATE/one.count"},
        {"name": "two", "kind": "command",
         "command": f"echo partial > two.txt; if [ -e {gate_marker} ]; then echo two > two.txt; "
                    f"else touch {gate_marker}.started; sleep 60; fi"},
        {"name": "three", "kind": "verify", "command": "test -e one.txt && test -e two.txt && echo ok > three.txt"},
    ])
    return work, m


def _killed_in_stage_two(tmp_path, gateway):
    """The three-stage job started and its runner killed (SIGKILL) while stage two runs:
    (marker, work, manifest, state folder, env, stage two's state at the kill)."""
    marker = tmp_path / "marker"
    work, m = _three_stage(tmp_path, marker)
    state = tmp_path / "state"
    env = lane_env(tmp_path, gateway.port)
    p = nev_popen(["job", "run", str(m), "--workdir", str(work), "--state", str(state)], env)
    t0 = time.monotonic()
    while True:
        assert p.poll() is None, p.communicate()
        assert time.monotonic() - t0 < 30
        if Path(f"{marker}.started").exists():
            st = json.loads((state / "state.json").read_text())
            if st["stages"]["two"]["status"] == "running":
                break
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return marker, work, m, state, env, st


def test_kill_9_in_stage_two_then_resume_does_not_rerun_stage_one(tmp_path, gateway):
    marker, work, m, state, env, st = _killed_in_stage_two(tmp_path, gateway)
    pgid = st["stages"]["two"]["pgid"]
    assert st["stages"]["one"]["status"] == "passed" and st["stages"]["two"]["status"] == "running"
    marker.touch()
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(state)], env)
    assert r.returncode == 0, r.stderr
    assert "stage one: passed before; not rerun" in r.stderr
    evs = events(state)
    started = [e["stage"] for e in evs if e["event"] == "stage-started"]
    assert started == ["one", "two", "two", "three"]
    assert [e["stage"] for e in evs if e["event"] == "stage-passed"] == ["one", "two", "three"]
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    assert any(e["event"] == "stage-interrupted" and e["stage"] == "two" for e in evs)
    assert (state / "one.count").read_text() == "ran\n"
    assert (work / "one.txt").read_text() == "one\n" and (work / "two.txt").read_text() == "two\n"
    assert not group_alive(pgid)  # the killed stage's leftover `sleep` was ended (a zombie may await its reaper)
    res = result_mod.read(Repo(work))
    assert res is not None and (res.outcome, res.exit) == ("passed", 0)
    log = git(work, "log", "--format=%s")
    assert log.count("stage one") == 1 and log.count("stage two") == 1
    final = json.loads((state / "state.json").read_text())
    assert final["status"] == "passed" and len(final["attempts"]) == 2
    # the stage-started event of one carries the inputs' hashes, stage-passed the outputs' paths
    one = next(e for e in evs if e["event"] == "stage-started" and e["stage"] == "one")
    assert len(one["inputs"]["stage"]) == 64 and len(one["inputs"]["head"]) == 40
    passed_one = next(e for e in evs if e["event"] == "stage-passed" and e["stage"] == "one")
    assert "one.txt" in passed_one["outputs"] and passed_one["outputs"][0].endswith("logs/one.log")
    # a rerun of a passed job runs nothing
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(state)], env)
    assert r.returncode == 0 and "nothing to run" in r.stderr
    st = nev(["job", "status", "--state", str(state), "--json"], env)
    assert json.loads(st.stdout)[0]["stages"] == {"one": "passed", "two": "passed", "three": "passed"}


def test_resume_after_a_lane_restart_signals_no_group_of_the_earlier_boot(tmp_path, gateway):
    """A stage cut short in an earlier boot of the lane (an LXC guest started again) left nothing
    behind, and its recorded group id may name another process now (the new Dagu, the runner):
    the resume signals nothing and reruns the stage."""
    import subprocess

    marker, work, m, state, env, _ = _killed_in_stage_two(tmp_path, gateway)
    from lanes.base import procgroup

    last = events(state)[-1]
    assert last["event"] == "stage-started" and last["stage"] == "two" and last["boot"] == procgroup.boot_id()
    procgroup.stop(last["pgid"])            # the restart took the stage's processes with it
    # an unrelated group that now holds the recorded id, as after a restart, and another boot
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        lines = (state / "events.jsonl").read_text().splitlines()
        lines[-1] = json.dumps({**last, "pgid": other.pid, "boot": "an-earlier-boot:1"}, sort_keys=True)
        (state / "events.jsonl").write_text("\n".join(lines) + "\n")
        marker.touch()
        r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(state)], env)
        assert r.returncode == 0, r.stderr
        assert "stage two: cut short by the last run (the lane has restarted since)" in r.stderr
        assert other.poll() is None and group_alive(other.pid)   # not signalled
        evs = events(state)
        assert [e["stage"] for e in evs if e["event"] == "stage-started"] == ["one", "two", "two", "three"]
        assert any(e["event"] == "stage-interrupted" and e["same_boot"] is False for e in evs)
        assert (state / "one.count").read_text() == "ran\n"
    finally:
        other.kill()
        other.wait()


def test_failed_stage_exits_1_with_a_failed_result_and_the_log(tmp_path, gateway):
    work = tmp_path / "work"
    base = make_checkout(work)
    m = write_manifest(tmp_path / "job.yaml", base, [
        {"name": "bad", "kind": "command", "command": "echo boom; exit 4"}])
    env = lane_env(tmp_path, gateway.port)
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(tmp_path / "st")], env)
    assert r.returncode == 1 and "stage bad: failed (exit 4)" in r.stderr
    assert "boom" in (tmp_path / "st" / "logs" / "bad.log").read_text()
    res = result_mod.read(Repo(work))
    assert res is not None and (res.outcome, res.exit) == ("failed", 1)


STAGE_KEY = "sk-stagekey-" + "61c0e9ab47d2"
STAGE_TOKEN = "forgetok-stage-" + "a91b2c3d"
JOB_KEY = "sk-jobkey-" + "0f4e7d21b9"


def test_a_stage_log_on_the_lane_holds_none_of_the_secrets_the_stage_was_given(tmp_path, gateway):
    """What a stage prints goes to its log masked as it is written, not only in the archived copy:
    its secret-named variables and the key and token files it can read, whole lines or not."""
    work = tmp_path / "work"
    base = make_checkout(work)
    keys = tmp_path / "keys"
    (keys / "job-keys").mkdir(parents=True)
    (keys / "model.key").write_text("lane-shared-" + "key77aa\n")
    (keys / "job-keys" / "leaky.key").write_text(JOB_KEY + "\n")
    (tmp_path / "forge.token").write_text(STAGE_TOKEN + "\n")
    for f in (keys / "model.key", keys / "job-keys" / "leaky.key", tmp_path / "forge.token"):
        f.chmod(0o600)
    m = write_manifest(tmp_path / "job.yaml", base, [
        {"name": "leaky", "kind": "command",
         "command": f"echo \"key=$NEV_MODEL_API_KEY\"; cat {keys}/model.key {keys}/job-keys/leaky.key; "
                    f"cat {tmp_path}/forge.token; echo plain line; printf 'tail %s' \"$NEV_MODEL_API_KEY\""}],
        name="leaky")
    env = lane_env(tmp_path, gateway.port, NEV_MODEL_API_KEY=STAGE_KEY, NEV_MODEL_KEY_FILE=str(keys / "model.key"),
                   NEV_FORGE_TOKEN_FILE=str(tmp_path / "forge.token"))
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(tmp_path / "st")], env)
    log = next((tmp_path / "st" / "logs").glob("leaky.log")).read_text()
    assert "plain line" in log and "key=***" in log and "tail ***" in log, (r.stderr, log)
    for secret in (STAGE_KEY, STAGE_TOKEN, "lane-shared-key77aa", JOB_KEY):  # JOB_KEY: this job's own key file
        assert secret not in log, secret


def test_a_stage_gets_the_jobs_budget_and_its_budget_exit_ends_the_job_with_12(tmp_path, gateway):
    work = tmp_path / "work"
    base = make_checkout(work)
    m = write_manifest(tmp_path / "job.yaml", base, [
        {"name": "gen", "kind": "command",
         "command": "echo \"tokens=$NEV_BUDGET_TOKENS gpu=$NEV_BUDGET_GPU_S\" > ../budget.txt; exit 12"}],
        budget={"tokens": 1234, "gpu_s": 5})
    env = lane_env(tmp_path, gateway.port)
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(tmp_path / "st")], env)
    assert r.returncode == 12, r.stderr
    assert "stage gen: the job's budget bound (exit 12)" in r.stderr
    assert (tmp_path / "budget.txt").read_text().split() == ["tokens=1234", "gpu=5.0"]
    res = result_mod.read(Repo(work))
    assert res is not None and (res.outcome, res.exit) == ("failed", 12)


def test_wall_clock_limit_stops_a_stage_with_exit_8(tmp_path, gateway):
    work = tmp_path / "work"
    base = make_checkout(work)
    m = write_manifest(tmp_path / "job.yaml", base, [
        {"name": "slow", "kind": "command", "command": "sleep 30"}], limit=2)
    env = lane_env(tmp_path, gateway.port, NEV_JOB_MIN_LEFT="0")
    t0 = time.monotonic()
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(tmp_path / "st")], env)
    assert r.returncode == 8 and time.monotonic() - t0 < 20
    assert "wall-clock limit" in r.stderr


def test_state_folder_inside_the_worktree_is_refused(tmp_path, gateway):
    work = tmp_path / "work"
    base = make_checkout(work)
    m = write_manifest(tmp_path / "job.yaml", base, [{"name": "a", "kind": "command", "command": "true"}])
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(work / ".st")],
            lane_env(tmp_path, gateway.port))
    assert r.returncode == 1 and "inside its worktree" in r.stderr and not (work / ".st").exists()


# --- the requirements check ---------------------------------------------------------------------

def _full_manifest(tmp_path: Path, limit: object = "1h") -> tuple[Path, Path]:
    work = tmp_path / "work"
    base = make_checkout(work)
    (work / "brief.md").write_text("write clamp_px\n")
    m = write_manifest(tmp_path / "job.yaml", base, [
        {"name": "gen", "kind": "batch", "command": "echo gen > gen.txt", "models": ["qwen3.8-27b-fast"]},
        {"name": "write", "kind": "writer", "brief": "brief.md", "model": "qwen3.8-27b-fast"},
        {"name": "check", "kind": "verify"}], limit=limit, key="batch")
    return work, m


UNMET = [
    ("git", {}, "git is not on PATH"),
    ("python3", {}, "python3 is not on PATH"),
    ("node", {}, "node is not on PATH"),
    ("kill", {}, "kill is not on PATH"),
    ("cargo", {}, "cargo is not on PATH"),
    ("chromium", {}, "browser chromium"),
    ("firefox-esr", {"NEV_JOB_BROWSERS": "chromium,firefox-esr,WebKitWebDriver"}, "browser firefox-esr"),
    ("WebKitWebDriver", {}, "browser WebKitWebDriver"),
    (None, {"NEV_LANE_MODEL_URL": "GATEWAY_CLOSED"}, "does not answer"),
    (None, {"NEV_LANE_MODEL_URL": ""}, ".lane-model-env does not exist and NEV_LANE_MODEL_URL is not set"),
    (None, {"NEV_JOB_MIN_FREE_GB": "100000000"}, "GiB needed"),
    (None, {"NEV_LANE_SHARED": "SHARE_MISSING"}, "shared archive folder"),
    (None, {"NEV_ON_LANE": ""}, "NEV_ON_LANE is not set"),
    (None, {"NEV_JOB_MIN_LEFT": "7200"}, "wall-clock limit left"),
    (None, {"TRACKS_TOOL": ""}, "no writer harness is declared"),
]


@pytest.mark.parametrize("leave_out,env_over,reason", UNMET,
                         ids=[u[0] or next(iter(u[1])) for u in UNMET])
def test_each_unmet_requirement_exits_9_with_its_reason_and_runs_no_stage(tmp_path, gateway, leave_out,
                                                                         env_over, reason):
    work, m = _full_manifest(tmp_path)
    if "TRACKS_TOOL" in env_over:  # neither tracks.json nor the environment declares the harness
        git(work, "rm", "-q", "tracks.json")
        (work / "tracks.json").write_text('{"verify": "true"}\n')
        git(work, "commit", "-qam", "no tool")
    over = dict(env_over)
    if over.get("NEV_LANE_MODEL_URL") == "GATEWAY_CLOSED":
        over["NEV_LANE_MODEL_URL"] = f"http://127.0.0.1:{free_port()}"
    if over.get("NEV_LANE_SHARED") == "SHARE_MISSING":
        over["NEV_LANE_SHARED"] = str(tmp_path / "no-share")
    env = lane_env(tmp_path, gateway.port, tool_dir(tmp_path / "bin", leave_out), **over)
    if env.get("NEV_ON_LANE") == "":
        del env["NEV_ON_LANE"]
        env["NEV_MODEL_URL"] = env["NEV_LANE_MODEL_URL"]  # off a lane the gateway is the dev box's URL
    state = tmp_path / "st"
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(state)], env)
    assert r.returncode == 9, r.stderr
    unmet_lines = [ln for ln in r.stderr.splitlines() if ln.startswith("requirements: unmet:")]
    assert len(unmet_lines) == 1 and reason in unmet_lines[0], r.stderr
    st = json.loads((state / "state.json").read_text())
    assert st["preflight"]["ok"] is False and reason in st["preflight"]["reasons"][0]["message"]
    assert not any(e["event"] == "stage-started" for e in events(state))
    assert not (work / "gen.txt").exists() and not (state / "logs").exists()


def test_every_requirement_met_passes_the_check_and_two_unmet_give_both_reasons(tmp_path, gateway):
    work, m = _full_manifest(tmp_path)
    env = lane_env(tmp_path, gateway.port, tool_dir(tmp_path / "bin"))
    r = nev(["job", "check", "preflight", str(m), "--workdir", str(work)], env)
    assert r.returncode == 0, r.stderr
    env = lane_env(tmp_path, gateway.port, tool_dir(tmp_path / "bin2", "node"), NEV_JOB_MIN_FREE_GB="100000000")
    state = tmp_path / "st"
    r = nev(["job", "check", "preflight", str(m), "--workdir", str(work), "--state", str(state)], env)
    assert r.returncode == 9
    assert "node is not on PATH" in r.stderr and "GiB needed" in r.stderr
    kinds = [x["kind"] for x in json.loads((state / "state.json").read_text())["preflight"]["reasons"]]
    assert kinds == ["tool-missing", "disk-short"]
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(tmp_path / "st2")], env)
    assert r.returncode == 9 and r.stderr.count("requirements: unmet:") == 2
    res = result_mod.read(Repo(work))
    assert res is not None and (res.outcome, res.exit) == ("failed", 9)


def test_time_used_across_resumes_counts_against_the_limit(tmp_path, gateway):
    work, m = _full_manifest(tmp_path, limit=700)
    env = lane_env(tmp_path, gateway.port, tool_dir(tmp_path / "bin"))
    state = tmp_path / "st"
    js = JobState.open(state)
    js.record("run-started", job="demo", stages=[], inputs={})
    js.close()
    # the earlier attempt ran 150 s (its last event 150 s after its start): 550 s left < 600
    lines = (state / "events.jsonl").read_text().splitlines()
    ev = json.loads(lines[0])
    ev["time"] = "2026-01-01T00:00:00.000Z"
    (state / "events.jsonl").write_text(json.dumps(ev, sort_keys=True) + "\n")
    (state / "clock.json").write_text(json.dumps({"attempt": 1, "last_seen_ts": 1767225750.0}))
    r = nev(["job", "check", "preflight", str(m), "--workdir", str(work), "--state", str(state)], env)
    assert r.returncode == 9 and "550 s of the job's 700 s wall-clock limit left" in r.stderr


def test_sigterm_stops_the_job_with_exit_8_and_a_resume_reruns_the_stopped_stage(tmp_path, gateway):
    work = tmp_path / "work"
    base = make_checkout(work)
    flag = tmp_path / "go"
    m = write_manifest(tmp_path / "job.yaml", base, [
        {"name": "wait", "kind": "command",
         "command": f"echo x > partial.txt; if [ -e {flag} ]; then echo done > w.txt; else sleep 60; fi"}])
    state = tmp_path / "st"
    env = lane_env(tmp_path, gateway.port)
    p = nev_popen(["job", "run", str(m), "--workdir", str(work), "--state", str(state)], env)
    t0 = time.monotonic()
    while not (state / "state.json").exists() or \
            json.loads((state / "state.json").read_text())["stages"]["wait"]["status"] != "running":
        assert p.poll() is None and time.monotonic() - t0 < 30
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 8, err
    st = json.loads((state / "state.json").read_text())
    assert st["stages"]["wait"]["status"] == "stopped" and st["status"] == "stopped"
    res = result_mod.read(Repo(work))
    assert res is not None and (res.outcome, res.exit) == ("stopped", 8)
    flag.touch()
    r = nev(["job", "run", str(m), "--workdir", str(work), "--state", str(state)], env)
    assert r.returncode == 0, r.stderr
    assert (work / "w.txt").read_text() == "done\n"
    assert git(work, "log", "--format=%s").count("job demo: stopped") == 0  # the old result was replaced
