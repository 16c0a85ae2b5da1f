"""`nev job submit`'s pure parts: the lane's environment read over SSH becomes the steps' PATH and
toolchain parameters; `nev job status` abbreviates commit ids; a batch's ledger name."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.batch_cmd import ledger_name
from dagu.layout import Layout
from jobs import status, submit
from jobs.manifest import parse
from lanes.base.errors import UsageError
from lanes.base.mask import mask

PROBE_OUT = "HOME=/home/lane\nPATH=/srv/tc/cargo-bin:/usr/local/bin:/usr/bin:/bin\nRUSTUP_HOME=/srv/tc/rustup\nCARGO_HOME=\n"


def test_lane_env_is_parsed_and_unset_names_are_empty():
    env = submit.parse_lane_env(PROBE_OUT + "NOISE=1\nnot a line\n")
    assert env == {"HOME": "/home/lane", "PATH": "/srv/tc/cargo-bin:/usr/local/bin:/usr/bin:/bin",
                   "RUSTUP_HOME": "/srv/tc/rustup", "CARGO_HOME": ""}


def test_step_path_puts_the_installed_nev_first_then_the_lanes_own_path_once():
    env = submit.parse_lane_env(PROBE_OUT.replace("/usr/bin:/bin", "/usr/bin:/bin:/home/lane/.local/bin"))
    assert submit.step_path(env).split(":") == ["/home/lane/.local/bin", "/srv/tc/cargo-bin", "/usr/local/bin",
                                                "/usr/bin", "/bin"]


def test_params_carry_the_lanes_path_and_toolchain_and_no_box_path(tmp_path):
    m = parse({"name": "demo", "base": "a" * 40, "spec": "specs/x.md",
               "stages": [{"name": "a", "kind": "command", "command": "true"}]}, str(tmp_path / "job.yaml"))
    lay = Layout(root="/home/lane/dagu")
    p = submit.params(m, "/home/lane/dagu/manifests/demo.yaml", "http://forge/x.git", "/home/lane", lay,
                      "/srv/share", "/home/lane/dagu/declared/folknet.abc.json", {}, submit.parse_lane_env(PROBE_OUT))
    # every step is the lane's installed nev; no copy of nev's sources is named
    assert p["NEV"] == "/home/lane/.local/bin/nev" and "SRC" not in p and "PY" not in p
    assert p["DECLARED"] == "/home/lane/dagu/declared/folknet.abc.json"
    assert p["LANE_PATH"].startswith("/home/lane/.local/bin:/srv/tc/cargo-bin:")
    assert (p["LANE_RUSTUP_HOME"], p["LANE_CARGO_HOME"]) == ("/srv/tc/rustup", "")
    assert p["INVENTORY"] == "/home/lane/.local/share/nev/inventory.json"


def test_job_status_abbreviates_commit_ids_to_12_so_masking_keeps_them():
    full = "4f1c2a9b8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"
    row = {"job": "j", "result": full, "stages": {"a": "passed"}, "nested": [{"commit": full}], "why": "x"}
    short = status.short_commits(row)
    assert short["result"] == full[:12] and short["nested"][0]["commit"] == full[:12]
    assert short["why"] == "x" and mask(short["result"]) == full[:12]
    assert mask(full) == full      # a commit id is no secret (lanes.base.mask keeps 40 and 64 hex digits)


def test_ledger_name_is_the_job_name_when_set_else_the_worktree_folder(tmp_path):
    assert ledger_name(tmp_path / "src", {}) == "src"
    assert ledger_name(tmp_path / "src", {"NEV_LEDGER_NAME": "abspos-width-1a2b"}) == "abspos-width-1a2b"
    with pytest.raises(UsageError, match="NEV_LEDGER_NAME"):
        ledger_name(Path("src"), {"NEV_LEDGER_NAME": "../x"})
