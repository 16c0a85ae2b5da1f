"""What a verify of an engine copy needs from outside its jail (jobs/verify_jail.py): the Rust
toolchain's folders to read (its ground truth: `bench/oracle/truth_service.py`)."""

from __future__ import annotations

from pathlib import Path

from crates_bridge.errors import BridgeError


def toolchain() -> tuple[list[Path], list[str]]:
    """(folders to read, folders to put on PATH) of the Rust toolchain; none when there is no Rust
    here (a verify that needs it then says so itself)."""
    from crates_bridge.workspace import sysroot, tool

    try:
        root = sysroot()
        return [root, Path(tool("cargo")).parent], [f"{root}/bin"]
    except BridgeError:
        return [], []
