"""The `nev` command: help everywhere, version, one-line errors with documented codes."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from rig.cli import cli, main

GROUPS = ["lane", "job", "land", "dagu", "rig", "box", "batch", "oracle", "floors", "scores", "ledger", "settings", "sandbox"]
GROUPS += ["provenance", "config", "doctor", "completion"]


def nev(*args, env=None):
    return subprocess.run([sys.executable, "-m", "rig.cli", *args], capture_output=True, text=True, env=env)


def test_version():
    r = nev("--version")
    assert r.returncode == 0 and "nev, version 0.1.0" in r.stdout


@pytest.mark.parametrize("group", GROUPS)
def test_help_for_every_group(group):
    r = CliRunner().invoke(cli, [group, "--help"])
    assert r.exit_code == 0, r.output
    assert "Usage:" in r.output


def test_every_subcommand_has_help():
    import click
    seen = 0
    def walk(cmd, path):
        nonlocal seen
        r = CliRunner().invoke(cli, [*path, "--help"])
        assert r.exit_code == 0, (path, r.output)
        seen += 1
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*path, name])
    walk(cli, [])
    assert seen > 50


def test_every_group_is_listed_and_found_though_imported_only_when_named():
    import click

    ctx = click.Context(cli)
    assert sorted(GROUPS) == cli.list_commands(ctx)
    for name in GROUPS:
        assert cli.get_command(ctx, name).name == name
    r = subprocess.run([sys.executable, "-c", "import sys\nfrom rig.cli import main\nmain(['lane', '--help'])\n"
                        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('bench', 'jobs', 'dagu')))"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "Usage:" in r.stdout, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_the_oracle_group_holds_the_suite_commands_of_jobs():
    import click

    oracle = cli.get_command(click.Context(cli), "oracle")
    ctx = click.Context(oracle)
    assert {"suites", "suite"} <= set(oracle.list_commands(ctx))
    assert oracle.get_command(ctx, "suites").list_commands(ctx) == ["fetch"]
    assert oracle.get_command(ctx, "suite").list_commands(ctx) == ["run"]


def test_usage_error_exit_2(capsys):
    assert main(["lane", "frobnicate"]) == 2


def test_malformed_settings_file_is_one_line_exit_1(tmp_path, monkeypatch):
    bad = tmp_path / "lane.local.json"
    bad.write_text('{"lanes": [{"ssh": 3}]}')
    env = {**__import__("os").environ, "NEV_LANES_FILE": str(bad)}
    r = nev("settings", "--json", env=env)
    assert r.returncode == 1
    files = json.loads(r.stdout)["files"]
    lanes = [f for f in files if f["what"] == "lanes"][0]
    assert lanes["status"] == "error" and "lanes[0].ssh" in lanes["error"]


def test_settings_masks_secrets():
    import os
    env = {**os.environ, "NEV_MODEL_API_KEY": "sk-supersecret-0001", "GENERA_FORGE_TOKEN": "forgetok-42"}
    r = nev("settings", env=env)
    assert "sk-supersecret-0001" not in r.stdout and "forgetok-42" not in r.stdout
    assert "GENERA_FORGE_TOKEN (legacy)" in r.stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_settings_masks_credentials_inside_urls(as_json):
    import os
    env = {**os.environ, "NEV_FORGE_URL": "http://nev:forgetok-77x@127.0.0.1:3000/o/r.git",
           "NEV_LANE_GIT_URL": "https://bob:lanepass-9@forge.rig/o/r.git",
           "NEV_MODEL_URL": "http://admin:modelpw-5@127.0.0.1:4000"}
    r = nev("settings", *(["--json"] if as_json else []), env=env)
    for secret in ("forgetok-77x", "lanepass-9", "modelpw-5", "nev:", "bob:", "admin:"):
        assert secret not in r.stdout, secret
    assert "127.0.0.1:3000/o/r.git" in r.stdout and "forge.rig/o/r.git" in r.stdout
    if as_json:
        rows = {row["name"]: row["value"] for row in json.loads(r.stdout)["settings"]}
        assert rows["NEV_FORGE_URL"] == "http://***@127.0.0.1:3000/o/r.git"
