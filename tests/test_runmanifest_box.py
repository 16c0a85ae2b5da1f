"""The run manifest on the rig-in-a-box, through the real LiteLLM gateway and stand-in pools: a
batch writes its manifest before drawing and its provenance record names it by hash; `--manifest`
draws again from exactly those inputs (the same seeds, the same manifest); once the gateway serves
the sampling alias from another model (its config changed and the gateway restarted, as an
operator does), `--manifest` refuses with exit 14 on one line and draws nothing."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from crates_bridge import corpus
from crates_bridge.workspace import EXAMPLE_ENGINE, Workspace
from rig.box.poolctl import pool_control
from tests.helpers.job_helpers import ROOT, git, nev

pytestmark = pytest.mark.box

FN = "abspos_width"
GEN = "crates_bridge/engine/crates/layout/src/generated"
SAMPLING, CAPACITY = "qwen3.8-27b-fast", "deepseek-v4.1-flash"


def _nev(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return nev(list(args), env, cwd, timeout=900)


def _gateway(box, action: str) -> None:
    unit = box.dir / "gateway" / "unit"
    cp = subprocess.run(["ip", "netns", "exec", f"{box.name}-gateway", str(unit), action],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr


@pytest.fixture(scope="module")
def repo(box, tmp_path_factory):
    """A checkout with the example engine, the spec texts and a reference corpus of FN; the
    pools answer from the bank whose sampling tier finds FN. The batch runs in place, as the
    lane gate runs it."""
    tmp = tmp_path_factory.mktemp("runmanifest-box")
    dev = tmp / "dev"
    git(tmp, "init", "-q", "-b", "main", str(dev))
    shutil.copytree(EXAMPLE_ENGINE, dev / "crates_bridge/engine",
                    ignore=shutil.ignore_patterns("target"))
    shutil.copytree(ROOT / "bench" / "specs", dev / "bench" / "specs")
    (dev / ".gitignore").write_text("target/\n/corpus/\n.env\n")
    git(dev, "add", "-A")
    git(dev, "commit", "-qm", "engine and specs")
    corpus.write_reference_corpus(Workspace(dev / "crates_bridge/engine"), FN, dev / "corpus" / FN, 40)
    bank = tmp / "bank_find.json"
    shutil.copyfile(ROOT / "tests" / "data" / "bank_find.json", bank)
    for p in box.pools:
        pool_control(box, p, reset=True)
    for p in ("gpu0", "gpu1"):
        pool_control(box, p, bank=str(bank))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    env.update({**box.env, "PYTHONPATH": str(ROOT), "NEV_ON_LANE": "1",
                "NEV_LANE_SHARED": str(box.nas), "NEV_LANE_MODEL_URL": box.gateway_local_url,
                "NEV_STATE_DIR": str(tmp / "state"), "NEV_LEDGER_NAME": f"manifest-{tmp.name}"})
    yield dev, env
    for p in box.pools:
        pool_control(box, p, reset=True)


def _ran(r: subprocess.CompletedProcess[str]) -> tuple[Path, str]:
    m = re.search(r"^run manifest (\S+) \(sha256 ([0-9a-f]{64})\)$", r.stdout, re.M)
    assert m, r.stdout + r.stderr
    return Path(m.group(1)), m.group(2)


def _calls(run_dir: Path) -> list[tuple[str, int]]:
    out = []
    for rec in sorted(run_dir.glob("record-r*.json")):
        out += [(c["alias"], c["seed"]) for c in json.loads(rec.read_text())["calls"]]
    return out


def test_a_manifest_is_written_before_drawing_drawn_again_and_refused_once_a_model_changed(repo, box):
    dev, env = repo
    batch = ["batch", "run", FN, "--models", f"{SAMPLING}:4:4", "--escalate", f"{CAPACITY}:2:2",
             "--escalate-after", "1", "--max-batches", "2"]
    first = _nev(env, dev, *batch)
    assert first.returncode == 0, first.stdout + first.stderr
    path, sha = _ran(first)
    man = json.loads(path.read_text())
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha and path.stat().st_mode & 0o222 == 0
    # every input pinned: the aliases with the model the gateway serves each from (its own word)
    assert {a["alias"]: a["model_id"] for a in man["aliases"]} == {
        SAMPLING: f"openai/{SAMPLING}", CAPACITY: f"openai/{CAPACITY}"}
    assert man["engine"]["commit"] == git(dev, "rev-parse", "HEAD") and man["nev"]["key"]
    assert man["corpus"]["name"] == FN and man["corpus"]["key"] and man["spec"]["text_sha256"]
    assert man["run"]["models"] == f"{SAMPLING}:4:4" and man["seeds"]["base"] == path.parent.name
    # written before the first draw: older than the batch's first round record
    assert path.stat().st_mtime <= (path.parent / "record-r1.json").stat().st_mtime
    rec = json.loads((dev / GEN / f"{FN}.provenance.json").read_text())
    assert rec["manifest"] == {"sha256": sha, "file": f"target/batch/{path.parent.name}/manifest.json"}
    calls = sorted(_calls(path.parent))

    # drawn again from exactly those inputs: the kept files put back as they were (same commit)
    git(dev, "checkout", "-q", "--", "crates_bridge")
    git(dev, "clean", "-fdq", "crates_bridge")
    refused = _nev(env, dev, "batch", "run", FN, "--manifest", str(path), "--seed", "4")
    assert refused.returncode == 2 and "leave out --seed" in refused.stderr
    again = _nev(env, dev, "batch", "run", FN, "--manifest", str(path))
    assert again.returncode == 0, again.stdout + again.stderr
    path2, sha2 = _ran(again)
    assert path2 != path and sha2 == sha and path2.read_bytes() == path.read_bytes()
    assert sorted(_calls(path2.parent)) == calls              # the same seeds, call for call
    assert json.loads((dev / GEN / f"{FN}.provenance.json").read_text())["manifest"]["sha256"] == sha

    # the gateway now serves the sampling alias from another model: refused, nothing drawn
    cfg_path = box.dir / "gateway" / "config.yaml"
    before = cfg_path.read_text()
    cfg = yaml.safe_load(before)
    for m in cfg["model_list"]:
        if m["model_name"] == SAMPLING:
            m["litellm_params"]["model"] = f"openai/{SAMPLING}-rev2"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    try:
        _gateway(box, "restart")
        served = pool_control(box, "gpu0")["served"]
        runs = sorted(p.name for p in (dev / "target" / "batch").iterdir())
        stale = _nev(env, dev, "batch", "run", FN, "--manifest", str(path))
        assert stale.returncode == 14, stale.stdout + stale.stderr
        lines = [ln for ln in stale.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, stale.stderr
        assert (f"alias {SAMPLING} now serves model openai/{SAMPLING}-rev2, the manifest pinned "
                f"openai/{SAMPLING}; nothing drawn") in lines[0]
        assert str(path) in lines[0]
        assert pool_control(box, "gpu0")["served"] == served   # the probe is not a draw
        assert sorted(p.name for p in (dev / "target" / "batch").iterdir()) == runs
    finally:
        cfg_path.write_text(before)
        _gateway(box, "restart")
