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

The ground truth it scores against is built outside the jail by nev's own oracle builder, on
the verify's request (`bench/oracle/truth_service.py`: a socket and a read-only staging folder
in the jail): the three browsers render it, or the store has it; the verify copies it into its
`corpus/`. Only the builder writes the store; a sandbox never does.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lanes.base import sandbox, settings
from lanes.base.errors import NevError
from lanes.base.mask import is_secret_name
from lanes.base.ui import info

#: the job's names a verify may read (JOB_STATE and JOB_LOGS are the runner's, not the verify's)
_JOB_NAMES = ("JOB_NAME", "JOB_STAGE", "JOB_WORKDIR")


#: settings that name a credential, a key or where keys live: never in a verify's environment
_KEYS = {
    "NEV_MODEL_API_KEY",
    "NEV_MODEL_KEY_FILE",
    "NEV_FORGE_TOKEN",
    "NEV_FORGE_TOKEN_FILE",
    "NEV_FORGE_USER",
    "NEV_SSH_KEY",
    "NEV_KNOWN_HOSTS",
    "NEV_GATEWAY_ADMIN_KEY_FILE",
    "NEV_GATEWAY_KEYS_FILE",
    "NEV_DAGU_PKI_DIR",
}
_USERINFO = re.compile(r"://[^/@\s]+@")


def verify_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What a verify's environment holds: every NEV_* setting but the credentials, the key and
    token files and any URL carrying a user or password; the job's names; LANG and TERM; and the
    variables an operator names in NEV_SANDBOX_ENV (never a secret-named one)."""
    secret = {s.name for s in settings.all_settings() if s.secret}
    out: dict[str, str] = {}
    for k, v in environ.items():
        if not k.startswith(("NEV_", "GENERA_")):
            continue
        c = "NEV_" + k.removeprefix("GENERA_") if k.startswith("GENERA_") else k
        if (
            c in _KEYS
            or c in secret
            or is_secret_name(c)
            or c.endswith(("_KEY_FILE", "_TOKEN_FILE"))
            or _USERINFO.search(v)
        ):
            continue
        out[k] = v
    extra = [
        n.strip()
        for n in (settings.get(settings.SANDBOX_ENV, environ) or "").split(",")
        if n.strip()
    ]
    for k in (*_JOB_NAMES, "LANG", "TERM", *extra):
        if environ.get(k) and not is_secret_name(k):
            out[k] = environ[k]
    return out


def nev_reads() -> list[Path]:
    """Where nev itself lives (its virtualenv, the interpreter under it, an editable checkout)."""
    here = Path(__file__).resolve().parents[1]  # the folder holding jobs/, lanes/, ...
    paths = {
        Path(sys.prefix).resolve(),
        Path(sys.base_prefix).resolve(),
        here,
        Path(sys.executable).resolve().parent,
    }
    return sorted(p for p in paths if not str(p).startswith("/usr/"))


def jail(
    workdir: Path,
    environ: Mapping[str, str],
    extra_read: Sequence[Path] = (),
    extra_env: Mapping[str, str] | None = None,
) -> sandbox.Jail:
    from bench.verify_needs import toolchain

    rust_reads, rust_path = toolchain()
    reads = [*nev_reads(), *rust_reads, *extra_read]
    path = [str(Path(sys.executable).parent), *rust_path]
    env = {**verify_env(environ), **(extra_env or {})}
    env["PATH"] = ":".join([*path, "/usr/local/bin", "/usr/bin", "/bin"])
    env["CARGO_HOME"] = "/tmp/cargo-home"
    work = workdir.resolve()
    writes = [work, *_folders(settings.SANDBOX_WRITE, environ)]
    reads += _folders(settings.SANDBOX_READ, environ)
    admin = worktree_admin(work)
    if admin is not None:  # a lane copy is a worktree of the lane's mirror: git needs its metadata
        own, common = admin
        reads.append(common)
        writes.append(own)
    return sandbox.Jail(
        read=tuple(dict.fromkeys(reads)),
        write=tuple(writes),
        processes=True,
        limits=sandbox.Limits(memory_bytes=None, cpu_s=None, scratch_bytes=1024 * sandbox.MiB),
        env=env,
        cwd=work,
        hide=(work / ".env",),
    )


def _folders(setting: settings.Setting, environ: Mapping[str, str]) -> list[Path]:
    raw = settings.get(setting, environ) or ""
    out = []
    for part in raw.split(":"):
        if not part.strip():
            continue
        p = Path(part).expanduser()
        if not p.is_absolute() or not p.is_dir():
            raise NevError(
                f"{setting.name}: {part!r} is not an absolute path of a folder; name existing folders, "
                "separated by ':'"
            )
        out.append(p.resolve())
    return out


def worktree_admin(work: Path) -> tuple[Path, Path] | None:
    """For a linked worktree (`.git` is a file naming its admin folder): that folder (index, HEAD:
    written by git) and the repository it belongs to (objects, refs: read)."""
    dotgit = work / ".git"
    if not dotgit.is_file():
        return None
    try:
        line = dotgit.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    own = (work / line.removeprefix("gitdir:").strip()).resolve()
    try:
        common = (own / (own / "commondir").read_text(encoding="utf-8").strip()).resolve()
    except OSError:
        common = own.parent.parent
    return (own, common) if own.is_dir() and common.is_dir() else None


def popen(
    argv: Sequence[str],
    workdir: Path,
    environ: Mapping[str, str],
    say: Callable[[str], None] = info,
    **kw: object,
) -> subprocess.Popen:
    """The verify started in its jail, with nev's ground-truth builder serving it from outside
    (`bench.oracle.truth_service`) until it ends."""
    from bench.oracle.truth import fresh_corpora
    from bench.oracle.truth_service import Service, judge_scores

    def build(names: list[str], count: int, folder: Path) -> None:
        fresh_corpora(count, environ=environ, say=say)(names, folder)

    # the judge outside the verify's jail too (`judge_scores`): the answers are the builder's
    svc = Service(build, say, score=judge_scores, workdir=workdir)
    try:
        proc = sandbox.popen(argv, jail(workdir, environ, (svc.dir,), svc.env), **kw)
    except BaseException:
        svc.close()
        raise

    def close_when_done() -> None:
        proc.wait()
        svc.close()

    threading.Thread(target=close_when_done, daemon=True).start()
    return proc
