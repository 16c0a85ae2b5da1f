"""What a verify of an engine copy needs from outside its jail (jobs/verify_jail.py): the Rust
toolchain's folders to read, and its ground truth built first by nev's own oracle builder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from crates_bridge.errors import BridgeError
from lanes.base.errors import NevError
from lanes.base.ui import info


def toolchain() -> tuple[list[Path], list[str]]:
    """(folders to read, folders to put on PATH) of the Rust toolchain; none when there is no Rust
    here (a verify that needs it then says so itself)."""
    from crates_bridge.workspace import sysroot, tool

    try:
        root = sysroot()
        return [root, Path(tool("cargo")).parent], [f"{root}/bin"]
    except BridgeError:
        return [], []


def ground_truth_first(workdir: Path, environ: Mapping[str, str], say: Callable[[str], None] = info) -> None:
    """Build, outside the jail, every corpus the copy's engine lists (the three browsers, or the
    store), so a verify inside finds its ground truth. Nothing to do without an engine; a failure
    is said, not raised: a verify that needs the corpora then fails on its own, naming them."""
    from bench.floors import scoring_for
    from crates_bridge.runner import list_caches
    from crates_bridge.workspace import Workspace

    req = scoring_for(workdir, environ)
    if not (req.engine / "Cargo.toml").is_file():
        return
    try:
        names = list_caches(Workspace(req.engine))
        if not names:
            return
        from bench.oracle.truth import fresh_corpora

        fresh_corpora(environ=environ, say=say)(names, req.corpus_root)
    except (NevError, BridgeError) as e:
        say(f"sandbox: the ground truth could not be built before the verify: {e}")
