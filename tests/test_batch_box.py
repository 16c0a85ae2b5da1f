"""The generation loop on the rig-in-a-box: the real LiteLLM proxy, HAProxy, the stand-in pools
answering from the banks in tests/data, real rustc, corpora from the hand-written reference.

Batches run in place (NEV_ON_LANE=1, as the lane gate runs them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import answers, batch, ledger, prompt, rounds, shares, verdicts
from bench import folknet as fk
from bench.gateway import Gateway, read_key
from bench.rounds import RoundRecord, ShareStatus
from crates_bridge import corpus
from crates_bridge.candidates import probe
from crates_bridge.workspace import EXAMPLE_ENGINE, Workspace
from lanes.base.errors import NevError
from lanes.base.gitrun import Repo, init
from rig.box.poolctl import pool_control
from tests.helpers.lane_helpers import copy_name

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
GEN = "crates_bridge/engine/crates/layout/src/generated"
N_CASES = 120
SAMPLING = "qwen3.8-27b-fast"
CAPACITY = "deepseek-v4.1-flash"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A repository holding a copy of the example engine (built once) and reference corpora."""
    root = tmp_path_factory.mktemp("batch") / "wt-demo"
    shutil.copytree(EXAMPLE_ENGINE, root / "crates_bridge/engine", ignore=shutil.ignore_patterns("target"))
    (root / ".gitignore").write_text("target/\n/corpus/\n")
    ws = Workspace(root / "crates_bridge/engine")
    for f in ("block_width", "abspos_width"):
        corpus.write_reference_corpus(ws, f, root / "corpus" / f, N_CASES)
    r = init(root)
    r.git("add", "-A")
    r.git("commit", "-q", "-m", "fixture")
    return root


@pytest.fixture
def pools(box, repo):
    """Pools reset and given the find bank; the repository's generated files as committed."""
    git = Repo(repo)
    git.git("checkout", "-q", "--", GEN)
    git.git("clean", "-qfd", "--", GEN)
    for p in box.pools:
        pool_control(box, p, reset=True)
    pool_control(box, "gpu0", bank=str(DATA / "bank_find.json"))
    pool_control(box, "gpu1", bank=str(DATA / "bank_find.json"))
    yield box
    for p in box.pools:
        pool_control(box, p, reset=True)


