"""The forge as two URLs: this box pushes and lists job/result branches at NEV_FORGE_URL (its own
forward); the lanes fetch and publish at NEV_LANE_GIT_URL. The token comes from the environment,
NEV_FORGE_TOKEN_FILE or the primary checkout's `.env`, and is in no argv, no parameter, no log."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from jobs import lane_main, submit
from lanes import forge as forge_mod
from lanes import forgeauth, payload
from lanes.agent.git import CREDENTIAL_HELPER
from lanes.base import gitrun
from lanes.base.errors import ConfigError
from lanes.base.gitrun import Repo
from lanes.base.mask import mask
from lanes.lanesfile import LanesFile
from tests.helpers.job_helpers import fake_lane_dagu, git, make_checkout, write_manifest

TOKEN = "forgetok-" + "5be0c1d2a3f4"
FORWARD = "http://127.0.0.1:3300/o/e.git"   # the forge as this box reaches it
RIG = "http://198.18.0.5/git/engine.git"      # as the lanes reach it


@pytest.fixture
def clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("NEV_", "GENERA_")):
            monkeypatch.delenv(k)
    return monkeypatch


def primary_and_track(tmp: Path) -> tuple[Path, Path]:
    """A primary checkout (its `.env` holds the forge user and token) and a track worktree of it."""
    primary = tmp / "primary"
    make_checkout(primary)
    (primary / ".git" / "info" / "exclude").write_text(".env\n")
    (primary / ".env").write_text(f"GENERA_FORGE_USER=forge-bot\nGENERA_FORGE_TOKEN={TOKEN}\n")
    track = tmp / "track"
    git(primary, "worktree", "add", "-q", "-b", "track", str(track))
    return primary, track


def test_with_both_urls_git_targets_the_forward_and_the_lane_gets_the_rig_address(tmp_path, clean_env):
    _primary, track = primary_and_track(tmp_path)
    forward = tmp_path / "forward.git"   # the forge as this box reaches it
    rig = tmp_path / "rig.git"           # the same forge at the lanes' address
    for bare in (forward, rig):
        git(tmp_path, "init", "-q", "--bare", str(bare))
    manifest = write_manifest(tmp_path / "demo.yaml", git(track, "rev-parse", "HEAD"),
                              [{"name": "a", "kind": "command", "command": "true"}])
    env = {"NEV_FORGE_URL": str(forward), "NEV_LANE_GIT_URL": str(rig), "NEV_STATE_DIR": str(tmp_path / "state"),
           "NEV_JOB_INSTALL_NEV": "0", "NEV_FOLKNET_FILE": str(tmp_path / "none.json"), "PATH": os.environ["PATH"]}

    argvs: list[list[str]] = []
    real_run = subprocess.run

    def recording_run(argv, *a, **kw):
        argvs.append(list(argv))
        return real_run(argv, *a, **kw)

    conn, sent = fake_lane_dagu(clean_env)
    clean_env.setattr(gitrun.subprocess, "run", recording_run)

    assert submit.submit(manifest, repo_path=track, environ=env) == 0

    tip = git(track, "rev-parse", "HEAD")
    assert git(forward, "rev-parse", "refs/heads/job/demo") == tip
    assert subprocess.run(["git", "-C", str(rig), "rev-parse", "-q", "--verify", "refs/heads/job/demo"],
                          capture_output=True).returncode != 0          # never pushed at the lanes' address
    forge_argvs = [a for a in argvs if "push" in a or "ls-remote" in a]
    assert forge_argvs and all(str(forward) in a and str(rig) not in a for a in forge_argvs)
    [p] = sent
    assert p["FORGE"] == str(rig)                                     # what the lane fetches and publishes at
    assert not any(str(forward) in v for v in p.values())
    recorded = (tmp_path / "state" / "job-results.json").read_text()
    for text in [*map(" ".join, argvs), *p.values(), *conn.commands, recorded]:
        assert TOKEN not in text
    assert conn.files["/home/lane/dagu/home/forge-token"] == (TOKEN.encode(), 0o600)  # over SSH stdin only
    assert json.loads(recorded)["jobs"]["demo"]["params"]["FORGE"] == str(rig)


def test_submit_without_the_lanes_url_is_refused_before_anything_is_pushed(tmp_path, clean_env):
    _primary, track = primary_and_track(tmp_path)
    forward = tmp_path / "forward.git"
    git(tmp_path, "init", "-q", "--bare", str(forward))
    manifest = write_manifest(tmp_path / "demo.yaml", git(track, "rev-parse", "HEAD"),
                              [{"name": "a", "kind": "command", "command": "true"}])
    env = {"NEV_FORGE_URL": str(forward), "NEV_LANES_FILE": str(tmp_path / "no-lanes.json"),
           "NEV_STATE_DIR": str(tmp_path / "state")}
    with pytest.raises(ConfigError, match="NEV_LANE_GIT_URL"):
        submit.submit(manifest, repo_path=track, environ=env)
    assert git(forward, "for-each-ref") == ""


def test_a_flat_rig_uses_the_lanes_url_for_both_sides(tmp_path, clean_env):
    lanes_file = tmp_path / "lanes.json"
    lanes_file.write_text(json.dumps({"lanes": [], "git_url": "http://198.18.0.5/git/engine.git"}))
    f = forge_mod.from_settings({"NEV_LANES_FILE": str(lanes_file)})
    assert f.url == f.for_lanes() == "http://198.18.0.5/git/engine.git"
    f = forge_mod.from_settings({"NEV_LANES_FILE": str(lanes_file),
                                 "NEV_FORGE_URL": "http://127.0.0.1:3300/o/e.git"})
    assert (f.url, f.for_lanes()) == ("http://127.0.0.1:3300/o/e.git", "http://198.18.0.5/git/engine.git")
    with pytest.raises(ConfigError, match="no forge URL"):
        forge_mod.from_settings({"NEV_LANES_FILE": str(tmp_path / "none.json")})


def test_a_url_without_a_credential_is_used_as_it_is_and_the_token_is_looked_up(
        tmp_path, clean_env):
    tf = tmp_path / "token"
    tf.write_text(TOKEN)
    f = forge_mod.from_settings({"NEV_FORGE_URL": "http://127.0.0.1:3300/o/e.git",
                                 "NEV_LANE_GIT_URL": "http://198.18.0.5/git/engine.git",
                                 "NEV_FORGE_TOKEN_FILE": str(tf)})
    assert (f.url, f.lane_url) == (FORWARD, RIG)
    assert (f.cred.user, f.cred.token) == (None, TOKEN)
    assert f.lane_cred() == {"user": "nev", "password": TOKEN}
    bare = forge_mod.from_settings({"NEV_LANE_GIT_URL": "http://198.18.0.5/git/engine.git"})
    assert (bare.cred.token, bare.lane_cred()) == (None, None)


def test_a_credential_in_a_url_is_split_out_of_it_and_the_looked_up_one_comes_first(
        tmp_path, clean_env):
    """The one rule, the same for this box's URL, the lanes' URL and a gate's."""
    f = forge_mod.from_settings({"NEV_FORGE_URL": f"http://u:{TOKEN}@127.0.0.1:3300/o/e.git",
                                 "NEV_LANE_GIT_URL": "http://198.18.0.5/git/engine.git"})
    assert (f.url, f.for_lanes()) == (FORWARD, RIG)
    assert (f.cred.user, f.cred.token) == ("u", TOKEN)
    assert TOKEN not in repr(f) and mask(f"x {TOKEN}") == "x ***"
    f = forge_mod.from_settings({"NEV_LANE_GIT_URL": f"http://u:{TOKEN}@198.18.0.5/git/engine.git",
                                 "NEV_FORGE_TOKEN": "env-token-9012"})
    assert f.url == f.lane_url == "http://198.18.0.5/git/engine.git"
    assert (f.cred.user, f.cred.token) == ("u", "env-token-9012")


