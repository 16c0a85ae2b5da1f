"""The job workflow (dagu/workflows/job.yaml) under the real Dagu 1.30.2 binary, run locally with `dagu start`.

The forge here is a bare repository on disk and the lane is this machine with the system
python3 (PyYAML only, as on a lane); the box test (tests/test_job_box.py) runs the same
workflow on a lane's Dagu against the box's HTTP forge.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import archive as archive_mod
from jobs import result as result_mod
from lanes.base.gitrun import Repo
from tests.helpers.job_helpers import ROOT, Listener, git, make_checkout, write_manifest

DAGU = "/opt/nev/dagu-1.30.2/dagu"
WORKFLOW = ROOT / "dagu" / "workflows" / "job.yaml"
MODEL_KEY = "sk-lane-model-key-abcdef0123456789"
FORGE_TOKEN = "forgetoken-0123456789abcdef"


def test_job_workflow_passes_dagu_validate(tmp_path):
    cp = subprocess.run([DAGU, "validate", str(WORKFLOW)], capture_output=True, text=True,
                        env={**os.environ, "DAGU_HOME": str(tmp_path / "dh")})
    assert cp.returncode == 0, cp.stdout + cp.stderr
    bad = tmp_path / "job.yaml"
    bad.write_text(WORKFLOW.read_text().replace("continueOn:", "continue_on:"))
    cp = subprocess.run([DAGU, "validate", str(bad)], capture_output=True, text=True,
                        env={**os.environ, "DAGU_HOME": str(tmp_path / "dh")})
    assert cp.returncode != 0  # the check is real: snake_case is refused by 1.30.2


@pytest.mark.parametrize("text,gone,kept", [
    ("push to http://nev:s3cret@198.18.0.5/git/engine.git failed", ["s3cret", "198.18.0.5", "http://"], ["push to"]),
    ("connect 10.0.0.7:4000 and [fe80::1] from lane@198.18.0.11", ["10.0.0.7", "fe80::1", "lane@"], ["connect"]),
    ("Authorization: Bearer abc.def", ["abc.def"], ["Authorization"]),
    ("NEV_MODEL_API_KEY=plainvalue", ["plainvalue"], ["NEV_MODEL_API_KEY"]),
    ("at 10:42:01 dagu 1.30.2 ran", [], ["10:42:01", "1.30.2"]),
])
def test_scrub_replaces_credentials_urls_and_addresses(text, gone, kept):
    out = archive_mod.scrub(text)
    for g in gone:
        assert g not in out
    for k in kept:
        assert k in out


def _dagu_home(tmp: Path) -> Path:
    dh = tmp / "dh"
    dh.mkdir()
    for name, value in (("model-key", MODEL_KEY), ("forge-token", FORGE_TOKEN)):
        (dh / name).write_text(value + "\n")
        (dh / name).chmod(0o600)
    return dh


def _submit_local(tmp: Path, stages: list[dict], name: str = "demo", **top: object) -> tuple[Path, str]:
    """A forge (bare repository) holding job/<name>, whose tree has the manifest."""
    forge = tmp / "forge.git"
    git(tmp, "init", "-q", "--bare", str(forge))
    dev = tmp / "dev"
    base = make_checkout(dev)
    write_manifest(dev / "job.yaml", base, stages, name=name, **top)
    git(dev, "add", "job.yaml")
    git(dev, "commit", "-qm", "job manifest")
    git(dev, "push", "-q", str(forge), f"HEAD:refs/heads/job/{name}", "HEAD:refs/heads/main")
    return forge, base


def _nev_stand_in(tmp: Path) -> Path:
    """What `nev lane install` links at ~/.local/bin/nev on a lane, for a Dagu run here: this
    checkout's nev (the workflow's NEV parameter)."""
    f = tmp / "lane-bin" / "nev"
    f.parent.mkdir(exist_ok=True)
    f.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m rig.cli \"$@\"\n")
    f.chmod(0o755)
    return f


def _start(tmp: Path, forge: Path, dh: Path, name: str = "demo", *extra: str) -> subprocess.CompletedProcess:
    share = tmp / "share"
    (share / "archive").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "PYTHON", "VIRTUAL_ENV"))}
    env.update({"DAGU_HOME": str(dh), "PATH": "/usr/local/bin:/usr/bin:/bin", "NEV_JOB_MIN_FREE_GB": "0",
                "NEV_STATE_DIR": str(tmp / "nevstate")})
    params = [f"JOB={name}", "MANIFEST=job.yaml", f"FORGE={forge}", f"MIRROR={tmp / 'mirror.git'}",
              f"WORK={tmp / 'work'}", f"SHARE={share}", f"NEV={_nev_stand_in(tmp)}",
              f"INVENTORY={tmp / 'inventory.json'}", *extra]
    wf = tmp / "wf" / "job.yaml"  # Dagu writes its step scripts beside the workflow file
    wf.parent.mkdir(exist_ok=True)
    wf.write_text(WORKFLOW.read_text())
    return subprocess.run([DAGU, "start", str(wf), "--", *params], capture_output=True, text=True,
                          env=env, timeout=180, cwd=tmp)


def _run_dir(share: Path, name: str) -> Path:
    runs = [p for p in (share / "archive" / "job-logs" / name).iterdir() if p.is_dir()]
    assert len(runs) == 1
    return runs[0]


def test_three_stage_job_runs_publishes_archives_scrubbed_and_cleans_up(tmp_path):
    dh = _dagu_home(tmp_path)
    stages = [
        {"name": "one", "kind": "command", "command": "echo one > one.txt"},
        {"name": "two", "kind": "command",
         "command": "echo two > two.txt; echo pushing to http://nev:hunter2hunter2@198.18.0.5/git/engine.git; "
                    "echo key $(cat $NEV_MODEL_KEY_FILE) from 198.18.0.11; echo token $(cat $NEV_FORGE_TOKEN_FILE)"},
        {"name": "three", "kind": "command", "command": "test -e one.txt && test -e two.txt"},
    ]
    forge, base = _submit_local(tmp_path, stages)
    cp = _start(tmp_path, forge, dh)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    res = result_mod.read(Repo(forge), "refs/heads/result/demo")
    assert res is not None and (res.outcome, res.exit) == ("passed", 0)
    files = git(forge, "ls-tree", "-r", "--name-only", "result/demo").split()
    assert {"one.txt", "two.txt", "job.yaml"} <= set(files)
    share = tmp_path / "share"
    run = _run_dir(share, "demo")
    listing = (run / "archive.txt").read_text().splitlines()
    names = {ln.rsplit(" ", 1)[0] for ln in listing}
    assert {"state.json", "events.jsonl", "logs/one.log", "logs/two.log", "logs/three.log"} <= names
    assert any(n.startswith("dagu/run.") for n in names)
    for ln in listing:  # every file and its line count
        n, count = ln.rsplit(" ", 1)
        assert sum(1 for _ in (run / n).open("rb")) == int(count)
    assert archive_mod.marker(share, "demo", run.name).exists()
    assert not (tmp_path / "work" / "demo").exists()  # passed, published, archived: removed
    # no key, token, credential URL or address anywhere in the archive
    blob = "\n".join(p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())
    assert "pushing to <url>" in blob
    for secret in (MODEL_KEY, FORGE_TOKEN, "hunter2hunter2", "198.18.0.5", "198.18.0.11", "://"):
        assert secret not in blob, secret
    assert not re.search(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", blob)


def test_a_failing_stage_is_published_failed_and_its_folder_kept(tmp_path):
    dh = _dagu_home(tmp_path)
    forge, _ = _submit_local(tmp_path, [{"name": "bad", "kind": "command", "command": "exit 5"}])
    cp = _start(tmp_path, forge, dh)
    res = result_mod.read(Repo(forge), "refs/heads/result/demo")
    assert res is not None and (res.outcome, res.exit) == ("failed", 1), cp.stdout + cp.stderr
    assert (tmp_path / "work" / "demo" / "state" / "state.json").exists()  # kept for a resend
    st = json.loads((_run_dir(tmp_path / "share", "demo") / "state.json").read_text())
    assert st["stages"]["bad"]["status"] == "failed"


def test_inventory_not_ready_keeps_a_not_run_result_unpublished(tmp_path):
    dh = _dagu_home(tmp_path)
    forge, _ = _submit_local(tmp_path, [{"name": "gen", "kind": "batch", "command": "true",
                                         "models": ["qwen3.8-27b-fast"]}], key="batch")
    gateway = Listener()
    try:
        cp = _start(tmp_path, forge, dh, "demo", f"MODEL_URL=http://127.0.0.1:{gateway.port}")
    finally:
        gateway.close()
    out = cp.stdout + cp.stderr
    assert Repo(forge).try_rev("refs/heads/result/demo") is None, out
    res = result_mod.read(Repo(tmp_path / "work" / "demo" / "src"))
    assert res is not None and (res.outcome, res.exit) == ("not-run", 3)
    st = json.loads((tmp_path / "work" / "demo" / "state" / "state.json").read_text())
    assert st["inventory"]["outcome"] == "transient"
    assert st["inventory"]["reasons"][0]["kind"] == "snapshot-missing"


def test_publish_failure_is_exit_7(tmp_path):
    dh = _dagu_home(tmp_path)
    forge, _ = _submit_local(tmp_path, [{"name": "a", "kind": "command", "command": "true"}])
    (forge / "hooks" / "pre-receive").write_text("#!/bin/sh\necho refused by the forge >&2\nexit 1\n")
    (forge / "hooks" / "pre-receive").chmod(0o755)
    cp = _start(tmp_path, forge, dh)
    out = cp.stdout + cp.stderr
    assert "publish" in out and "exit status 7" in out, out
    assert (tmp_path / "work" / "demo").exists()  # not published: kept


def test_archive_keeps_writer_prompts_and_events_scrubbed_and_lists_them(tmp_path):
    job = tmp_path / "work" / "w"
    session = job / "state" / "writer" / "write"
    session.mkdir(parents=True)
    (session / "brief.md").write_text("write clamp_px; gateway http://198.18.0.20:4000\n")
    (session / "events.jsonl").write_text('{"event": "call", "key": "sk-abcdefgh12345678"}\n' * 3)
    (job / "state" / "events.jsonl").write_text('{"seq": 1}\n')
    share = tmp_path / "share"
    dest = archive_mod.archive("w", "run-1", job, share, None, ["supersecretvalue"])
    listing = dict(ln.rsplit(" ", 1) for ln in (dest / "archive.txt").read_text().splitlines())
    assert listing == {"events.jsonl": "1", "writer/write/brief.md": "1", "writer/write/events.jsonl": "3"}
    blob = (dest / "writer" / "write" / "brief.md").read_text() + (dest / "writer" / "write" / "events.jsonl").read_text()
    assert "198.18.0.20" not in blob and "sk-abcdefgh" not in blob and "write clamp_px" in blob
    assert archive_mod.marker(share, "w", "run-1").read_text() == "run-1\n"


def test_stages_get_the_lanes_path_toolchain_declared_aliases_and_job_ledger_name_but_no_pythonpath(tmp_path):
    dh = _dagu_home(tmp_path)
    lane_bin = tmp_path / "home" / ".local" / "bin"     # where `nev lane install` links nev
    lane_bin.mkdir(parents=True)
    tool = lane_bin / "lane-tool"
    tool.write_text("#!/bin/sh\necho lane-tool ran\n")
    tool.chmod(0o755)
    declared = tmp_path / "declared-folknet.json"
    declared.write_bytes((ROOT / "bench" / "folknet.json").read_bytes())
    stages = [{"name": "look", "kind": "command",
               "command": "lane-tool > tool.txt; printf '%s\\n' \"PATH=$PATH\" \"RUSTUP_HOME=$RUSTUP_HOME\" "
                          "\"PYTHONPATH=${PYTHONPATH-unset}\" \"NEV_FOLKNET_FILE=$NEV_FOLKNET_FILE\" "
                          "\"NEV_LEDGER_NAME=$NEV_LEDGER_NAME\" > env.txt"}]
    forge, _ = _submit_local(tmp_path, stages, name="envjob")
    cp = _start(tmp_path, forge, dh, "envjob", f"LANE_PATH={lane_bin}:/usr/local/bin:/usr/bin:/bin",
                f"LANE_RUSTUP_HOME={tmp_path / 'rustup'}", f"DECLARED={declared}")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert git(forge, "show", "result/envjob:tool.txt").strip() == "lane-tool ran"
    env = dict(ln.split("=", 1) for ln in git(forge, "show", "result/envjob:env.txt").splitlines())
    assert env["PATH"].split(":")[0] == str(lane_bin)
    assert env["RUSTUP_HOME"] == str(tmp_path / "rustup")
    assert env["PYTHONPATH"] == "unset"          # the source copy never shadows the installed nev
    assert env["NEV_FOLKNET_FILE"] == str(declared)
    assert env["NEV_LEDGER_NAME"] == "envjob"
