"""The engine's minimum Rust: declared once in its workspace, readable by that cargo, checked the same
way by set-up and on a lane."""

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from lanes.base import rustversion
from lanes.base.rustversion import check_command, minimum, parse_version, problem

ENGINE = Path(__file__).resolve().parent.parent / "crates_bridge" / "engine"
# The first cargo that reads each lock file version (cargo's changelog: v3 in 1.47, v4 in 1.78).
LOCK_READABLE_SINCE = {3: (1, 47, 0), 4: (1, 78, 0)}


def test_the_engine_declares_its_minimum_once_and_every_member_inherits_it():
    need = minimum(ENGINE / "Cargo.toml")
    assert parse_version(need) >= (1, 74, 0)     # the probe's crates mode runs `cargo build --keep-going`
    for member in tomllib.loads((ENGINE / "Cargo.toml").read_text())["workspace"]["members"]:
        package = tomllib.loads((ENGINE / member / "Cargo.toml").read_text())["package"]
        assert package["rust-version"] == {"workspace": True}, member


def test_the_engines_lock_file_is_readable_by_the_minimum_cargo():
    lock = tomllib.loads((ENGINE / "Cargo.lock").read_text())
    assert LOCK_READABLE_SINCE[lock["version"]] <= parse_version(minimum(ENGINE / "Cargo.toml"))


@pytest.mark.parametrize("text,want", [("1.85", (1, 85, 0)), ("1.85.1", (1, 85, 1)), (" 2.0 ", (2, 0, 0))])
def test_versions_are_read_with_or_without_the_patch(text, want):
    assert parse_version(text) == want


@pytest.mark.parametrize("text", ["1", "1.85.0.1", "v1.85", "1.85-beta", ""])
def test_what_is_not_a_version_is_refused(text):
    with pytest.raises(ValueError, match="not a Rust version"):
        parse_version(text)


def test_the_minimum_comes_from_workspace_package_else_package(tmp_path):
    m = tmp_path / "Cargo.toml"
    m.write_text('[workspace.package]\nrust-version = "1.80"\n[package]\nname = "x"\nrust-version = "1.70"\n')
    assert minimum(m) == "1.80"
    m.write_text('[package]\nname = "x"\nrust-version = "1.70"\n')
    assert minimum(m) == "1.70"


@pytest.mark.parametrize("text,why", [
    ('[package]\nname = "x"\n', "no rust-version in [workspace.package] or [package]"),
    ('[workspace.package]\nrust-version = "latest"\n', "workspace.package.rust-version: `latest` is not a Rust version"),
    ('[package\n', "cannot read it"),
])
def test_a_manifest_without_a_usable_minimum_names_the_file_and_field(tmp_path, text, why):
    m = tmp_path / "Cargo.toml"
    m.write_text(text)
    with pytest.raises(ValueError) as e:
        minimum(m)
    assert str(e.value).startswith(f"{m}: ") and why in str(e.value)


@pytest.mark.parametrize("line", [
    "rustc 1.85.0 (4d91de4e4 2025-02-17) (built from a source tarball)",   # Debian 12's rustc-web
    "cargo 1.85.0 (d73d2caf9 2024-12-31)",
    "rustc 1.95.0 (59807616e 2026-04-14)",
    "rustc 1.86.0-nightly (a1b2c3d4e 2025-01-20)",
    "rustc 2.0.0\n",
])
def test_a_toolchain_at_or_above_the_minimum_has_no_problem(line):
    assert problem(line, "1.85") is None


@pytest.mark.parametrize("line,found", [
    ("rustc 1.63.0", "rustc 1.63.0"),                                       # Debian 12's rustc
    ("cargo 1.65.0", "cargo 1.65.0"),                                       # Debian 12's cargo 0.66
    ("rustc 1.84.1 (e71f9a9a9 2025-01-27)", "rustc 1.84.1"),
    ("rustc 1.9.0", "rustc 1.9.0"),                                         # not read as text: 9 < 85
])
def test_an_older_toolchain_is_one_line_naming_found_minimum_and_what_to_do(line, found):
    why = problem(line, "1.85")
    assert why is not None and "\n" not in why
    assert why.startswith(f"{found} is older than Rust 1.85, the engine's minimum: ")
    assert "rustup" in why and "apt-get install rustc-web cargo-web" in why