def test_the_tree_holds_one_forge_class():
    root = Path(__file__).resolve().parent.parent
    pkgs = ("bench", "jobs", "lanes", "rig", "dagu", "crates_bridge")
    found = [str(p.relative_to(root)) for pkg in pkgs
             for p in (root / pkg).rglob("*.py") if "class Forge" in p.read_text(encoding="utf-8")]
    assert found == ["lanes/forge.py"]


def test_the_token_is_looked_up_in_the_environment_then_the_file_then_the_env_files(tmp_path, clean_env):
    primary, track = primary_and_track(tmp_path)
    repo = Repo(track)
    got = forgeauth.lookup(repo, {})
    assert (got.user, got.token, got.source) == ("forge-bot", TOKEN, str(primary / ".env"))
    (track / ".env").write_text("NEV_FORGE_TOKEN=track-token-1234\n")
    assert forgeauth.lookup(repo, {}).token == "track-token-1234"          # the checkout's own .env first
    tf = tmp_path / "token"
    tf.write_text("file-token-5678\n")
    assert forgeauth.lookup(repo, {"NEV_FORGE_TOKEN_FILE": str(tf)}).token == "file-token-5678"
    both = {"NEV_FORGE_TOKEN_FILE": str(tf), "NEV_FORGE_TOKEN": "env-token-9012", "NEV_FORGE_USER": "me"}
    got = forgeauth.lookup(repo, both)
    assert (got.user, got.token, got.source) == ("me", "env-token-9012", "NEV_FORGE_TOKEN")
    assert TOKEN not in repr(got) and "env-token-9012" not in repr(got)
    assert mask(f"token {TOKEN} here") == "token *** here"             # registered with the masker
    with pytest.raises(ConfigError, match="NEV_FORGE_TOKEN_FILE"):
        forgeauth.lookup(repo, {"NEV_FORGE_TOKEN_FILE": str(tmp_path / "missing")})


