"""One config file under $XDG_CONFIG_HOME/nev/, found from any folder: `nev config init` writes
its skeleton once; the environment overrides each value; `nev settings` names where each came
from; paths in it are relative to the file, and nothing is found relative to the folder nev runs
in (nev's own files are read in its checkout)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lanes.base import config, settings
from lanes.base.errors import ConfigError
from lanes.base.exitcodes import Exit

ROOT = Path(__file__).resolve().parent.parent
KNOWN = {s.name: s.secret for s in settings.all_settings() if s is not settings.CONFIG}


def nev(args: list[str], cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "XDG_"))}
    full.update({"PYTHONPATH": str(ROOT), "HOME": str(home),
                 "XDG_CONFIG_HOME": str(home / ".config")}, **env)
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=120)


def settings_json(cwd: Path, home: Path, **env: str) -> dict[str, dict]:
    r = nev(["settings", "--json"], cwd, home, **env)
    data = json.loads(r.stdout)
    return {**{row["name"]: row for row in data["settings"]},
            **{f"file:{f['what']}": f for f in data["files"]}}


def test_config_init_writes_a_skeleton_that_reads_and_never_overwrites(tmp_path):
    home = tmp_path / "home"
    r = nev(["config", "init"], tmp_path, home)
    assert r.returncode == 0, r.stderr
    p = home / ".config" / "nev" / "config.toml"
    assert str(p) in r.stdout and stat.S_IMODE(p.stat().st_mode) == 0o600
    text = p.read_text()
    for part in ("[lane]", "jump", "[forge]", "[model]", "[gateway]", "shared", "lanes_file"):
        assert part in text
    got = config.parse(text, p, KNOWN)
    assert got["NEV_LANES_FILE"] == "lanes.json" and got["NEV_KNOWN_HOSTS"] == "known_hosts"
    p.write_text(text + "# mine\n")
    again = nev(["config", "init"], tmp_path, home)
    assert again.returncode == Exit.FAILED and "already exists" in again.stderr
    assert p.read_text().endswith("# mine\n")


def test_values_come_from_the_config_relative_to_it_and_the_environment_wins(tmp_path):
    home = tmp_path / "home"
    cfg = home / ".config" / "nev"
    cfg.mkdir(parents=True)
    (cfg / "lanes.json").write_text(json.dumps({"lanes": [{"ssh": "lane@10.0.0.11"}]}))
    (cfg / "config.toml").write_text('lanes_file = "lanes.json"\n[lane]\nmin_free_gb = 7\n'
                                     'jump = "me@jump-host"\n')
    elsewhere = tmp_path / "some" / "folder"
    elsewhere.mkdir(parents=True)
    rows = settings_json(elsewhere, home)
    src = f"config {cfg / 'config.toml'}"
    assert rows["NEV_LANES_FILE"]["value"] == str(cfg / "lanes.json")
    assert rows["NEV_LANES_FILE"]["source"] == src and rows["NEV_LANE_JUMP"]["source"] == src
    assert rows["NEV_LANE_MIN_FREE_GB"]["value"] == "7"
    assert rows["file:lanes"]["status"] == "ok"
    rows = settings_json(elsewhere, home, NEV_LANE_MIN_FREE_GB="9")
    assert (rows["NEV_LANE_MIN_FREE_GB"]["value"], rows["NEV_LANE_MIN_FREE_GB"]["source"]) == \
        ("9", "NEV_LANE_MIN_FREE_GB")


def test_nothing_is_found_relative_to_the_folder_nev_runs_in(tmp_path):
    home = tmp_path / "home"
    for folder in (tmp_path, ROOT):
        (tmp_path / "bench").mkdir(exist_ok=True)
        (tmp_path / "bench" / "folknet.json").write_text("{not json")    # a decoy here
        rows = settings_json(folder, home)
        assert rows["NEV_FOLKNET_FILE"]["value"] == str(ROOT / "bench" / "folknet.json")
        assert rows["file:folknet"]["status"] == "ok"
        # nev's own tracks.json is never reported as the engine's
        assert folder != ROOT or "file:tracks" not in rows


@pytest.mark.parametrize("text, said", [
    ('lane_jmup = "me@j"\n', "key lane_jmup is not a setting (did you mean lane_jump?)"),
    ('[forge]\nurll = "http://x"\n', "key [forge] urll is not a setting (did you mean forge_url?)"),
    ('forge_token = "s3cr3t"\n', "holds a secret"),
    ('lanes_file = ["a"]\n', "is a list"),
    ('lanes_file = "a.json"\njump = \n', "line 2, column 8"),
])
def test_a_wrong_config_is_one_line_naming_the_file_and_the_place(tmp_path, text, said):
    p = tmp_path / "config.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        config.parse(text, p, KNOWN)
    assert said in str(e.value) and str(p) in str(e.value) and "s3cr3t" not in str(e.value)
    r = nev(["lane", "list"], tmp_path, tmp_path / "home", NEV_CONFIG=str(p))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == Exit.FAILED and len(lines) == 1 and said in lines[0], r.stderr


def test_the_ticks_cron_line_reads_the_config_from_crons_environment(tmp_path):
    """The line `nev job poll --install` writes, run as cron runs it (an empty environment but
    HOME and PATH, from /): the settings come from the config file in HOME."""
    from jobs import tick
    from tests.helpers.local_lane import make_repo
    from tests.helpers.local_sshd import free_port

    home = tmp_path / "home"
    cfg = home / ".config" / "nev"
    cfg.mkdir(parents=True)
    url = f"http://127.0.0.1:{free_port()}/owner/engine.git"
    (cfg / "config.toml").write_text(f'[forge]\nurl = "{url}"\n')
    repo = make_repo(home / "engine")
    log = home / "tick.log"
    env = tick.tick_env(repo, {"HOME": str(home), "PATH": "/usr/bin:/bin"})
    line = tick.cron_line(repo, env, log)
    command = line.split(" ", 5)[5].removesuffix(" " + tick.cron_tag(repo))
    r = subprocess.run(["env", "-i", f"HOME={home}", "PATH=/usr/bin:/bin", "sh", "-c", command],
                       cwd="/", capture_output=True, text=True, timeout=120)
    said = log.read_text()
    assert r.returncode == Exit.UNAVAILABLE, said
    assert f"the forge at {url} does not answer" in said    # the config's URL, from cron


def test_settings_get_prints_one_value_as_nev_reads_it_and_never_a_secret(tmp_path):
    home = tmp_path / "home"
    cfg = home / ".config" / "nev"
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text('[forge]\nuser = "me"\ntoken_file = "forge-token"\n')
    r = nev(["settings", "--get", "forge_token_file"], tmp_path, home)
    assert (r.returncode, r.stdout) == (0, f"{cfg / 'forge-token'}\n")
    assert nev(["settings", "--get", "NEV_FORGE_USER"], tmp_path, home).stdout == "me\n"
    r = nev(["settings", "--get", "forge_token"], tmp_path, home, NEV_FORGE_TOKEN="s3cr3t-tok")
    assert r.returncode == Exit.FAILED and "s3cr3t" not in r.stdout + r.stderr
    r = nev(["settings", "--get", "forge_url"], tmp_path, home,
            NEV_FORGE_URL="http://me:tok3nvalue99887766554433@forge/x.git")
    assert r.returncode == 0 and "tok3nvalue" not in r.stdout
    assert nev(["settings", "--get", "model_url"], tmp_path, home).returncode == Exit.FAILED
