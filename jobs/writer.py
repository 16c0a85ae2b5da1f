"""A writer stage: a model session through a harness the operator declares, never one named here.

The harness is a declaration: `tracks.json -> specWatch.lanes.tool`, else `TRACKS_TOOL`
in the environment; a launch with neither is refused. The writer command
(`specWatch.lanes.launch`, default `$PI_TRACKS_HOME/bin/writer-exec.sh`, with
PI_TRACKS_HOME defaulting to `~/.local/share/pi-tracks`) prepares that harness and
starts the session: `<launch> --tool T --model M --brief-file F`.

- The brief is copied to the job's state folder (`writer/<stage>/brief.md`), outside
  the worktree, so the session never commits it.
- The gateway key reaches the session only in its environment (`NEV_MODEL_API_KEY`):
  from the environment Dagu passes through, else from `NEV_MODEL_KEY_FILE`, which must
  be mode 600. Never on a command line.
- The session keeps its events in `WRITER_SESSION_DIR` (`writer/<stage>/`), which the
  job's exit handler archives with the brief (the prompt).
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jobs import tracks as tracks_file
from jobs.manifest import Stage
from lanes.base import settings
from lanes.base.errors import ConfigError, NevError
from lanes.base.mask import register_secret

DEFAULT_LAUNCH = "$PI_TRACKS_HOME/bin/writer-exec.sh"


@dataclass(frozen=True)
class Declared:
    tool: str | None
    source: str | None   # "tracks.json" or "TRACKS_TOOL"
    launch: str


def declared(workdir: Path, environ: Mapping[str, str]) -> Declared:
    """The harness the job's tree (or the environment) declares; tool None when neither does."""
    tool: str | None = None
    source: str | None = None
    launch = DEFAULT_LAUNCH
    tf = workdir / "tracks.json"
    if tf.exists():
        t = tracks_file.load(tf)
        if t.spec_watch.lanes.tool:
            tool, source = t.spec_watch.lanes.tool, "tracks.json"
        if t.spec_watch.lanes.launch:
            launch = t.spec_watch.lanes.launch
    if tool is None and environ.get("TRACKS_TOOL", "").strip():
        tool, source = environ["TRACKS_TOOL"].strip(), "TRACKS_TOOL"
    return Declared(tool, source, launch)


def refusal(workdir: Path, environ: Mapping[str, str]) -> str | None:
    """Why a writer cannot be launched here, or None."""
    try:
        d = declared(workdir, environ)
    except ConfigError as e:
        return str(e)
    if d.tool is None:
        return ("no writer harness is declared: set tracks.json specWatch.lanes.tool "
                "(or TRACKS_TOOL in the lane's environment); a writer launch with neither is refused")
    return None


def lane_harness(worktree: Path, environ: Mapping[str, str]) -> tuple[str, str]:
    """(tool, writer command) for `nev lane writer start`, declared by the worktree's tracks.json
    (else TRACKS_TOOL here); NevError when neither declares a harness."""
    d = declared(worktree, environ)
    if d.tool is None:
        raise NevError(f"no writer harness is declared: set specWatch.lanes.tool in {worktree / 'tracks.json'} "
                       "(or TRACKS_TOOL); a writer launch with neither is refused")
    return d.tool, d.launch


def read_key_file(path: Path) -> str:
    try:
        st = path.stat()
    except OSError as e:
        raise NevError(f"{path}: cannot read the gateway key file ({e.strerror}); set NEV_MODEL_KEY_FILE") from None
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise NevError(f"{path}: the gateway key file is mode {stat.S_IMODE(st.st_mode):o}; "
                       f"make it 600 (chmod 600 {path})")
    key = path.read_text(encoding="utf-8").strip()
    if not key:
        raise NevError(f"{path}: the gateway key file is empty")
    register_secret(key)
    return key


def gateway_key(environ: Mapping[str, str]) -> str | None:
    key = settings.get(settings.MODEL_API_KEY, environ)
    if key:
        register_secret(key)
        return key
    kf = settings.get(settings.MODEL_KEY_FILE, environ)
    return read_key_file(Path(kf).expanduser()) if kf else None


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    brief: Path
    session: Path


def prepare(stage: Stage, workdir: Path, state_dir: Path, environ: Mapping[str, str]) -> Launch:
    """Everything a writer stage's launch needs (raises NevError when it is refused)."""
    why = refusal(workdir, environ)
    if why:
        raise NevError(why)
    d = declared(workdir, environ)
    assert d.tool is not None and stage.brief is not None and stage.model is not None
    src = (workdir / stage.brief).resolve()
    if not src.is_file():
        raise NevError(f"{stage.brief}: the brief of writer stage {stage.name} is not in the job's tree")
    session = state_dir / "writer" / stage.name
    session.mkdir(parents=True, exist_ok=True)
    brief = session / "brief.md"
    shutil.copyfile(src, brief)
    env = {"WRITER_SESSION_DIR": str(session), "NEV_WRITER_TOOL": d.tool, "NEV_WRITER_MODEL": stage.model}
    env.setdefault("PI_TRACKS_HOME", environ.get("PI_TRACKS_HOME",
                                                 str(Path("~/.local/share/pi-tracks").expanduser())))
    key = gateway_key(environ)
    if key:
        env["NEV_MODEL_API_KEY"] = key
    launch = os.path.expandvars(d.launch.replace("$PI_TRACKS_HOME", env["PI_TRACKS_HOME"]))
    argv = [*shlex.split(launch), "--tool", d.tool, "--model", stage.model, "--brief-file", str(brief)]
    return Launch(argv, env, brief, session)