def env_for(box, repo: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update(box.env)
    env.update({"NEV_ON_LANE": "1", "NEV_LANE_SHARED": str(box.nas), "PYTHONPATH": str(ROOT)})
    # In place on the dev box (as the lane gate runs a batch): its way to the gateway is its forward.
    env["NEV_LANE_MODEL_URL"] = box.gateway_local_url
    return env


def nev(env: dict[str, str], cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def records(repo: Path, batch_id: str) -> list[RoundRecord]:
    d = repo / "target" / "batch" / batch_id
    return [rounds.read(rounds.record_path(d, i)) for i in range(1, 20) if rounds.record_path(d, i).exists()]


def batch_id_of(out: str) -> str:
    m = re.search(r"^batch (\S+) round 1", out, re.M)
    assert m, out
    return m.group(1)


def config(box, repo: Path, function: str, shares: list[shares.Share], escalation: shares.Share | None = None,
           escalate_after: int = 2, max_batches: int = 3, seed: int = 1) -> batch.RunConfig:
    return batch.RunConfig(function=function, shares=shares, escalation=escalation, escalate_after=escalate_after,
                           max_batches=max_batches, engine_dir=repo / "crates_bridge/engine",
                           corpus_dir=repo / "corpus" / function, workdir=repo / "target" / "batch",
                           ledger_path=ledger.ledger_dir(box.nas) / f"{repo.name}.jsonl", seed=seed)


def share(box, alias: str, n: int, inflight: int, supports_n: bool = True) -> shares.Share:
    a = fk.load(box.folknet_file).aliases[alias]
    return shares.Share(alias, n, min(inflight, a.max_inflight), a.tier, supports_n, a.max_inflight)


def gw(box) -> Gateway:
    return Gateway(box.gateway_local_url, read_key(box.keys["batch"]))   # the dev box's forward


def test_a_batch_finds_the_right_answer_and_keeps_it_with_provenance_and_a_floor(pools, repo):
    box = pools
    env = env_for(box, repo)
    r = nev(env, repo, "batch", "run", "block_width", "--models", f"{SAMPLING}:8:4", "--max-batches", "3",
            "--seed", "7")
    assert r.returncode == 0, r.stdout + r.stderr
    bid = batch_id_of(r.stdout)
    gen = repo / GEN
    src = (gen / "block_width.rs").read_text()
    assert src.startswith("// Generated: CSS 2.1 §10.3.3") and "// Spec steps:" in src and "//   5." in src
    prov = json.loads((gen / "block_width.provenance.json").read_text())
    assert prov["batch"]["id"] == bid and prov["verification"] == {"corpus": "block_width", "cases_passed": N_CASES,
                                                                  "cases_run": N_CASES}
    assert prov["batch"]["models"][0]["alias"] == SAMPLING and "pass@1" in prov["batch"]
    assert json.loads((gen / "block_width.floor.json").read_text()) == {"cases_passed": N_CASES, "cases_run": N_CASES}
    # the batch verified against this repo's reference corpus (fast, for the batch's sake): never
    # ground truth for floors, which score on three browsers' corpora only (tests/test_floors_box.py)
    chk = nev(env, repo, "floors", "check")
    assert chk.returncode == 11, chk.stdout + chk.stderr
    assert "corpus/block_width is not ground truth for the floors" in chk.stderr and "reference only" in chk.stderr

    recs = records(repo, bid)
    lines = [x for x in ledger.read(ledger.ledger_dir(box.nas) / f"{repo.name}.jsonl") if x.batch == bid]
    assert len(lines) == len(recs) >= 1 and lines[-1].passed is True
    for rec, line in zip(recs, lines, strict=True):
        m = rec.models[SAMPLING]
        assert line.model_lines()[SAMPLING].candidates == m.candidates == m.answers == 8
        assert line.candidates == rec.candidates == 8
        assert line.compiled == rec.compiled == m.compiled
        assert line.unique == rec.unique and line.best == rec.best
        assert line.model_lines()[SAMPLING].tokens_out == sum(c["completion_tokens"] for c in rec.calls) > 0
        assert ledger.find_address(line.to_json()) is None
        assert {"draw", "compile", "score"} <= set(rec.phases) and rec.lane_cpu_s > 0
        # duplicates compiled once: the probe saw exactly the new unique candidates
        files = list((repo / "target" / "batch" / bid / f"probe-r{rec.round}").rglob("c[0-9][0-9][0-9].rs"))
        assert len({f.name for f in files}) == rec.new_unique <= rec.unique
    assert sum(r.duplicates for r in recs) >= 1
    assert pool_control(box, "gpu0")["max_inflight_seen"] <= 4
    # the key never lands in a file, a record or the output
    secret = read_key(box.keys["batch"])
    for f in (repo / "target" / "batch" / bid).rglob("*"):
        if f.is_file() and f.suffix in (".json", ".txt"):
            assert secret not in f.read_text()
    stored = json.dumps([x.to_json() for x in lines])
    assert secret not in r.stdout + r.stderr and secret not in stored
    table = nev(env, repo, "ledger")
    assert table.returncode == 0 and SAMPLING in table.stdout and "120/120" in table.stdout
    assert "198.18" not in table.stdout and "198.18" not in stored


def _marker(repo: Path) -> str:
    """The first geometry-difference line of the best failing sampling-tier version, as the
    escalated prompt renders it."""
    bank = json.loads((DATA / "bank_escalate.json").read_text())["functions"]["abspos_width"]["sampling"]
    wrong = [c["code"] for c in bank if c["kind"] == "wrong"]
    ws = Workspace(repo / "crates_bridge/engine")
    b = probe(ws, "abspos_width", wrong, repo / "corpus/abspos_width", repo / "target" / "marker")
    judged = [verdicts.judge(v, s, answers.code_hash(s)) for v, s in zip(b.verdicts, wrong, strict=True)]
    assert all(j.status == "failed" for j in judged)
    best = verdicts.best_versions(judged)[0]
    return prompt.diff_line(*best.diffs[0])


def test_escalation_after_k_rounds_sends_the_geometry_differences_to_the_capacity_tier(pools, repo, tmp_path):
    box = pools
    marker = _marker(repo)
    data = json.loads((DATA / "bank_escalate.json").read_text())
    data["functions"][marker] = data["functions"].pop("abspos_width_with_geometry_diffs")
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps(data))
    for p in box.pools:
        pool_control(box, p, bank=str(bank))
    cfg = config(box, repo, "abspos_width", [share(box, SAMPLING, 6, 3)], share(box, CAPACITY, 2, 2),
                 escalate_after=2, max_batches=3)
    res = batch.run(cfg, gw(box), echo=lambda s: None)
    assert res.passed, [r.models for r in res.rounds]
    assert [r.escalated for r in res.rounds] == [False, False, True]
    assert list(res.rounds[2].models) == [CAPACITY] and res.rounds[2].models[CAPACITY].passed >= 1
    assert res.rounds[2].versions_shown >= 1
    # what the capacity pool was asked: only the escalated round's calls, carrying the exact diffs
    assert pool_control(box, "gpu1")["served"] == res.rounds[2].models[CAPACITY].calls
    esc_prompt = (repo / "target/batch" / res.batch_id / "prompt-r3.txt").read_text()
    assert marker in esc_prompt and "expected" in marker and "got" in marker
    assert marker not in (repo / "target/batch" / res.batch_id / "prompt-r1.txt").read_text()
    prov = json.loads((repo / GEN / "abspos_width.provenance.json").read_text())
    assert prov["batch"]["escalated"] is True and prov["verification"]["cases_passed"] == N_CASES


def test_never_more_calls_in_flight_than_inflight_per_alias(pools, repo):
    box = pools
    pool_control(box, "gpu0", delay=0.3)
    pool_control(box, "gpu1", delay=0.3)
    cfg = config(box, repo, "block_width", [share(box, SAMPLING, 12, 3, supports_n=False),
                                             share(box, CAPACITY, 4, 2, supports_n=False)], max_batches=1)
    g = gw(box)
    res = batch.run(cfg, g, echo=lambda s: None)
    m = res.rounds[0].models
    assert m[SAMPLING].calls == 12 and m[CAPACITY].calls == 4
    assert pool_control(box, "gpu0")["max_inflight_seen"] == 3
    assert pool_control(box, "gpu1")["max_inflight_seen"] == 2
    assert m[SAMPLING].inflight_meter["max_seen"] == 3
    assert m[SAMPLING].inflight_meter["at_limit_share"] > 0.5


def test_a_pool_answering_429_slows_the_batch_which_finishes_and_reports_the_429s(pools, repo):
    box = pools
    pool_control(box, "gpu0", fail="429", fail_times=6)
    cfg = config(box, repo, "block_width", [share(box, SAMPLING, 8, 4)], max_batches=3, seed=11)
    t0 = time.monotonic()
    res = batch.run(cfg, gw(box), echo=lambda s: None)
    took = time.monotonic() - t0
    limited = sum(r.models[SAMPLING].rate_limited for r in res.rounds)
    assert res.passed and res.exit_code == 0
    assert limited == 6 == pool_control(box, "gpu0")["failed"]["429"]
    assert all(r.models[SAMPLING].status is ShareStatus.OK for r in res.rounds)
    calls = [c for r in res.rounds for c in r.calls]
    assert all(c["status"] == "ok" for c in calls) and any(429 in c["http"] for c in calls)
    assert sum(c["pacer_wait_s"] for c in calls) >= 1.0 and took >= 1.0


def test_a_dead_pool_fails_that_models_share_with_a_reason_and_the_batch_goes_on(pools, repo):
    from lanes.base import procs
    from rig.box import Box

    box = pools
    b = Box(box.name, box.net, box.dir)
    st = b.state()
    assert st is not None
    procs.stop(st.procs["gpu1.pool"])
    try:
        cfg = config(box, repo, "block_width", [share(box, SAMPLING, 8, 4), share(box, CAPACITY, 2, 2)],
                     max_batches=2, seed=3)
        res = batch.run(cfg, gw(box), echo=lambda s: None)
        first = res.rounds[0].models
        cap_error = first[CAPACITY].error or ""
        assert first[CAPACITY].status is ShareStatus.FAILED and first[CAPACITY].candidates == 0
        assert CAPACITY in cap_error and "tried 4 times" in cap_error
        assert "\n" not in cap_error
        assert first[SAMPLING].status is ShareStatus.OK and first[SAMPLING].candidates == 8
        assert res.passed
        line = [x for x in ledger.read(cfg.ledger_path) if x.batch == res.batch_id][0]
        assert line.model_lines()[CAPACITY].status == "failed" and ledger.find_address(line.to_json()) is None
    finally:
        b.up(lanes=len(box.lanes))


def test_a_kept_function_is_never_rewritten_by_a_later_batch(pools, repo):
    box = pools
    cfg = config(box, repo, "block_width", [share(box, SAMPLING, 8, 4)], max_batches=3, seed=5)
    first = batch.run(cfg, gw(box), echo=lambda s: None)
    assert first.passed
    gen = repo / GEN
    before = {p.name: p.read_bytes() for p in gen.glob("block_width.*")}
    with pytest.raises(NevError, match="never rewritten") as e:
        batch.run(config(box, repo, "block_width", [share(box, SAMPLING, 8, 4)], max_batches=3, seed=6),
                  gw(box), echo=lambda s: None)
    assert e.value.exit_code == 1
    assert {p.name: p.read_bytes() for p in gen.glob("block_width.*")} == before


def test_5xx_answers_are_retried_with_backoff_and_metered(pools):
    box = pools
    pool_control(box, "gpu0", fail="503", fail_times=2)
    g = gw(box)
    g.add_alias(SAMPLING, 2, 8)
    texts, rec = g.call(SAMPLING, [{"role": "user", "content": "write block_width"}], 2, 1)
    assert len(texts) == 2 and rec.status == "ok" and rec.choices == 2
    assert rec.retries == 2 and rec.http[-1] == 200 and len(rec.http) == 3 and all(c >= 500 for c in rec.http[:2])
    assert rec.completion_tokens > 0 and rec.latency_s > 0
    assert pool_control(box, "gpu0")["failed"] == {"503": 2}


def dev_box_worktree(box, repo: Path, wt: Path) -> tuple[Path, dict[str, str]]:
    """A worktree on the dev box whose .env holds the key (as a user's does), nev installed on
    lane0, and the dev box's environment (off a lane: the batch re-runs itself on lane0)."""
    shutil.copytree(repo, wt, ignore=shutil.ignore_patterns("target", ".git"))
    (wt / ".gitignore").write_text("target/\n.env\n")
    fd = os.open(wt / ".env", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, f"NEV_MODEL_API_KEY={read_key(box.keys['batch'])}\n".encode())
    os.close(fd)
    g = init(wt)
    g.git("add", "-A")
    g.git("commit", "-q", "-m", "worktree")
    env = env_for(box, wt)
    for k in ("NEV_ON_LANE", "NEV_LANE_SHARED", "NEV_MODEL_KEY_FILE", "NEV_LANE_MODEL_URL"):
        env.pop(k)
    inst = nev(env, wt, "lane", "install", "--lane", "0", timeout=900)
    assert inst.returncode == 0, inst.stdout + inst.stderr
    env["NEV_LANE_SSH"] = box.lanes[0].ssh
    return wt, env


def test_off_a_lane_the_batch_reruns_itself_on_a_lane_and_pulls_back_what_it_kept(pools, repo, tmp_path):
    """Through the real lane gate: nev installed on the lane, the worktree shipped, the key only in
    the .env the gate installs for the run (and removes), the results pulled back."""
    box = pools
    wt, env = dev_box_worktree(box, repo, tmp_path / "wt-onlane")
    r = nev(env, wt, "batch", "run", "block_width", "--models", f"{SAMPLING}:8:4", "--max-batches", "2", "--seed", "7")
    assert r.returncode == 0, r.stdout + r.stderr
    bid = batch_id_of(r.stdout)
    copy = copy_name(wt)                        # the lane copy's name, keyed by its repository
    assert "kept a passing version" in r.stdout and f"/srv/lane/{copy}/" in r.stdout
    assert "pulled target/batch" in r.stderr + r.stdout
    prov = json.loads((wt / GEN / "block_width.provenance.json").read_text())
    assert prov["batch"]["id"] == bid and prov["verification"]["cases_passed"] == N_CASES
    assert (wt / "target/batch" / bid / "record-r1.json").is_file()
    assert [x for x in ledger.read(box.nas / "ledger" / f"{copy}.jsonl") if x.batch == bid]
    assert not (box.lanes[0].host_root / copy / ".env").exists()
    assert read_key(box.keys["batch"]) not in r.stdout + r.stderr


def test_on_a_lane_the_batch_uses_the_lanes_gateway_address_not_the_dev_boxs(pools, repo, tmp_path):
    """The dev box's NEV_MODEL_URL is its forward (127.0.0.1), which means nothing on a lane: a
    lane whose ~/.lane-model-env held that URL fails to reach the gateway, and the run says so."""
    box = pools
    wt, env = dev_box_worktree(box, repo, tmp_path / "wt-wrongurl")
    assert env["NEV_MODEL_URL"].startswith("http://127.0.0.1:")       # the dev box's forward
    model_env = box.lanes[0].host_home / ".lane-model-env"
    good = model_env.read_text()
    assert good.strip() == f"NEV_LANE_MODEL_URL={box.gateway_url}"   # the rig address
    model_env.write_text(f"NEV_LANE_MODEL_URL={box.gateway_local_url}\n")
    try:
        r = nev(env, wt, "batch", "run", "block_width", "--models", f"{SAMPLING}:2:2", "--max-batches", "1",
                "--seed", "7")
    finally:
        model_env.write_text(good)
    assert r.returncode != 0 or "kept a passing version" not in r.stdout, r.stdout + r.stderr
    assert "lane 0: pulled target/batch" in r.stderr                      # it ran on the lane ...
    assert f"no connection to the gateway at {box.gateway_local_url}" in r.stdout   # ... and said why
