"""A verify of a model-written track in the sandbox (docs/sandbox.md): a job's verify stage, the
landing's gate commands, `nev sandbox exec` and `nev lane run --sandbox`.

The track's code (its engine, its tests, its own `tracks.json` verify) is model-written, so it runs
in `lanes.base.sandbox` with:

- the copy it verifies written (its `target/`, its `corpus/`), nothing else: no home, no `~/.ssh`,
  no Dagu credentials, no other lane copy, no share (so no corpus store);
- nev itself, the Rust toolchain and the system (`/usr`: compilers, browsers) read-only;
- no network at all (its own loopback only), processes allowed (cargo, make, its tests);
- from the environment only the NEV_* settings that travel to a lane (`bench.onlane.forwarded_env`:
  never a secret, a key or token file, or a lane's own path) and the job's names; HOME is the
  jail's private /tmp;
- the copy's `.env` reads as empty: a verify gets nothing from `.env` (the gateway key and URL,
  the forge token live there; a verify neither calls models nor pushes).

The ground truth it scores against is built first, outside the jail, by nev's own oracle
builder (`ground_truth_first`): every corpus the copy's engine lists is rendered by the three
browsers (or copied from the store) into the copy's `corpus/`, where the verify's `nev floors
check` finds it up to date. Only the builder writes the store; a sandbox never does.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lanes.base import sandbox, settings
from lanes.base.errors import NevError
from lanes.base.ui import info

#: the job's names a verify may read (JOB_STATE and JOB_LOGS are the runner's, not the verify's)
_JOB_NAMES = ("JOB_NAME", "JOB_STAGE", "JOB_WORKDIR")


def verify_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What a verify's environment holds: the settings that travel to a lane, the job's names."""
    from bench.onlane import forwarded_env

    out = forwarded_env(environ)
    for k in (settings.ON_LANE.name, settings.ON_LANE.legacy, *_JOB_NAMES, "LANG", "TERM"):
        if environ.get(k):
            out[k] = environ[k]
    return out


def nev_reads() -> list[Path]:
    """Where nev itself lives (its virtualenv, the interpreter under it, an editable checkout)."""
    here = Path(__file__).resolve().parents[1]          # the folder holding jobs/, lanes/, ...
    paths = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), here,
             Path(sys.executable).resolve().parent}
    return sorted(p for p in paths if not str(p).startswith("/usr/"))


def jail(workdir: Path, environ: Mapping[str, str]) -> sandbox.Jail:
    from crates_bridge.errors import BridgeError
    from crates_bridge.workspace import sysroot, tool

    reads = list(nev_reads())
    path = [str(Path(sys.executable).parent)]
    try:
        root = sysroot()
        reads += [root, Path(tool("cargo")).parent]
        path.append(f"{root}/bin")
    except (NevError, BridgeError):
        pass   # no Rust here: a verify that needs it says so itself
    env = verify_env(environ)
    env["PATH"] = ":".join([*path, "/usr/local/bin", "/usr/bin", "/bin"])
    env["CARGO_HOME"] = "/tmp/cargo-home"
    work = workdir.resolve()
    return sandbox.Jail(read=tuple(dict.fromkeys(reads)), write=(work,), processes=True,
                        limits=sandbox.Limits(memory_bytes=None, cpu_s=None, scratch_bytes=1024 * sandbox.MiB),
                        env=env, cwd=work, hide=(work / ".env",))


def ground_truth_first(workdir: Path, environ: Mapping[str, str], say: Callable[[str], None] = info) -> None:
    """Build, outside the jail, every corpus the copy's engine lists (the three browsers, or the
    store), so a verify inside finds its ground truth. Nothing to do without an engine; a failure
    is said, not raised: a verify that needs the corpora then fails on its own, naming them."""
    from bench.floors import scoring_for
    from crates_bridge.errors import BridgeError
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


def popen(argv: Sequence[str], workdir: Path, environ: Mapping[str, str],
          say: Callable[[str], None] = info, **kw: object) -> subprocess.Popen:
    """The verify started in its jail, its ground truth built first."""
    ground_truth_first(workdir, environ, say)
    return sandbox.popen(argv, jail(workdir, environ), **kw)
