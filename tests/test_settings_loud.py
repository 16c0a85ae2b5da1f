"""Wrong settings fail loudly: a lanes file named and missing, a misspelt key in the lanes file, a
value that is not what its setting takes, a file a setting names that is not there, the forge not
answering through its forward: one line naming it, and the documented exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lanes import lanesfile
from lanes.base.errors import ConfigError
from lanes.base.exitcodes import Exit
from tests.helpers.local_lane import make_repo

ROOT = Path(__file__).resolve().parent.parent


def nev(args: list[str], tmp: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "XDG_"))}
    full.update({"PYTHONPATH": str(ROOT), "HOME": str(tmp / "home"),
                 "NEV_STATE_DIR": str(tmp / "state"),
                 "XDG_CONFIG_HOME": str(tmp / "config")}, **env)
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], cwd=tmp, env=full,
                          capture_output=True, text=True, timeout=120)


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nev: "), r.stderr
    return lines[0]


@pytest.mark.parametrize("args", [["lane", "list"], ["lane", "run", "{wt}", "true"],
                                  ["dagu", "status"], ["lane", "install"]])
def test_a_lanes_file_named_and_missing_is_one_line_and_exit_3(tmp_path, args):
    wt = make_repo(tmp_path / "wt")
    missing = tmp_path / "no" / "lanes.json"
    r = nev([a.replace("{wt}", str(wt)) for a in args], tmp_path, NEV_LANES_FILE=str(missing))
    assert r.returncode == Exit.UNAVAILABLE, r.stdout + r.stderr
    line = one_line(r)
    assert str(missing) in line and "NEV_LANES_FILE" in line and "no lanes configured" not in line


@pytest.mark.parametrize("doc, field, near", [
    ({"jmup": "me@jump", "lanes": [{"ssh": "lane@10.0.0.11"}]}, "jmup", "jump"),
    ({"lanes": [{"ssh": "lane@10.0.0.11", "jmup": "me@jump"}]}, "lanes[0].jmup", "jump"),
    ({"lanes": [{"ssh": "lane@10.0.0.11", "rot": "/srv/lane"}]}, "lanes[0].rot", "root"),
    ({"lanes": [], "gti_url": "http://forge/x.git"}, "gti_url", "git_url"),
])
def test_the_lanes_file_refuses_an_unknown_key_naming_the_close_one(tmp_path, doc, field, near):
    path = tmp_path / "lanes.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as e:
        lanesfile.load(path)
    assert f"field {field} is not a known key (did you mean {near}?)" in str(e.value)
    r = nev(["lane", "list"], tmp_path, NEV_LANES_FILE=str(path))
    assert r.returncode == Exit.FAILED and f"did you mean {near}?" in one_line(r)


@pytest.mark.parametrize("env, said", [
    ({"NEV_LANE_MIN_FREE_GB": "abc"}, "NEV_LANE_MIN_FREE_GB='abc' is not a number"),
    ({"NEV_DAGU_LANE": "one"}, "NEV_DAGU_LANE='one' is not a whole number"),
    ({"NEV_SSH_KEY": "/tmp/nokey-{pid}"},
     "the file /tmp/nokey-{pid} that NEV_SSH_KEY names does not exist"),
    ({"NEV_KNOWN_HOSTS": "{tmp}"}, "{tmp}, which NEV_KNOWN_HOSTS names, is not a file"),
])
def test_nev_settings_checks_values_and_the_files_they_name(tmp_path, env, said):
    fill = {"pid": str(os.getpid()), "tmp": str(tmp_path)}
    env = {k: v.format(**fill) for k, v in env.items()}
    r = nev(["settings"], tmp_path, **env)
    assert r.returncode == Exit.FAILED, r.stderr
    assert said.format(**fill) in r.stderr
    r = nev(["settings", "--json"], tmp_path, **env)
    rows = {row["name"]: row for row in json.loads(r.stdout)["settings"]}
    assert said.format(**fill) in rows[next(iter(env))]["problem"]


def test_nev_settings_passes_good_values(tmp_path):
    key = tmp_path / "key"
    key.write_text("k")
    r = nev(["settings"], tmp_path, NEV_LANE_MIN_FREE_GB="2.5", NEV_SSH_KEY=str(key),
            NEV_DAGU_LANE="1")
    assert r.returncode == 0, r.stderr


def test_the_forge_not_answering_is_named_with_its_forward_and_exit_3(tmp_path):
    from tests.helpers.local_sshd import free_port

    repo = make_repo(tmp_path / "engine")
    url = f"http://127.0.0.1:{free_port()}/owner/engine.git"
    r = nev(["job", "poll", "--repo", str(repo)], tmp_path, NEV_FORGE_URL=url)
    assert r.returncode == Exit.UNAVAILABLE, r.stderr
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("nev: ")][-1]
    assert f"the forge at {url} does not answer: connection refused" in line
    assert "nev rig forward up" in line and "Couldn't connect" not in line
