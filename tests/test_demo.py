"""`nev box demo` end to end on the session's rig-in-a-box (run with --keep: the box is shared).

Every step must pass, each asserted by its real outcome (hosts collected, a snapshot stored, a
repository on the forge with the spec on main, a corpus built by three browsers on a lane and
pulled home, the job's result landed with its floor raised, the function scored there at its
floor, the dashboard serving the kept box), and the exit status is 0.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from lanes.base.gitrun import Repo
from rig.box.demo.report import FAILED, PASSED, SKIPPED, StepResult, exit_code, summary_table

ROOT = Path(__file__).resolve().parent.parent
GEN = "crates_bridge/engine/crates/layout/src/generated"


def _status_of(summary: str) -> dict[int, str]:
    out = {}
    for line in summary.splitlines():
        m = re.match(r"^(\d)\. .*?  (passed|failed|skipped)", line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def test_demo_passes_every_step_and_lands_a_generated_function_at_its_floor(box):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NEV_BOX_NAME": box.name, "NEV_BOX_NET": box.net,
           "NEV_BOX_DIR": str(box.dir.parent)}
    env.pop("NEV_ON_LANE", None)
    cp = subprocess.run([sys.executable, "-m", "rig.cli", "box", "demo", "--keep", "--cases", "120"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    out, err = cp.stdout, cp.stderr
    steps = _status_of(out)
    assert sorted(steps) == list(range(1, 9)), out + err[-3000:]
    # one progress line per step, with the elapsed time
    assert len(re.findall(r"^\[\s*\d+\.\d s\] step \d ", err, re.M)) == 8, err[-3000:]
    assert steps == {n: "passed" for n in range(1, 9)}, out + err[-3000:]
    assert "8 of 8 steps ran and passed\n" in out and cp.returncode == 0, out + err[-3000:]

    work = Path(re.search(r"^work: (.+)$", out, re.M).group(1))  # type: ignore[union-attr]
    logs = Path(re.search(r"^logs: (.+)$", out, re.M).group(1))  # type: ignore[union-attr]
    # 1: every host advertised its role and lane0's collector found it; lane0's own probe marked
    # every alias ready (its snapshot, read over SSH and kept in the work folder)
    inv = json.loads((work / "inventory.json").read_text())
    # (other tests' advertisers on the session box may be listed too: the box's own hosts are checked)
    assert set(box.hosts) <= set(inv["hosts"]) and all(inv["hosts"][n]["status"] == "up" for n in box.hosts)
    assert {n: inv["hosts"][n]["role"] for n in box.hosts} == {n: h["role"] for n, h in box.hosts.items()}
    assert inv.get("probed_at") and all(a["status"] == "ready" for a in inv["aliases"].values())
    # 2: the snapshot is stored under its label
    assert (logs.parent / "rig-notes" / "snapshots" / "labels" / "demo-start.json").exists()
    # 3: the repository on the forge has the spec on main
    primary = next(work.glob("engine-*"))
    track = work / "abspos_width"
    url = Repo(primary).out("remote", "get-url", "origin")
    forge_main = Repo(primary).out("ls-remote", url, "refs/heads/main",
                                   env={"GIT_ASKPASS": str(box.forge_askpass)}).split()[0]
    assert re.search(rf"main on the forge:\s+{forge_main}", out), out
    spec = Repo(primary).out("show", f"{forge_main}:specs/abspos_width.md")
    assert "touches:" in spec and f"{GEN}/abspos_width.rs" in spec
    # the job carries the track: its local worktree made way at submit
    assert not track.exists()
    # 4: the corpus was built by the three browsers on the lane and pulled home (again, for
    # scoring, into the primary checkout, at main after the landing)
    man = json.loads((primary / "corpus" / "abspos_width" / "manifest.json").read_text())
    assert man["generated"] == 120 and man["cases"] >= 100
    assert set(man["engines"]) == {"chromium", "firefox", "webkit"}
    # each corpus rendered once: the primary's lane copy copied both from the corpus store on the
    # share (step 6), and scoring there (step 7) found them in place
    text = (logs / "6-land.log").read_text()
    copied = re.findall(r"/corpus/(\w+): copied from the corpus store \S+/corpora/(\w+-[0-9a-f]{16}) ", text)
    assert sorted(n for n, _ in copied) == ["abspos_width", "block_width"], text[-3000:]
    assert f"abspos_width-{man['key'][:16]}" in {e for _, e in copied}
    text = (logs / "7-results.log").read_text()
    # the oracle build's own lines (scores and floors check, prefixed `floors:`, find them in place too)
    assert sorted(re.findall(r"^/\S+/corpus/(\w+): up to date \(key", text, re.M)) == ["abspos_width", "block_width"], text
    assert "copied from the corpus store" not in text and "starting chromium" not in text, text
    # 7: the function scored on the lane passes its corpus at (or above) its floor
    m = re.search(r"abspos_width score:\s+(\d+)/(\d+)\s+floor: (\d+)/(\d+)", out)
    assert m, out
    passed, run, floor_p, _ = map(int, m.groups())
    assert run == man["cases"] and 0 < passed <= run and passed >= floor_p
    assert re.search(r"floors check:\s+abspos_width .* (ok|better) ", out), out
    # 6: the track landed: main of the primary checkout holds the generated function, tagged by the
    # landing, and the floors commit on top raised its floor to the score the lane measured
    landed = re.search(r"landed commit:\s+([0-9a-f]{40})", out).group(1)  # type: ignore[union-attr]
    g = Repo(primary)
    assert g.git("merge-base", "--is-ancestor", forge_main, landed, check=False).returncode == 0
    assert g.out("diff", "--name-only", forge_main, landed).splitlines() == [
        f"{GEN}/abspos_width.provenance.json", f"{GEN}/abspos_width.rs"]
    assert g.out("merge-base", "--is-ancestor", landed, "main", check=False) == ""
    floor = json.loads(g.out("show", f"main:{GEN}/abspos_width.floor.json"))
    assert floor == {"cases_passed": passed, "cases_run": run} and passed == run, floor
    prov = json.loads(g.out("show", f"main:{GEN}/abspos_width.provenance.json"))
    # the sampling tier only had wrong answers: the version kept came from the capacity tier
    assert prov["batch"]["escalated"] is True, prov["batch"]
    assert [m["alias"] for m in prov["batch"]["models"]] == ["qwen3.8-27b-fast", "deepseek-v4.1-flash"]
    assert re.search(rf"ledger line:\s+\S+ {prov['batch']['id']} abspos_width ", out), out
    # 5: the job's queue wait (submitted to its first stage) and its batch's draw waits (request
    # to first byte, per alias) are in `nev rig metrics`, read as Prometheus reads them
    from prometheus_client.parser import text_string_to_metric_families

    menv = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    menv.update({**box.env, "PYTHONPATH": str(ROOT)})
    mp = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "metrics", "--skip", "lanes",
                         "--skip", "dagu"], cwd=ROOT, env=menv, capture_output=True, text=True,
                        timeout=300)
    assert mp.returncode == 0, mp.stderr
    fam = {f.name: f for f in text_string_to_metric_families(mp.stdout)}
    assert fam["nev_job_queue_wait_seconds"].type == "summary", mp.stdout
    job_q = {s.name: s.value for s in fam["nev_job_queue_wait_seconds"].samples
             if "quantile" not in s.labels}
    assert job_q["nev_job_queue_wait_seconds_count"] >= 1
    assert fam["nev_job_queue_wait_max_seconds"].samples[0].value > 0
    draws = {s.labels["alias"] for s in fam["nev_draw_queue_wait_seconds"].samples}
    assert {m["alias"] for m in prov["batch"]["models"]} <= draws, mp.stdout
    assert all(s.value > 0 for s in fam["nev_draw_queue_wait_max_seconds"].samples)
    # 5: as a Dagu job: its logs archived on the NAS
    archive = Path(re.search(r"job archived log:\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    assert archive.name == "archive.txt" and archive.is_file(), out
    assert "gen.log" in archive.read_text() and archive.is_relative_to(box.nas)
    # 8: --keep leaves the box up
    st = subprocess.run([sys.executable, "-m", "rig.cli", "box", "status"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=60)
    assert st.returncode == 0, st.stdout + st.stderr
    # 8: and the dashboard serves the kept box on 127.0.0.1 (stopped here by the pid it recorded)
    url = re.search(r"^dashboard:\s+(http://127\.0\.0\.1:\d+/)", out, re.M)
    pid_file = logs.parent / "dashboard.pid"
    assert url and pid_file.exists(), out
    pid = int(pid_file.read_text())
    try:
        with urllib.request.urlopen(url.group(1), timeout=30) as resp:
            body = resp.read().decode(errors="replace")
        assert resp.status == 200 and "qwen3.8-27b-fast" in body, body[:500]
    finally:
        os.killpg(pid, signal.SIGTERM)


# ---- the pure parts ----

def test_the_demo_bank_has_only_wrong_answers_below_the_capacity_tier():
    from rig.box.demo.bank import demo_bank

    fn = demo_bank()["functions"]["abspos_width"]
    assert [c["kind"] for c in fn["sampling"]] == ["wrong", "wrong"]
    assert [c["kind"] for c in fn["capacity"]] == ["right"]
    right = fn["capacity"][0]["code"]
    assert "if free < 0.0 => (0.0, free)" in right and "(x * 64.0).floor() / 64.0" in right
    assert right not in [c["code"] for c in fn["sampling"]]


def test_the_demo_tells_a_rendered_corpus_from_a_copied_one_by_the_build_summary(tmp_path):
    from bench.oracle.build import BuildResult, summary_lines
    from bench.oracle.store import StoreManifest
    from rig.box.demo.steps import rendered_corpora

    man = StoreManifest.of({"key": "ab" * 32, "cases": 3, "generated": 4, "quarantined": 0,
                            "agreement": {"3/3": 4}, "engines": {"chromium": "156"}})
    made = BuildResult(tmp_path / "corpus" / "abspos_width", True, man, rates={"chromium": 1.0})
    copied = BuildResult(tmp_path / "corpus" / "block_width", True, man, rendered=False,
                         shared=tmp_path / "corpora" / f"block_width-{man.key[:16]}")
    found = BuildResult(tmp_path / "corpus" / "other", False, man)
    out = "\n".join(summary_lines(made) + summary_lines(copied) + summary_lines(found))
    assert rendered_corpora(out) == ["abspos_width"]
    assert rendered_corpora("\n".join(summary_lines(copied) + summary_lines(found))) == []


def test_exit_is_zero_only_when_every_step_ran_and_passed_and_the_summary_says_what_did_not():
    steps = [StepResult(1, "box", PASSED, 2.0), StepResult(2, "job", FAILED, 1.0, note="boom"),
             StepResult(3, "results", SKIPPED, 0.0, note="an earlier step failed")]
    text = summary_table(steps)
    assert exit_code(steps) == 1
    assert "1 of 3 steps ran and passed; failed: step 2; did not run: step 3" in text
    assert re.search(r"2\. job\s+failed: see below", text) and "step 2 failed: boom" in text
    assert "total" in text and "3.0" in text
    assert exit_code([StepResult(1, "a", PASSED), StepResult(2, "b", PASSED)]) == 0
    assert exit_code([]) == 1
    line = StepResult(5, "job", PASSED, 3.7, note="job submitted").line(12.5)
    assert line == "[  12.5 s] step 5 job: passed in 3.7 s: job submitted"


def test_steps_beside_others_overlap_and_a_failure_among_them_stops_the_later_steps(tmp_path):
    """The driver: the rest of step 1 after its box up, step 2 and step 4 run beside the next
    steps (each proves it by waiting for a later step to start), step 5 waits for step 2 inside
    itself; step 4 fails, so 6 and 7 do not run, 8 does, and the exit is 1."""
    import threading
    import types

    from rig.box.demo.steps import Demo, Options, StepFailed

    started = {n: threading.Event() for n in range(1, 9)}
    said: list[str] = []
    out: list[str] = []

    class Fake(Demo):
        def prepare(self) -> None:
            self.work = tmp_path

        def _step(self, n: int, wait_for: int | None = None, fail: bool = False) -> str:
            started[n].set()
            if wait_for is not None:
                assert started[wait_for].wait(timeout=30), f"step {wait_for} did not start beside step {n}"
            if fail:
                raise StepFailed(f"step {n} broke")
            return f"step {n} done"

        def step1_box(self) -> str:
            self.box_up.set()
            return self._step(1, wait_for=3)

        def step2_snapshot(self) -> str:
            return self._step(2, wait_for=3)

        def step3_repo(self) -> str:
            return self._step(3)

        def step4_corpus(self) -> str:
            return self._step(4, wait_for=5, fail=True)

        def step5_job(self) -> str:
            self.wait_step(2)
            return self._step(5)

        def step6_land(self) -> str:
            return self._step(6)

        def step7_results(self) -> str:
            return self._step(7)

        def step8_end(self) -> str:
            return self._step(8)

    box = types.SimpleNamespace(name="fake", net="198.18.250", dir=tmp_path)
    d = Fake(Options(say=said.append, stdout=out.append), box)  # type: ignore[arg-type]
    assert d.run() == 1
    status = {s.number: s.status for s in d.steps}
    assert status == {1: PASSED, 2: PASSED, 3: PASSED, 4: FAILED, 5: PASSED, 6: SKIPPED, 7: SKIPPED, 8: PASSED}
    assert not started[6].is_set() and not started[7].is_set() and started[8].is_set()
    assert len([x for x in said if re.match(r"^\[\s*\d+\.\d s\] step \d ", x)]) == 8
    text = "\n".join(out)
    assert "step 4 failed: step 4 broke" in text and "failed: step 4; did not run: step 6, 7" in text


def test_the_summary_total_is_the_wall_time_when_steps_ran_beside_others():
    steps = [StepResult(1, "a", PASSED, 5.0), StepResult(2, "b", PASSED, 4.0), StepResult(3, "c", PASSED, 3.0)]
    text = summary_table(steps, wall=9.0)
    assert re.search(r"^total\s+9\.0$", text, re.M)
    assert "(the steps' own times add up to 12.0 s: some ran beside others)" in text
    assert re.search(r"^total\s+12\.0$", summary_table(steps), re.M)
    assert "beside" not in summary_table(steps, wall=12.0)


def test_a_command_s_progress_lines_are_logged_with_their_time_and_its_output_is_kept_whole(tmp_path):
    from rig.box.demo.commands import run_stamped

    cp, stamped = run_stamped(["sh", "-c", "echo out; echo e1 >&2; echo e2 >&2; printf e3 >&2; exit 3"],
                              tmp_path, {"PATH": os.environ["PATH"]}, 60)
    assert (cp.returncode, cp.stdout, cp.stderr) == (3, "out\n", "e1\ne2\ne3")
    lines = stamped.splitlines()
    assert [re.sub(r"^\[\+\s*\d+\.\d s\] ", "", x) for x in lines] == ["e1", "e2", "e3"], stamped
    assert all(re.match(r"^\[\+\s*\d+\.\d s\] ", x) for x in lines) and stamped.endswith("\n")
    assert stamped.seconds > 0
    with pytest.raises(subprocess.TimeoutExpired):
        run_stamped(["sleep", "30"], tmp_path, {"PATH": os.environ["PATH"]}, 0.2)


def test_box_ups_progress_is_said_while_it_runs_not_after(tmp_path):
    """A cold `box up` takes minutes before step 1's line: its progress lines are said as they
    come, each with the demo's clock and the step, while the command still runs."""
    import time
    import types

    from rig.box.demo.commands import run_stamped
    from rig.box.demo.steps import Demo, Options

    said: list[tuple[float, str]] = []
    d = Demo(Options(say=lambda s: said.append((time.monotonic(), s))),
             types.SimpleNamespace(name="fake", net="198.18.250", dir=tmp_path))  # type: ignore[arg-type]
    script = "import sys, time; print('box fake: network (4/18, 0 s)', file=sys.stderr, flush=True); time.sleep(1.5)"
    run_stamped([sys.executable, "-c", script], tmp_path, dict(os.environ), 60, on_line=d.relay("1-box"))
    ended = time.monotonic()
    assert len(said) == 1 and re.match(r"^\[\s*\d+\.\d s\]   1-box: box fake: network \(4/18, 0 s\)$", said[0][1])
    assert ended - said[0][0] > 1.0, "the line was said only when the command ended"


def test_box_up_says_a_line_as_each_phase_starts():
    from rig.box.build import Build

    b = Build.__new__(Build)
    b.name = "tb"
    b.changed = []
    ran: list[str] = []
    phases = b.phases()
    assert len(phases) >= 15 and all(callable(fn) for _, fn in phases)
    b.phases = lambda: [(what, (lambda w=what: ran.append(w))) for what, _ in phases]  # type: ignore[method-assign]
    said: list[str] = []
    b.run(say=lambda s: said.append(s) or ran.append("said"))
    assert len(said) == len(phases) and ran[0] == "said" and ran[1] == phases[0][0]
    assert said[4].startswith("box tb: the gateway (LiteLLM) starting (5/")
    assert any("image" in s for s in said)
