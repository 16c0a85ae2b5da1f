"""Budgets and the planner on the rig-in-a-box: the real LiteLLM proxy and HAProxy, the stand-in
pools answering from the banks, real rustc; batches run in place as a job's batch stage runs them
(NEV_ON_LANE=1, the job's name as NEV_LEDGER_NAME, the manifest's budget as NEV_BUDGET_TOKENS)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bench import folknet as fk
from bench import ledger
from bench.ledger import spent_in
from rig.box.poolctl import pool_control
from tests.test_batch_box import DATA, ROOT, SAMPLING, env_for, nev, repo  # noqa: F401  (repo: a fixture)


@pytest.fixture
def wrong_only(box, repo):  # noqa: F811
    """Pools answering abspos_width only with wrong or broken versions: a batch never passes, so
    it draws every round it is allowed."""
    for p in box.pools:
        pool_control(box, p, reset=True)
        pool_control(box, p, bank=str(DATA / "bank_escalate.json"))
    yield box
    for p in box.pools:
        pool_control(box, p, reset=True)


def lines_of(box, name: str) -> list[ledger.LedgerLine]:
    return ledger.read(ledger.ledger_dir(box.nas) / f"{name}.jsonl")


def calls_in(lines: list[ledger.LedgerLine]) -> int:
    return sum(m.calls or 0 for ln in lines for m in ln.model_lines().values())


def test_a_jobs_token_budget_stops_the_batch_before_passing_it_and_the_next_job_is_unaffected(
        wrong_only, repo, tmp_path):  # noqa: F811
    box = wrong_only
    env = {**env_for(box, repo), "NEV_THROUGHPUT_DIR": str(tmp_path / "tp")}
    run = ["batch", "run", "abspos_width", "--models", f"{SAMPLING}:8:4", "--escalate-after", "9", "--seed", "3"]
    tag = uuid.uuid4().hex[:6]

    # What one round costs, measured here (a job without a budget, one round)
    r0 = nev({**env, "NEV_LEDGER_NAME": f"measure-{tag}"}, repo, *run, "--max-batches", "1")
    assert r0.returncode == 1, r0.stdout + r0.stderr
    per_round = spent_in(lines_of(box, f"measure-{tag}"))[0]
    assert per_round > 0
    budget = per_round * 3 // 2

    # job A: a budget of 1.5 rounds, four rounds allowed
    served0 = pool_control(box, "gpu0")["served"]
    ra = nev({**env, "NEV_LEDGER_NAME": f"job-a-{tag}", "NEV_BUDGET_TOKENS": str(budget)}, repo, *run,
             "--max-batches", "4")
    assert ra.returncode == 12, ra.stdout + ra.stderr
    assert "the budget bound" in ra.stdout and "no version passed before the budget bound" in ra.stdout
    assert f"plan: {SAMPLING} 8 at 4 (asked 8 at 4): bound by asked" in ra.stdout     # the line before a round
    assert re.search(rf"plan: {SAMPLING} \d+ at \d+ \(asked 8 at 4\): bound by budget", ra.stdout), ra.stdout
    la = lines_of(box, f"job-a-{tag}")
    spent = spent_in(la)[0]
    assert per_round <= spent <= budget, (spent, budget)
    assert 2 <= len(la) < 4                          # it stopped before the rounds it was allowed
    last = la[-1]
    assert last.budget is not None and last.budget.bound == "tokens" and last.budget.tokens == budget
    assert last.budget.spent_tokens == spent
    share = last.model_lines()[SAMPLING]
    assert share.status == "budget" and (share.constraints or {})["bound"] == "budget"
    # every call the pool served is in the ledger: nothing drawn unmetered
    assert pool_control(box, "gpu0")["served"] - served0 == calls_in(la)

    # job A again (a resume): its ledger already holds the spend, so nothing is drawn
    served1 = pool_control(box, "gpu0")["served"]
    ra2 = nev({**env, "NEV_LEDGER_NAME": f"job-a-{tag}", "NEV_BUDGET_TOKENS": str(budget)}, repo, *run,
              "--max-batches", "4")
    assert ra2.returncode == 12, ra2.stdout + ra2.stderr
    assert pool_control(box, "gpu0")["served"] == served1
    assert spent_in(lines_of(box, f"job-a-{tag}"))[0] == spent

    # the next job, with a budget of its own the same size: job A's spend is not its spend
    rb = nev({**env, "NEV_LEDGER_NAME": f"job-b-{tag}", "NEV_BUDGET_TOKENS": str(budget)}, repo, *run,
             "--max-batches", "1")
    assert rb.returncode == 1, rb.stdout + rb.stderr      # no pass, but not the budget
    lb = lines_of(box, f"job-b-{tag}")
    assert len(lb) == 1 and lb[0].candidates == 8 and lb[0].budget is not None and lb[0].budget.bound is None
    assert lb[0].model_lines()[SAMPLING].status == "ok"

    # `nev ledger` shows the spend against the budget and that it bound; --json the constraints
    t = nev(env, repo, "ledger", "--worktree", f"job-a-{tag}")
    assert t.returncode == 0 and f"spent: {spent} tokens of {budget}" in t.stdout
    assert "the budget bound (tokens)" in t.stdout and "bound by budget" in t.stdout
    js = nev(env, repo, "ledger", "--worktree", f"job-a-{tag}", "--json")
    rows = [json.loads(x) for x in js.stdout.splitlines()]
    first = rows[0]["models"][SAMPLING]["constraints"]
    # 4 asked, 8 declared: the ask sized the first round (its seconds: the time all 4 were out)
    assert (first["planned"], first["inflight_by"], first["bound"]) == ("asked", "asked", "asked")
    assert first["seconds"]["asked"] >= 0
    assert rows[-1]["models"][SAMPLING]["constraints"]["bound"] == "budget"


def test_a_429_freezes_the_alias_and_the_next_rounds_plan_and_the_ledger_name_the_cooldown(
        wrong_only, repo, tmp_path):  # noqa: F811
    box = wrong_only
    env = {**env_for(box, repo), "NEV_THROUGHPUT_DIR": str(tmp_path / "tp"),
           "NEV_LEDGER_NAME": f"cool-{uuid.uuid4().hex[:6]}"}
    pool_control(box, "gpu0", fail="429", fail_times=2)        # answered with Retry-After: 1
    r = nev(env, repo, "batch", "run", "abspos_width", "--models", f"{SAMPLING}:4:2", "--escalate-after", "9",
            "--max-batches", "2", "--seed", "5")
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(rf"plan: {SAMPLING} 4 at 2 \(asked 4 at 2\): bound by cooldown \(a 429 froze it for "
                     r"\d+\.\d s", r.stdout), r.stdout
    js = nev(env, repo, "ledger", "--json", "--worktree", env["NEV_LEDGER_NAME"])
    rows = [json.loads(x) for x in js.stdout.splitlines()]
    one, two = (row["models"][SAMPLING] for row in rows)
    assert one["rate_limited"] == 2 and one["constraints"]["seconds"]["cooldown"] >= 1.0
    assert one["constraints"]["bound"] == "cooldown"
    assert two["constraints"]["planned"] == "cooldown" and two["rate_limited"] == 0


def test_job_run_with_a_token_budget_ends_with_12_before_passing_it_and_the_next_job_passes_on_its_own(
        box, repo, tmp_path):  # noqa: F811
    """`nev job run` as on a lane: the manifest's budget reaches the batch stage, the stage stops
    before the next call would pass it, the job ends with 12 and a failed result; the next job,
    with a budget of the same size, passes (job A's spend is not its spend)."""
    import yaml

    from jobs import result as result_mod
    from lanes.base.gitrun import Repo

    for p in box.pools:
        pool_control(box, p, reset=True)
        pool_control(box, p, bank=str(DATA / "bank_find.json"))   # abspos_width never passes, block_width does
    tag = uuid.uuid4().hex[:6]
    base = Repo(repo).rev("HEAD")
    share = tmp_path / "share"
    (share / "archive").mkdir(parents=True)
    env = {**env_for(box, repo), "NEV_LANE_SHARED": str(share), "NEV_THROUGHPUT_DIR": str(tmp_path / "tp"),
           "NEV_JOB_MIN_FREE_GB": "0", "NEV_STATE_DIR": str(tmp_path / "state")}
    budget = 12000     # one round of 8 abspos_width candidates (~9800 tokens), not two

    def job(name: str, function: str) -> subprocess.CompletedProcess:
        m = tmp_path / f"{name}.yaml"
        batch_cmd = (f"{sys.executable} -m rig.cli batch run {function} --models {SAMPLING}:8:4 --escalate-after 9 "
                     f"--max-batches 4 --seed 3")
        m.write_text(yaml.safe_dump({"name": name, "base": base, "spec": f"specs/{name}.md", "limit": "1h",
                                     "budget": {"tokens": budget},
                                     "stages": [{"name": "gen", "kind": "batch", "command": batch_cmd}]}))
        return nev(env, repo, "job", "run", str(m), "--workdir", str(repo), "--state", str(tmp_path / name),
                   timeout=900)

    served0 = pool_control(box, "gpu0")["served"]
    ra = job(f"job-a-{tag}", "abspos_width")
    assert ra.returncode == 12, ra.stdout + ra.stderr + (tmp_path / f"job-a-{tag}/logs/gen.log").read_text()
    assert "stage gen: the job's budget bound (exit 12)" in ra.stderr
    res = result_mod.read(Repo(repo))
    assert res is not None and (res.outcome, res.exit) == ("failed", 12)
    assert any("budget bound" in r for r in res.reasons), res.reasons
    la = ledger.read(ledger.ledger_dir(share) / f"job-a-{tag}.jsonl")
    spent = spent_in(la)[0]
    lab = la[-1].budget
    assert 0 < spent <= budget and lab is not None and lab.bound == "tokens" and lab.tokens == budget
    assert pool_control(box, "gpu0")["served"] - served0 == calls_in(la)
    log = (tmp_path / f"job-a-{tag}" / "logs" / "gen.log").read_text()
    assert "the budget bound" in log and "bound by budget" in log

    rb = job(f"job-b-{tag}", "block_width")
    assert rb.returncode == 0, rb.stdout + rb.stderr
    lb = ledger.read(ledger.ledger_dir(share) / f"job-b-{tag}.jsonl")
    assert lb[-1].passed is True and all(ln.budget is not None and ln.budget.bound is None for ln in lb)
    assert spent_in(lb)[0] <= budget


# ---- `nev batch plan`, end to end: a real sweep through the gateway, then three set-ups ----

@pytest.fixture(scope="module")
def swept(box, tmp_path_factory):
    """A real `nev rig throughput` sweep of the sampling alias with its stand-in pool taking two
    at once (1 s a call): throughput stops growing at 2 in flight."""
    tmp = tmp_path_factory.mktemp("plan")
    pool_control(box, "gpu0", reset=True)
    pool_control(box, "gpu0", delay=1.0, max_inflight=2)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update(box.env)
    env.update({"NEV_THROUGHPUT_DIR": str(tmp / "tp"), "PYTHONPATH": str(ROOT), "NEV_LANE_SHARED": str(tmp / "share")})
    try:
        r = subprocess.run([sys.executable, "-m", "rig.cli", "rig", "throughput", SAMPLING, "--inflight", "1,2,4",
                            "--requests", "8", "--max-tokens", "32", "--json"],
                           capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    finally:
        pool_control(box, "gpu0", reset=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["knee"] == 2, r.stdout
    (tmp / "work").mkdir()
    return env, tmp


def plan_of(env: dict[str, str], cwd: Path, *extra: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "rig.cli", "batch", "plan", "abspos_width", "--models",
                        f"{SAMPLING}:8:8", "--json", *extra], capture_output=True, text=True, cwd=cwd, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)["plans"][0]


def test_batch_plan_names_the_pool_knee_from_a_real_sweep(swept):
    env, tmp = swept
    p = plan_of(env, tmp / "work")
    assert (p["bound"], p["inflight"], p["n"]) == ("pool_knee", 2, 8)
    assert p["limits"]["max_inflight"] == 8 and p["limits"]["knee"] == 2


def test_batch_plan_names_the_gateway_limit_when_the_declared_in_flight_is_below_the_knee(swept, box):
    env, tmp = swept
    data = json.loads(Path(box.folknet_file).read_text())
    data["aliases"][SAMPLING]["max_inflight"] = 1
    declared = tmp / "folknet-1.json"
    declared.write_text(json.dumps(data))
    assert fk.load(declared).aliases[SAMPLING].max_inflight == 1
    p = plan_of({**env, "NEV_FOLKNET_FILE": str(declared)}, tmp / "work")
    assert (p["bound"], p["inflight"], p["inflight_by"]) == ("gateway_limit", 1, "gateway_limit")


def test_batch_plan_names_the_budget_when_it_pays_for_fewer_candidates(swept):
    env, tmp = swept
    # capacity.json's candidate: 1800 prompt tokens a call, 600 an answer; at 2 in flight 6
    # candidates are 2 calls of 3: 2 x 1800 + 6 x 600 = 7200, a 7th would pass 7500
    p = plan_of(env, tmp / "work", "--budget-tokens", "7500")
    assert (p["bound"], p["n"], p["inflight_by"]) == ("budget", 6, "pool_knee")


def test_a_gpu_second_budget_is_metered_from_the_measured_throughput_and_binds(swept, wrong_only, repo):  # noqa: F811
    box = wrong_only
    tp_env, _tmp = swept
    peak = json.loads((Path(tp_env["NEV_THROUGHPUT_DIR"]) / f"{SAMPLING}.json").read_text())["peak_output_tok_s"]
    env = {**env_for(box, repo), "NEV_THROUGHPUT_DIR": tp_env["NEV_THROUGHPUT_DIR"],
           "NEV_LEDGER_NAME": f"gpu-{uuid.uuid4().hex[:6]}"}
    run = ["batch", "run", "abspos_width", "--models", f"{SAMPLING}:4:2", "--escalate-after", "9", "--seed", "7"]
    # about one round's answers (4 x ~550 tokens) at the sweep's peak, then some
    budget = round(4 * 550 / peak * 1.5, 1)
    r = nev(env, repo, *run, "--max-batches", "4", "--budget-gpu-s", str(budget))
    assert r.returncode == 12, r.stdout + r.stderr
    lines = lines_of(box, env["NEV_LEDGER_NAME"])
    last = lines[-1].budget
    assert last is not None and last.spent_gpu_s is not None
    assert last.bound == "gpu_s" and last.gpu_s == budget and 0 < last.spent_gpu_s <= budget
    for ln in lines:      # each model's GPU-seconds: its answers' tokens over the pool's measured peak
        m = ln.model_lines()[SAMPLING]
        assert abs((m.gpu_s or 0) - (m.tokens_out or 0) / peak) < 0.01
    assert abs(sum(ln.model_lines()[SAMPLING].gpu_s or 0 for ln in lines) - last.spent_gpu_s) < 0.01
    # with no sweep of the alias a GPU-second budget is refused before anything is drawn
    served = pool_control(box, "gpu0")["served"]
    bare = nev({**env, "NEV_THROUGHPUT_DIR": str(_tmp / "none")}, repo, *run, "--max-batches", "1",
               "--budget-gpu-s", "5")
    assert bare.returncode == 2 and f"nev rig throughput {SAMPLING}" in bare.stderr
    assert pool_control(box, "gpu0")["served"] == served
