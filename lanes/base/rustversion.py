"""The engine's minimum Rust (`rust-version` of its Cargo workspace) and whether a toolchain meets it.

Standard library only and importing nothing of ours, so that it runs where nev is not installed:
`scripts/setup` runs it with the system python3 before the virtualenv exists
(`python3 -m lanes.base.rustversion --manifest crates_bridge/engine/Cargo.toml`), and a lane
runs this very file's text with its own python3 (`check_command`).
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

#: What to do about a missing or old toolchain. Debian 12's own rustc (1.63) and cargo (0.66, i.e.
#: 1.65) cannot read the engine's lock file (version 4) nor build it; its rustc-web/cargo-web
#: packages (1.85 in bookworm, newer from bookworm-security) can.
HOW = ("install Rust {minimum} or newer with rustup (rustup update stable; https://rustup.rs) or, on "
       "Debian 12, apt-get install rustc-web cargo-web (Debian's rustc/cargo packages are 1.63: too old)")

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")
_LINE = re.compile(r"^(rustc|cargo) (\d+)\.(\d+)(?:\.(\d+))?\S*(?: |$)")


def parse_version(text: str) -> tuple[int, int, int]:
    """`1.85` or `1.85.0` as (1, 85, 0); ValueError otherwise."""
    m = _VERSION.match(text.strip())
    if not m:
        raise ValueError(f"`{text}` is not a Rust version (like 1.85 or 1.85.0)")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def minimum(manifest: Path) -> str:
    """The `rust-version` a Cargo.toml declares: `[workspace.package]`'s, else `[package]`'s.

    Raises ValueError naming the file and the field when it is missing or not a version.
    """
    try:
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{manifest}: cannot read it ({e})") from None
    for table, name in ((data.get("workspace", {}).get("package", {}), "workspace.package.rust-version"),
                        (data.get("package", {}), "package.rust-version")):
        if "rust-version" in table:
            value = table["rust-version"]
            try:
                parse_version(str(value))
            except ValueError as e:
                raise ValueError(f"{manifest}: {name}: {e}") from None
            return str(value)
    raise ValueError(f"{manifest}: no rust-version in [workspace.package] or [package]; declare the minimum Rust there")


def problem(version_line: str | None, minimum: str, program: str = "rustc") -> str | None:
    """None when a `rustc --version` or `cargo --version` line meets `minimum`, else one line
    naming the minimum, what was found and what to do.

    | version_line                         | minimum | result                                  |
    |--------------------------------------|---------|-----------------------------------------|
    | None (the program is not on PATH)    | 1.85    | "rustc is not installed; ..."           |
    | "rustc 1.63.0"                       | 1.85    | "rustc 1.63.0 is older than Rust 1.85 ..." |
    | "cargo 1.85.0 (d73d2caf9 2024-12-31)" | 1.85   | None                                    |
    | "rustc 1.86.0-nightly (...)"         | 1.85    | None (a pre-release counts as its version) |
    | "hello"                              | 1.85    | "... cannot tell the version of `hello` ..." |

    `program` names what was run when there is no line to read it from.
    """
    how = HOW.format(minimum=minimum)
    need = f"the engine needs Rust {minimum} or newer (rust-version of its Cargo workspace)"
    if version_line is None:
        return f"{program} is not installed; {need}: {how}"
    line = version_line.strip().splitlines()[0] if version_line.strip() else ""
    m = _LINE.match(line)
    if not m:
        return f"cannot tell the version of `{line[:80]}` ({program} --version); {need}: {how}"
    found = (int(m[2]), int(m[3]), int(m[4] or 0))
    if found >= parse_version(minimum):
        return None
    return f"{m[1]} {'.'.join(map(str, found))} is older than Rust {minimum}, the engine's minimum: {how}"


def version_line(program: str) -> str | None:
    """`program --version`'s first line, or None when it is not on PATH or does not run."""
    try:
        cp = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return cp.stdout.strip() or cp.stderr.strip() or f"{program} --version exited {cp.returncode}"


def check_command(minimum: str) -> str:
    """A POSIX shell command that runs this module with the host's python3 against `minimum`:
    exit 0 (printing the versions) when rustc and cargo on PATH meet it, else the problem on one
    stderr line and exit 1. For hosts where nev is not installed (a lane being provisioned)."""
    parse_version(minimum)
    source = Path(__file__).read_text(encoding="utf-8")
    return f"python3 -c {shlex.quote(source)} --minimum {shlex.quote(minimum)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rustversion", description="Check rustc and cargo on PATH against the engine's minimum Rust.")
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--manifest", type=Path, help="the engine workspace's Cargo.toml (its rust-version)")
    which.add_argument("--minimum", help="the minimum itself, like 1.85")
    a = ap.parse_args(argv)
    try:
        need = minimum(a.manifest) if a.manifest else a.minimum
        parse_version(need)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    lines = []
    for program in ("rustc", "cargo"):
        line = version_line(program)
        why = problem(line, need, program)
        if why:
            print(why, file=sys.stderr)
            return 1
        lines.append(str(line).split(" (")[0])
    print(f"{', '.join(lines)} (the engine needs {need})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
