"""The crontab: one tagged line per owner, edited as a pure table and installed with `crontab`.

A line belongs to whoever wrote the tag at its end (`# nev-job-poll /repo`,
`# nev-dagu`, `# nev-rig-forward /rig.json`); installing replaces only that line,
removing drops only that line, and every other line is kept as it was.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path

from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.mask import is_secret_name


def table(existing: str, tag: str, line: str | None) -> str:
    """The crontab with the line ending in `tag` replaced by `line`, or removed when None (pure)."""
    kept = [ln for ln in existing.splitlines() if not ln.rstrip().endswith(tag)]
    if line:
        if not line.endswith(tag):
            raise ValueError(f"a crontab line must end with its tag {tag!r}")
        kept.append(line)
    return "\n".join(kept) + ("\n" if kept else "")


def carried_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What a scheduled command takes from this shell: PATH, HOME and every non-secret NEV_* setting."""
    declared = {s.name: s.secret for s in settings.all_settings()}

    def wanted(k: str) -> bool:
        # A declared setting is secret only when the registry says so (NEV_SSH_KEY is a key's path,
        # which the tick needs to reach a lane); an undeclared name is judged by its look.
        secret = declared[k] if k in declared else is_secret_name(k) and not k.endswith("_FILE")
        return (k.startswith("NEV_") and not secret) or k in ("PATH", "HOME")

    return {k: v for k, v in environ.items() if wanted(k)}


def env_prefix(env: Mapping[str, str]) -> str:
    """`env K=V ...` for a crontab line, sorted and quoted."""
    return "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))


def line(schedule: str, cwd: Path, env: Mapping[str, str], argv: list[str], log: Path, tag: str) -> str:
    """`SCHEDULE mkdir -p LOGDIR && cd CWD && env K=V ... ARGV >> LOG 2>&1 TAG`; cron's `%` escaped
    (a newline there)."""
    cmd = (f"mkdir -p {shlex.quote(str(log.parent))} && cd {shlex.quote(str(cwd))} && {env_prefix(env)} "
           f"{shlex.join(argv)} "
           f">> {shlex.quote(str(log))} 2>&1")
    return f"{schedule} {cmd.replace('%', chr(92) + '%')} {tag}"


def read() -> str:
    """This user's crontab ('' when there is none)."""
    cp = _crontab(["-l"])
    return cp.stdout if cp.returncode == 0 else ""


def install(tag: str, line: str | None) -> bool:
    """Put `line` (or no line) under `tag` into this user's crontab; False when it already was so."""
    existing = read()
    new = table(existing, tag, line)
    if new == existing:
        return False
    cp = _crontab(["-"], new)
    if cp.returncode != 0:
        raise NevError(f"crontab refused the table: {cp.stderr.strip() or f'exit {cp.returncode}'}")
    return True


def _crontab(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["crontab", *args], input=stdin, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NevError("no crontab command here; install cron (Debian package `cron`)") from None
