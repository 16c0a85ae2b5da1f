"""The maintenance loop on the rig-in-a-box: a batch through the real gateway and stand-in pools
keeps a complete provenance record; a change of `abspos_width`'s spec section on main makes
`nev provenance stale` name exactly that function; the tick (NEV_PROVENANCE_REGEN=1) submits one
regeneration job to lane0's Dagu, which lands a new version whose record holds the new spec hash;
a second tick submits nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from bench import prompt
from bench import provenance as prov
from crates_bridge import corpus
from crates_bridge.workspace import EXAMPLE_ENGINE, Workspace
from rig.box.demo.bank import demo_bank
from rig.box.forge import create_repo
from rig.box.poolctl import pool_control
from tests.helpers.job_helpers import ROOT, git
from tests.test_job_box import Rig

pytestmark = pytest.mark.box

FN = "abspos_width"
GEN = "crates_bridge/engine/crates/layout/src/generated"
SAMPLING, CAPACITY = "qwen3.8-27b-fast", "deepseek-v4.1-flash"
CASES = 60


def _regen_state(rig: Rig) -> dict:
    p = rig.tmp / "state" / "regen.json"
    return json.loads(p.read_text()) if p.exists() else {}


@pytest.fixture(scope="module")
def loop(box, tmp_path_factory):
    """An engine repository on the box's forge whose main holds a version of FN kept by a real
    batch (a complete record), FN's track spec and the spec texts; lane0's Dagu up."""
    tmp = tmp_path_factory.mktemp("provenance-box")
    rig = Rig(box, tmp)
    url = create_repo(box, f"provenance-{int(time.time())}")
    rig.env["NEV_LANE_GIT_URL"] = url
    rig.env["NEV_FORGE_URL"] = box.dev_url(url)
    dev = rig.dev
    git(tmp, "init", "-q", "-b", "main", str(dev))
    shutil.copytree(
        EXAMPLE_ENGINE, dev / "crates_bridge/engine", ignore=shutil.ignore_patterns("target")
    )
    shutil.copytree(ROOT / "bench" / "specs", dev / "bench" / "specs")
    (dev / ".gitignore").write_text("target/\n/corpus/\n.env\n")
    (dev / "tracks.json").write_text(
        json.dumps({"verify": "true", "specWatch": {"pollEnv": {}}}) + "\n"
    )
    (dev / "specs").mkdir()
    (dev / "specs" / f"{FN}.md").write_text(
        f"---\ntouches:\n  - {GEN}/{FN}.rs\n  - {GEN}/{FN}.provenance.json\n---\n# {FN}\n"
    )
    git(dev, "add", "-A")
    git(dev, "commit", "-qm", "engine and specs")         # the floor file the batch raises is put back
    # the first version: a batch in place (as the lane gate runs it) against a reference corpus
    corpus.write_reference_corpus(
        Workspace(dev / "crates_bridge/engine"), FN, dev / "corpus" / FN, CASES
    )
    for p in box.pools:
        pool_control(box, p, reset=True)
    bank = tmp / "bank_find.json"
    shutil.copyfile(ROOT / "tests" / "data" / "bank_find.json", bank)
    for p in ("gpu0", "gpu1"):
        pool_control(box, p, bank=str(bank))
    env = {
        **rig.env,
        "NEV_ON_LANE": "1",
        "NEV_LANE_SHARED": str(box.nas),
        "NEV_LANE_MODEL_URL": box.gateway_local_url,
    }
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rig.cli",
            "batch",
            "run",
            FN,
            "--models",
            f"{SAMPLING}:4:4",
            "--escalate",
            f"{CAPACITY}:2:2",
            "--escalate-after",
            "1",
            "--max-batches",
            "2",
            "--seed",
            "3",
        ],
        cwd=dev,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    git(dev, "checkout", "-q", "--", f"{GEN}/{FN}.floor.json")  # floors rise on main after landing
    git(dev, "add", "-A")
    git(dev, "commit", "-qm", "a kept abspos_width")
    shutil.rmtree(dev / "corpus")  # the lane builds its own; the key is not checked here
    authed = box.dev_url(url).replace("://", f"://{box.forge_user}@", 1)
    git(dev, "remote", "add", "origin", authed)
    subprocess.run(
        ["git", "-C", str(dev), "push", "-q", "origin", "main"], check=True, env=rig.git_env
    )
    rig.ok("dagu", "up")
    rig.probe()
    # the regeneration's batch: the lane's own three-browser corpora, then the demo's bank (the
    # sampling tier wrong, the capacity tier right: the batch escalates)
    demo = tmp / "bank_demo.json"
    demo.write_text(json.dumps(demo_bank()))
    for p in ("gpu0", "gpu1"):
        pool_control(box, p, bank=str(demo))
    rig.env["NEV_REGEN_BATCH"] = (
        f"nev oracle build {FN} block_width --cases {CASES} && "
        "nev batch run {function} --supersede "
        f"--seed-failures --models {SAMPLING}:4:4 --escalate {CAPACITY}:2:2 --escalate-after 1 "
        "--max-batches 3 && git checkout -- {floor}"
    )
    yield rig
    rig.nev("dagu", "stop")
    for p in box.pools:
        pool_control(box, p, reset=True)


def test_a_batch_on_the_box_keeps_a_complete_record_with_what_the_pools_reported(loop):
    rec = json.loads((loop.dev / GEN / f"{FN}.provenance.json").read_text())
    assert rec["format"] == 2 and prov.missing(rec) == []
    spec = prompt.load_spec(FN, loop.dev / "bench" / "specs")
    assert (
        rec["spec"]["text_sha256"] == prov.spec_digest(spec)
        and rec["spec"]["file"] == f"bench/specs/{FN}.md"
    )
    served = {m["alias"]: m for m in rec["models"]}
    assert SAMPLING in served
    for m in served.values():  # the stand-in pools say which pool answered; no recipe, no digest
        assert m["system_fingerprints"] and all(
            f.startswith("stand-in-") for f in m["system_fingerprints"]
        )
        assert m["recipe"] is None and m["image_digest"] is None
    stale = json.loads(loop.ok("provenance", "stale", "--json").stdout)
    assert [f["function"] for f in stale if f["action"] != "incomplete"] == []


def test_a_spec_change_on_main_is_regenerated_once_by_the_tick(loop):
    rig = loop
    spec_file = rig.dev / "bench" / "specs" / f"{FN}.md"
    spec_file.write_text(
        spec_file.read_text().replace("refers, roughly,", "refers, approximately,")
    )
    git(rig.dev, "commit", "-qam", f"spec: {FN} reworded")
    subprocess.run(
        ["git", "-C", str(rig.dev), "push", "-q", "origin", "main"], check=True, env=rig.git_env
    )
    new_hash = prov.spec_digest(prompt.load_spec(FN, rig.dev / "bench" / "specs"))

    stale = json.loads(rig.ok("provenance", "stale", "--json").stdout)
    regen = [f for f in stale if f["action"] == "regenerate"]
    assert [f["function"] for f in regen] == [FN]
    (reason,) = regen[0]["reasons"]
    assert reason["kind"] == "spec" and reason["now"] == new_hash
    assert reason["text"].startswith("spec section 10.3.7 changed since ")
    assert all(f["action"] == "incomplete" for f in stale if f["function"] != FN)  # block_width

    env = {**rig.env, "NEV_PROVENANCE_REGEN": "1"}
    first = rig.nev("job", "poll", env=env, timeout=600)
    assert "regenerating as job regen-abspos-width-" in first.stderr, first.stderr
    (started,) = _regen_state(rig).values()
    job = started["job"]
    assert started["reasons"] == [r["text"] for r in regen[0]["reasons"]]

    rig.env = env
    rig.poll_until(job, "landed", timeout=1500)
    rec = json.loads(git(rig.dev, "show", f"main:{GEN}/{FN}.provenance.json"))
    assert rec["spec"]["text_sha256"] == new_hash
    assert rec["supersedes"]["spec_sha256"] == regen[0]["reasons"][0]["was"]
    assert rec["batch"]["id"] != rec["supersedes"]["batch"]

    second = rig.nev("job", "poll", env=env, timeout=600)
    assert "regenerating as job" not in second.stderr, second.stderr
    assert list(_regen_state(rig).values()) == [started]
    after = json.loads(rig.ok("provenance", "stale", "--json").stdout)
    assert [f["function"] for f in after if f["action"] == "regenerate"] == []
