"""Archived job logs: every run's logs and state, copied to the share with secrets and addresses replaced.

`archive/job-logs/<job>/<run id>/` on the share receives the stage logs, `state.json`,
`events.jsonl`, each writer session's prompt (brief) and events, and the run's Dagu step
logs; `archive.txt` lists every file and its line count. Every line passes through
`scrub`: `lanes.base.mask` (known secret values, credentials in URLs, Authorization headers,
KEY/TOKEN/... assignments, token-shaped strings), then every URL, every IP address and
every user@host. Once the copy is complete the marker `archived-<run id>` is written next
to the run folder; the cleanup step removes the job folder only when it is there.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from lanes.base.mask import mask

URL_MARK = "<url>"
ADDRESS_MARK = "<address>"

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,15}://[^\s'\"<>()\[\]{}]+")
_IP_CANDIDATE = re.compile(r"(?<![\w.:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?:%\w+)?(?![\w.:])"
                           r"|(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")
_USER_AT_HOST = re.compile(r"\b[A-Za-z0-9._-]{1,64}@[A-Za-z0-9.-]+\.?[A-Za-z0-9-]*(?::\d+)?\b")


def _ip(m: re.Match[str]) -> str:
    text = m.group(0)
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return text  # a time like 10:42:01, a version like 1.30.2.1 that is no address
    return ADDRESS_MARK


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with secrets, URLs, IP addresses and user@host replaced (pure but for lanes.base.mask's known values)."""
    text = mask(text, secrets)
    text = _URL.sub(URL_MARK, text)
    text = _USER_AT_HOST.sub(ADDRESS_MARK, text)
    text = _IP_CANDIDATE.sub(_ip, text)
    return text


def read_secret_files(paths: Iterable[str | None]) -> list[str]:
    """Values of the key/token files this lane holds, so they are replaced whatever their shape."""
    out = []
    for p in paths:
        if not p:
            continue
        try:
            v = Path(p).expanduser().read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if v:
            out.append(v)
    return out


def _copy_scrubbed(src: Path, dest: Path, secrets: list[str]) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    text = src.read_bytes().decode("utf-8", errors="replace")
    tmp = dest.with_name("." + dest.name + ".tmp")
    tmp.write_text("".join(scrub(line, secrets) for line in text.splitlines(keepends=True)), encoding="utf-8")
    os.replace(tmp, dest)


def sources(job_dir: Path, dagu_step_logs: Path | None) -> list[tuple[Path, str]]:
    """(file, name in the archive) for every file a run keeps."""
    state = job_dir / "state"
    out: list[tuple[Path, str]] = []
    for name in ("state.json", "events.jsonl"):
        if (state / name).is_file():
            out.append((state / name, name))
    for log in sorted((state / "logs").glob("*.log")):
        out.append((log, f"logs/{log.name}"))
    for session in sorted((state / "writer").glob("*")):
        for f in sorted(session.rglob("*")):
            if f.is_file():
                out.append((f, f"writer/{session.name}/{f.relative_to(session)}"))
    if dagu_step_logs is not None and dagu_step_logs.is_dir():
        for f in sorted(dagu_step_logs.iterdir()):
            if f.is_file() and f.suffix in (".out", ".err", ".log"):
                out.append((f, f"dagu/{f.name}"))
    return out


def marker(share: Path, job: str, run_id: str) -> Path:
    return share / "archive" / "job-logs" / job / f"archived-{run_id}"


def archive(job: str, run_id: str, job_dir: Path, share: Path, dagu_step_logs: Path | None,
            secrets: list[str]) -> Path:
    """Copy (scrubbed) and list everything the run keeps; write the marker last. Returns the run folder."""
    dest = share / "archive" / "job-logs" / job / run_id
    dest.mkdir(parents=True, exist_ok=True)
    for src, name in sources(job_dir, dagu_step_logs):
        _copy_scrubbed(src, dest / name, secrets)
    listing = []
    for f in sorted(p for p in dest.rglob("*") if p.is_file() and p.name != "archive.txt"):
        with f.open("rb") as fh:
            lines = sum(1 for _ in fh)
        listing.append(f"{f.relative_to(dest)} {lines}")
    tmp = dest / ".archive.txt.tmp"
    tmp.write_text("\n".join(listing) + "\n", encoding="utf-8")
    os.replace(tmp, dest / "archive.txt")
    m = marker(share, job, run_id)
    m.write_text(f"{run_id}\n", encoding="utf-8")
    return dest


def remove_job_dir(job_dir: Path) -> None:
    shutil.rmtree(job_dir)