def test_the_gate_reads_the_same_credential_and_the_url_userinfo_comes_last(tmp_path, clean_env):
    _primary, track = primary_and_track(tmp_path)
    wt = payload.Worktree.open(track)
    with_userinfo = LanesFile(path=None, git_url="http://old:urltok-0000@198.18.0.5/git/engine.git")
    f = forge_mod.forge_for(wt.repo, with_userinfo)
    assert (f.lane_url, f.cred.user, f.cred.token) == (RIG, "forge-bot", TOKEN)
    outside = payload.Worktree(track, "track", "0" * 40, Repo(tmp_path / "nowhere"))  # no .env to read
    f = forge_mod.forge_for(outside.repo, with_userinfo)
    assert (f.cred.user, f.cred.token) == ("old", "urltok-0000")


def test_the_one_credential_helper_hands_git_the_token_from_its_environment(tmp_path, clean_env):
    cred = forgeauth.Credential("forge-bot", TOKEN)
    env = {**os.environ, **cred.git_env(), "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    cp = subprocess.run(["git", "credential", "fill"], input="protocol=http\nhost=forge.example\n\n",
                        env=env, capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert f"username=forge-bot\npassword={TOKEN}\n" in cp.stdout
    assert cred.git_env()["GIT_CONFIG_VALUE_1"] == CREDENTIAL_HELPER
    assert forgeauth.Credential("u", None).git_env()["GIT_CONFIG_COUNT"] == "1"  # helpers off, none added


def test_the_job_steps_use_the_same_helper_with_the_lanes_token_file(tmp_path, clean_env):
    tf = tmp_path / "forge-token"
    tf.write_text(TOKEN)
    clean_env.setenv("NEV_FORGE_TOKEN_FILE", str(tf))
    env = lane_main.forge_env()
    assert env["GIT_CONFIG_VALUE_1"] == CREDENTIAL_HELPER and env["NEV_GIT_PASSWORD"] == TOKEN
    clean_env.setenv("NEV_FORGE_TOKEN_FILE", str(tmp_path / "missing"))
    assert "NEV_GIT_PASSWORD" not in lane_main.forge_env()
