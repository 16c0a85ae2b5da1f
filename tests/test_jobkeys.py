"""One gateway key per job (jobs/jobkeys.py), its pure parts: the aliases a manifest names, the
change to the keys file (run for real here with python3 on a file, as on the gateway's host), the
setting that says where the file is, and the key never a Dagu parameter."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from dagu.layout import Layout
from jobs import jobkeys, submit
from jobs.manifest import parse
from lanes.base.errors import ConfigError


def manifest(tmp_path, limit="1h"):
    return parse({"name": "clamp-px", "base": "a" * 40, "spec": "specs/x.md", "key": "batch", "limit": limit,
                  "stages": [{"name": "gen", "kind": "batch", "command": "true", "models": ["qwen3.8-27b-fast"]},
                             {"name": "ask", "kind": "command", "command": "true",
                              "models": [{"alias": "deepseek-v4.1-flash", "provider": "self-hosted"}]},
                             {"name": "check", "kind": "verify", "command": "true"},
                             {"name": "write", "kind": "writer", "model": "qwen3.8-27b-fast", "brief": "b.md"}]},
                 str(tmp_path / "job.yaml"))


def test_a_jobs_key_is_allowed_exactly_the_aliases_its_manifest_names(tmp_path):
    assert jobkeys.aliases(manifest(tmp_path)) == ["deepseek-v4.1-flash", "qwen3.8-27b-fast"]


def test_apply_adds_replaces_and_removes_a_jobs_entry_and_drops_expired_job_keys_only():
    box = {"batch": {"name": "batch", "models": ["a"], "sha256": "d0"}}
    old = {"name": "job:x", "job": "x", "models": ["a"], "sha256": "d1", "expires": 100}
    gone = {"name": "job:y", "job": "y", "models": ["a"], "sha256": "d2", "expires": 50}
    keys = {**box, "job:x": old, "job:y": gone}
    new = {"name": "job:x", "job": "x", "models": ["b"], "sha256": "d3", "expires": 500}
    after = jobkeys.apply(keys, {"add": {"job:x": new}}, now=60)
    assert after == {**box, "job:x": new}                         # replaced; y expired; the box's key kept
    assert jobkeys.apply(after, {"remove": ["job:x"]}, now=60) == box
    assert jobkeys.apply(box, {"remove": ["job:nothing"]}, now=60) == box
    # the tick revokes the key its record names: a newer submission's key of the same job stays
    assert jobkeys.apply(after, {"remove": ["job:x"], "sha256": "d1"}, now=60) == after
    assert jobkeys.apply(after, {"remove": ["job:x"], "sha256": "d3"}, now=60) == box
    assert keys["job:y"] == gone                                  # the input is left as it was


def test_the_program_run_on_the_gateways_host_rewrites_the_file_atomically_keeping_its_mode(tmp_path):
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"batch": {"name": "batch", "models": ["a"], "sha256": "d0"}}))
    os.chmod(path, 0o640)
    entry = {"name": "job:x", "job": "x", "models": ["a"], "sha256": "d1", "expires": 4102444800}
    r = subprocess.run([sys.executable, "-c", jobkeys.remote_program(), str(path)], capture_output=True, text=True,
                       input=json.dumps({"add": {"job:x": entry}}), check=True)
    assert json.loads(r.stdout) == ["job:x"]
    assert json.loads(path.read_text())["job:x"] == entry and (path.stat().st_mode & 0o777) == 0o640
    subprocess.run([sys.executable, "-c", jobkeys.remote_program(), str(path)], input='{"remove": ["job:x"]}',
                   text=True, check=True, capture_output=True)
    assert list(json.loads(path.read_text())) == ["batch"]
    assert not list(tmp_path.glob("*.nev-tmp"))


@pytest.mark.parametrize("value", ["keys.json", "gw:relative/keys.json", ":/srv/keys.json"])
def test_a_malformed_keys_file_setting_is_one_line_naming_it(value):
    with pytest.raises(ConfigError) as e:
        jobkeys.where({"NEV_GATEWAY_KEYS_FILE": value})
    assert "NEV_GATEWAY_KEYS_FILE" in str(e.value) and "\n" not in str(e.value)


def test_the_keys_file_setting_names_host_and_path_and_without_it_there_is_no_job_key():
    target, path = jobkeys.where({"NEV_GATEWAY_KEYS_FILE": "root@10.0.0.20:/srv/gateway/keys.json"})
    assert (target.user, target.host, path) == ("root", "10.0.0.20", "/srv/gateway/keys.json")
    assert jobkeys.where({}) is None


def test_minting_writes_only_the_digest_with_the_jobs_aliases_and_an_expiry(tmp_path, monkeypatch):
    ops = []
    monkeypatch.setattr(jobkeys, "_change", lambda op, env: ops.append(op))
    m = manifest(tmp_path, limit="2h")
    key = jobkeys.mint(m, {}, now=1000.0)
    [op] = ops
    entry = op["add"]["job:clamp-px"]
    assert entry == {"name": "job:clamp-px", "job": "clamp-px", "models": ["deepseek-v4.1-flash", "qwen3.8-27b-fast"],
                     "sha256": hashlib.sha256(key.encode()).hexdigest(), "expires": 1000 + 7200 + 3600}
    assert key not in json.dumps(op)
    # and the key is nowhere in the workflow's parameters (Dagu keeps them on disk)
    p = submit.params(m, "/home/lane/dagu/manifests/m.yaml", "http://forge/x.git", "/home/lane",
                      Layout(root="/home/lane/dagu"), "/srv/share", "", {})
    assert key not in json.dumps(p)
    assert jobkeys.lane_key_path("/home/lane/dagu/home", "clamp-px") == "/home/lane/dagu/home/job-keys/clamp-px.key"


def _nev(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], env={**clean, "PYTHONPATH": str(root), **env},
                          capture_output=True, text=True, timeout=120)


def test_revoke_by_hand_needs_the_keys_file_setting_and_a_job_name_each_said_in_one_line():
    r = _nev("job", "revoke", "clamp-px", env={})
    assert r.returncode == 1 and "NEV_GATEWAY_KEYS_FILE is not set" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = _nev("job", "revoke", "Bad Name", env={"NEV_GATEWAY_KEYS_FILE": "root@10.0.0.20:/srv/keys.json"})
    assert r.returncode == 2 and "not a job name" in r.stderr


def test_the_key_file_is_deleted_only_when_it_holds_the_revoked_key_or_by_hand_always(tmp_path):
    """The sh the tick and `nev job revoke` run on the lane, run here with sh on real files."""
    f = tmp_path / "job-keys" / "clamp-px.key"
    f.parent.mkdir()

    def run(sha256: str | None) -> None:
        subprocess.run(["sh", "-c", jobkeys.drop_command(str(f), sha256)], check=True)

    f.write_text("sk-nev-job-new\n")
    run(jobkeys.digest("sk-nev-job-old"))          # a newer submission's key: kept
    assert f.read_text() == "sk-nev-job-new\n"
    run(jobkeys.digest("sk-nev-job-new"))          # the key the tick revoked: gone
    assert not f.exists()
    run(jobkeys.digest("sk-nev-job-new"))          # already gone: nothing to do, no failure
    f.write_text("sk-nev-job-any\n")
    run(None)                                      # by hand: whatever key it holds
    assert not f.exists()
    with pytest.raises(ValueError):
        jobkeys.drop_command(str(f), "x; rm -rf /")


def test_the_tick_deletes_the_key_file_on_the_jobs_lane_after_revoking_and_says_a_failure(monkeypatch, capsys):
    from jobs import poll
    from lanes.base.errors import NevError

    done = []
    monkeypatch.setattr(jobkeys, "revoke", lambda job, env, sha: done.append(("revoke", job, sha)))
    monkeypatch.setattr(jobkeys, "drop_key_file", lambda job, lane, sha: done.append(("drop", job, lane, sha)))
    env = {"NEV_GATEWAY_KEYS_FILE": "root@10.0.0.20:/srv/keys.json"}
    poll.revoke_key("clamp-px", env, "a" * 64, 1)
    assert done == [("revoke", "clamp-px", "a" * 64), ("drop", "clamp-px", 1, "a" * 64)]

    def unreachable(*a):
        raise NevError("lane 1 does not answer")

    monkeypatch.setattr(jobkeys, "drop_key_file", unreachable)
    poll.revoke_key("clamp-px", env, "a" * 64, 1)
    out = capsys.readouterr()
    assert "clamp-px: its key file on the lane was not deleted (lane 1 does not answer)" in out.out + out.err


def test_revoke_by_hand_with_the_lane_down_says_the_key_is_revoked_and_what_is_left(monkeypatch, capsys, tmp_path):
    from jobs import records
    from lanes.base.errors import NevError
    from lanes.base.exitcodes import Exit
    from rig import cli

    done = []
    monkeypatch.setenv("NEV_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(jobkeys, "revoke", lambda job, env=None, sha=None: done.append(("revoke", job)))

    def down(job, lane, sha=None):
        raise NevError("lane 1 (lane1) did not answer through the jump host", Exit.UNAVAILABLE)

    monkeypatch.setattr(jobkeys, "drop_key_file", down)
    monkeypatch.setattr(records, "read", lambda environ=None: records.Records())
    code = cli.main(["job", "revoke", "clamp-px"])
    out, err = capsys.readouterr()
    assert done == [("revoke", "clamp-px")] and code == Exit.UNAVAILABLE
    assert "its gateway key is revoked" in out
    line = [ln for ln in err.splitlines() if ln.startswith("nev:")]
    assert len(line) == 1 and "key file on the lane is not deleted" in line[0] and "did not answer" in line[0]
    assert "nev job revoke clamp-px" in line[0]


def test_a_live_key_of_another_submission_of_the_same_job_name_refuses_the_mint(tmp_path):
    """Two development boxes, one job name: the second submission is refused while the first's
    key is live (the lane's key file and work folder are by name); the submitter's own earlier
    key is replaced; an expired one is no obstacle."""
    path = tmp_path / "keys.json"
    theirs = {"name": "job:x", "job": "x", "models": [], "sha256": "a" * 64,
              "expires": 2_000_000_000}
    path.write_text(json.dumps({"job:x": theirs}))
    mine = {**theirs, "sha256": "b" * 64}
    op = {"add": {"job:x": mine}, "over": None}
    r = subprocess.run([sys.executable, "-c", jobkeys.remote_program(), str(path)],
                       input=json.dumps(op), text=True, capture_output=True)
    assert r.returncode == 4 and "refused: job:x is held by another submission's key" in r.stderr
    assert json.loads(path.read_text())["job:x"]["sha256"] == "a" * 64      # nothing changed
    apply = jobkeys.apply
    assert apply({"job:x": theirs}, {**op, "over": "a" * 64}, 0)["job:x"] == mine   # its own
    assert apply({"job:x": {**theirs, "expires": 5}}, op, 10)["job:x"] == mine      # expired
    assert apply({}, op, 0) == {"job:x": mine}
    assert apply({"job:x": theirs}, {"add": {"job:x": mine}}, 0)["job:x"] == mine   # no "over"