def test_a_missing_or_unreadable_toolchain_is_one_line_naming_the_minimum_and_rustup():
    missing = problem(None, "1.85", "cargo")
    assert missing is not None and missing.startswith("cargo is not installed; the engine needs Rust 1.85 or newer")
    assert "rustup" in missing
    odd = problem("error: rustup could not choose a version of rustc to run", "1.85")
    assert odd is not None and odd.startswith("cannot tell the version of `error: rustup could not choose")
    assert "1.85" in odd and "rustup update stable" in odd


def fake_toolchain(bin_dir: Path, rustc: str, cargo: str) -> dict[str, str]:
    bin_dir.mkdir()
    for name, line in (("rustc", rustc), ("cargo", cargo)):
        (bin_dir / name).write_text(f"#!/bin/sh\necho '{line}'\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_the_lane_check_runs_this_module_with_python3_and_fails_on_debians_rust(tmp_path):
    env = fake_toolchain(tmp_path / "bin", "rustc 1.63.0", "cargo 1.65.0")
    cp = subprocess.run(["sh", "-c", check_command("1.85")], env=env, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1
    assert cp.stderr.strip() == problem("rustc 1.63.0", "1.85")


def test_the_lane_check_passes_a_new_enough_toolchain_and_checks_cargo_too(tmp_path):
    env = fake_toolchain(tmp_path / "ok", "rustc 1.96.0 (ac68faa20 2026-05-25)", "cargo 1.96.0 (30a34c682 2026-05-25)")
    cp = subprocess.run(["sh", "-c", check_command("1.85")], env=env, capture_output=True, text=True, timeout=60)
    assert (cp.returncode, cp.stdout.strip()) == (0, "rustc 1.96.0, cargo 1.96.0 (the engine needs 1.85)")
    env = fake_toolchain(tmp_path / "oldcargo", "rustc 1.96.0", "cargo 1.65.0")
    cp = subprocess.run(["sh", "-c", check_command("1.85")], env=env, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1 and cp.stderr.startswith("cargo 1.65.0 is older than Rust 1.85")


def test_the_lane_check_refuses_a_minimum_that_is_not_a_version():
    with pytest.raises(ValueError, match="not a Rust version"):
        check_command("1.85; rm -rf /")


def test_main_reads_the_minimum_from_the_manifest_it_is_given(tmp_path, capsys):
    m = tmp_path / "Cargo.toml"
    m.write_text('[workspace.package]\nrust-version = "99.0"\n')
    assert rustversion.main(["--manifest", str(m)]) == 1
    assert "older than Rust 99.0" in capsys.readouterr().err


def test_provisioning_fails_the_rust_step_on_a_toolchain_older_than_the_minimum(monkeypatch):
    # The step as provisioning runs it (the script `nev lane provision` sends), here as root with
    # this machine's cargo (rustup's, or Debian's rustc-web on PATH) standing for the lane's: a
    # minimum above it fails the step with its reason; the engine's own minimum passes it unchanged.
    from lanes import provision
    monkeypatch.setattr(provision, "USER", "root")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    old = subprocess.run(["sh", "-c", provision.script([provision.rust_step("99.0")])],
                         capture_output=True, text=True, env=env)
    assert old.returncode == 1
    assert "failed: rust >= 99.0 (the engine's minimum)" in old.stdout
    assert "older than 99.0" in old.stderr
    ok = subprocess.run(["sh", "-c", provision.script([provision.rust_step(provision.engine_rust_min())])],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and f"unchanged: rust >= {provision.engine_rust_min()}" in ok.stdout, ok.stdout
