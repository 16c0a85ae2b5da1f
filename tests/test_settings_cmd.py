"""`nev settings [PATTERN]`: a header row, a filter, columns that long values do not break (the
whole value in --json), and settings help that says binary units."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from lanes.base import settings

ROOT = Path(__file__).resolve().parent.parent
LONG = "http://127.0.0.1:30090/git/" + "a-very-long-owner-name/" * 3 + "repository.git"


def nev_settings(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_"))}
    return subprocess.run(
        [sys.executable, "-m", "rig.cli", "settings", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**full, "PYTHONPATH": str(ROOT), **env},
        timeout=60,
    )


def _table(out: str) -> list[str]:
    return out.split("\n\n")[0].splitlines()


def test_settings_has_a_header_and_long_values_keep_the_columns(tmp_path):
    r = nev_settings(NEV_FORGE_URL=LONG)
    assert r.returncode == 0, r.stderr
    lines = _table(r.stdout)
    assert lines[0].split() == ["setting", "value", "source"]
    at = lines[0].index("source")
    assert all(
        ln[at:].split()[0] in ("default", "unset") or ln[at:].startswith("NEV_") for ln in lines[1:]
    ), [ln for ln in lines[1:] if ln[at - 2 : at] != "  "]
    forge = next(ln for ln in lines if ln.startswith("NEV_FORGE_URL "))
    assert LONG not in forge and forge[at:].strip() == "NEV_FORGE_URL" and "..." in forge
    whole = {
        x["name"]: x["value"]
        for x in json.loads(nev_settings("--json", NEV_FORGE_URL=LONG).stdout)["settings"]
    }
    assert whole["NEV_FORGE_URL"] == LONG


def test_settings_pattern_filters_by_name_glob_or_help():
    glob = _table(nev_settings("nev_box_*").stdout)[1:]
    assert {ln.split()[0] for ln in glob} == {
        s.name for s in settings.all_settings() if s.name.startswith("NEV_BOX_")
    }
    part = {ln.split()[0] for ln in _table(nev_settings("inventory_lane").stdout)[1:]}
    assert part == {"NEV_INVENTORY_LANE"}
    by_help = {x["name"] for x in json.loads(nev_settings("dagu", "--json").stdout)["settings"]}
    assert "NEV_DAGU_LANE" in by_help and "NEV_INVENTORY_LANE" not in by_help
    none = nev_settings("no-such-setting-anywhere")
    assert none.returncode == 1 and "no setting matches 'no-such-setting-anywhere'" in none.stderr


def test_settings_help_says_binary_units():
    """One unit style: GiB/MiB (the names *_GB, *_MB stay: they are what users set)."""
    for s in settings.all_settings():
        assert not re.search(r"\b(GB|MB|KB|kB)\b", s.help), (s.name, s.help)
        if s.name.endswith("_GB"):
            assert "GiB" in s.help, s.name
        if s.name.endswith("_MB"):
            assert "MiB" in s.help, s.name
