"""Writer stages: the harness is a declaration, the brief lands outside the worktree, the key never on argv.

The writer command here is a stand-in script declared in the job tree's tracks.json
(`specWatch.lanes.launch`); it records what it was given, as a real writer command would
be given it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import result as result_mod
from lanes.base.gitrun import Repo
from tests.helpers.job_helpers import (
    ROOT,
    Listener,
    git,
    lane_env,
    make_checkout,
    nev,
    tool_dir,
    write_manifest,
)

STAND_IN = """#!{python}
import json, os, sys, pathlib
session = pathlib.Path(os.environ["WRITER_SESSION_DIR"])
(session / "events.jsonl").write_text(json.dumps({"event": "session-started"}) + "\\n")
pathlib.Path("written.txt").write_text("by the writer\\n")
seen = json.dumps({"argv": sys.argv, "cwd": os.getcwd(),
                   "key": os.environ.get("NEV_MODEL_API_KEY"), "tool": os.environ.get("NEV_WRITER_TOOL")})
(session / "seen.json").write_text(seen)   # what the session got, beside the log
print(seen)                                # and in its output, which the stage's log masks
"""

KEY = "sk-writer-0123456789abcdef0123456789abcdef"


@pytest.fixture
def gateway():
    g = Listener()
    yield g
    g.close()


def _writer_job(tmp_path: Path, tool: str | None) -> tuple[Path, Path]:
    launcher = tmp_path / "writer-exec"
    launcher.write_text(STAND_IN.replace("{python}", sys.executable))
    launcher.chmod(0o755)
    work = tmp_path / "work"
    base = make_checkout(work, tracks_tool=tool, launch=str(launcher))
    (work / "brief.md").write_text("write clamp_px\n")
    git(work, "add", "brief.md")
    git(work, "commit", "-qm", "brief")
    m = write_manifest(tmp_path / "job.yaml", base, [
        {"name": "write", "kind": "writer", "brief": "brief.md", "model": "qwen3.8-27b-fast"}], key="writer")
    return work, m


def _key_file(tmp_path: Path, mode: int) -> Path:
    kf = tmp_path / "writer.key"
    kf.write_text(KEY + "\n")
    kf.chmod(mode)
    return kf


def _run(tmp_path: Path, m: Path, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    # the inventory check is not the subject here: no models in the snapshot would make it 3
    env = {**env, "NEV_INVENTORY": str(tmp_path / "inv.json")}
    snap = {"schema": 1, "probed_at": "2099-01-01T00:00:00Z", "aliases": {
        "qwen3.8-27b-fast": {"status": "ready", "since": "2026-01-01T00:00:00Z"}}}
    (tmp_path / "inv.json").write_text(json.dumps(snap))
    return nev(["job", "run", str(m), "--workdir", str(work), "--state", str(tmp_path / "st")], env)


def test_writer_launch_uses_the_declared_tool_brief_outside_worktree_and_key_from_file(tmp_path, gateway):
    work, m = _writer_job(tmp_path, "declared-tool")
    env = lane_env(tmp_path, gateway.port, tool_dir(tmp_path / "bin"),
                   NEV_MODEL_KEY_FILE=str(_key_file(tmp_path, 0o600)), NEV_INVENTORY_MAX_AGE="999999999")
    r = _run(tmp_path, m, work, env)
    assert r.returncode == 0, r.stderr
    log = (tmp_path / "st" / "logs" / "write.log").read_text()
    seen = json.loads((tmp_path / "st" / "writer" / "write" / "seen.json").read_text())
    assert KEY not in log and json.loads(log.splitlines()[-1])["key"] == "***"
    argv = seen["argv"]
    assert argv[1:] == ["--tool", "declared-tool", "--model", "qwen3.8-27b-fast", "--brief-file",
                        str(tmp_path / "st" / "writer" / "write" / "brief.md")]
    brief = Path(argv[-1])
    assert brief.read_text() == "write clamp_px\n" and not brief.is_relative_to(work)
    assert seen["key"] == KEY and KEY not in " ".join(argv)
    assert KEY not in r.stderr and KEY not in (tmp_path / "st" / "events.jsonl").read_text()
    assert (tmp_path / "st" / "writer" / "write" / "events.jsonl").exists()
    assert (work / "written.txt").exists() and not (work / "brief.md").read_text() == ""
    res = result_mod.read(Repo(work))
    assert res is not None and res.outcome == "passed"
    assert "brief.md" not in git(work, "show", "--name-only", "--format=", "HEAD~1")


def test_writer_tool_falls_back_to_TRACKS_TOOL(tmp_path, gateway):
    work, m = _writer_job(tmp_path, None)
    env = lane_env(tmp_path, gateway.port, tool_dir(tmp_path / "bin"), TRACKS_TOOL="env-tool",
                   NEV_MODEL_KEY_FILE=str(_key_file(tmp_path, 0o600)), NEV_INVENTORY_MAX_AGE="999999999")
    r = _run(tmp_path, m, work, env)
    assert r.returncode == 0, r.stderr
    seen = json.loads((tmp_path / "st" / "logs" / "write.log").read_text().splitlines()[-1])
    assert seen["argv"][1:3] == ["--tool", "env-tool"] and seen["tool"] == "env-tool"


def test_writer_with_no_declared_harness_is_refused(tmp_path, gateway):
    work, m = _writer_job(tmp_path, None)
    env = lane_env(tmp_path, gateway.port, tool_dir(tmp_path / "bin"))
    r = _run(tmp_path, m, work, env)
    assert r.returncode == 9 and "no writer harness is declared" in r.stderr
    assert not (work / "written.txt").exists()


def test_writer_key_file_readable_by_others_is_refused(tmp_path, gateway):
    work, m = _writer_job(tmp_path, "declared-tool")
    env = lane_env(tmp_path, gateway.port, tool_dir(tmp_path / "bin"),
                   NEV_MODEL_KEY_FILE=str(_key_file(tmp_path, 0o644)), NEV_INVENTORY_MAX_AGE="999999999")
    r = _run(tmp_path, m, work, env)
    assert r.returncode == 1 and "mode 644; make it 600" in r.stderr
    assert not (work / "written.txt").exists()


# --- no committed script names a harness ------------------------------------------------------------

# Agent harnesses a script might be tempted to name; the declared tool is added from tracks.json.
KNOWN_HARNESSES = ["claude", "claude-code", "codex", "aider", "opencode", "goose", "gemini-cli",
                   "cursor-agent", "pi-coding-agent", "openhands", "cline"]


# Files that may name a harness as test data, each with its reason. Nothing else is exempt.
EXEMPT = {
    "tests/test_job_writer.py": "this scan: the names it looks for, and a planted one",
    "tests/test_lane_agent_cache.py": "`.codex` there is a file suffix of the agent cache's test data",
}
# What can run: Python, shell, Rust, workflows and CI files, the Makefile, anything with a shebang;
# `.gitignore` too (the seed's test named it).
RUNNABLE = (".py", ".sh", ".rs", ".yaml", ".yml")


def _script_files(repo: Path) -> list[str]:
    """Every committed file that can run (or decides what is committed), exemptions aside."""
    files = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    out = []
    for f in files:
        if f in EXEMPT:
            continue
        p = repo / f
        if f.startswith(("scripts/", ".ci/", "dagu/workflows/")) or f in ("Makefile", ".gitignore") \
                or f.endswith(RUNNABLE):
            out.append(f)
        elif p.is_file():
            try:
                if p.read_bytes()[:2] == b"#!":
                    out.append(f)
            except OSError:
                pass
    return out


def harness_mentions(repo: Path) -> list[str]:
    """Every committed script, or tracks.json outside specWatch.lanes.tool, that names a harness."""
    tracks = json.loads((repo / "tracks.json").read_text())
    tool = tracks.get("specWatch", {}).get("lanes", {}).get("tool")
    names = [*KNOWN_HARNESSES, *([tool] if tool else [])]
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(n) for n in names) + r")(?![\w-])", re.I)
    found = []
    for f in _script_files(repo):
        text = (repo / f).read_text(errors="replace")
        for m in pattern.finditer(text):
            found.append(f"{f}: {m.group(1)}")
    stripped = json.loads(json.dumps(tracks))
    stripped.get("specWatch", {}).get("lanes", {}).pop("tool", None)
    for m in pattern.finditer(json.dumps(stripped)):
        found.append(f"tracks.json: {m.group(1)}")
    return found


def test_no_committed_script_or_tracks_json_names_a_harness():
    assert harness_mentions(ROOT) == []


def test_each_exemption_is_a_committed_file_that_names_one(monkeypatch):
    """An exemption goes when its file no longer needs it."""
    for f in list(EXEMPT):
        with monkeypatch.context() as m:
            m.delitem(EXEMPT, f)
            assert any(x.startswith(f"{f}: ") for x in harness_mentions(ROOT)), f"{f} needs no exemption"


def test_harness_scan_finds_a_planted_name(tmp_path):
    repo = tmp_path / "r"
    make_checkout(repo, tracks_tool="my-harness")
    (repo / "scripts").mkdir()
    (repo / "scripts" / "launch").write_text("#!/bin/sh\nexec my-harness --yolo\n")
    tracks = json.loads((repo / "tracks.json").read_text())
    tracks["specWatch"]["landScript"] = "aider --commit"
    (repo / "tracks.json").write_text(json.dumps(tracks))
    (repo / "jobs").mkdir()
    (repo / "jobs" / "start.py").write_text("import subprocess\nsubprocess.run(['codex', 'exec'])\n")
    (repo / "README.md").write_text("codex is a harness (prose, not a script)\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "planted")
    assert sorted(harness_mentions(repo)) == ["jobs/start.py: codex", "scripts/launch: my-harness",
                                              "tracks.json: aider"]
