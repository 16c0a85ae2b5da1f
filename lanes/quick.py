"""The gate's SSH client started at once, before nev itself is imported: `nev lane run|on` looks
up the client's argv an earlier gate recorded for the same settings and starts it, so the
connection through the jump host is under way while Python loads the rest (tens of ms of a warm
gate's overhead: B2 in bench/perf/).

A recorded argv is used only while everything it came from is as it was: the environment's nev
settings, the working folder and the lane asked for (their sha256 names the record; no value is
kept), and the size and modification time of the files it was made from (the lanes file, every
module of the lane agent, the modules that build the argv). It is never trusted beyond that:
the gate computes its argv as before and takes this client only when the two are the same
(`lanes.base.openssh.OpenSsh.start_ahead`); one it does not take is stopped at once, its lane
agent sees its input end before a word of a request. A stale record costs one wasted login.

Only the stdlib's smallest modules load here (os, sys, json; subprocess and hashlib when a
record is there), and nothing here raises: a missing, torn or foreign cache file is no record.
"""

from __future__ import annotations

import os
import sys

# The client started here, by its argv, until the gate takes it (`take`).
STARTED: dict[tuple[str, ...], object] = {}
CACHE_NAME = "gate-argv.json"
KEEP = 16    # records kept: one per (settings, folder, lane) a user gates from


def cache_file() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nev", CACHE_NAME)


def lane_option(args: list[str]) -> str | None:
    """The `--lane` value among the gate's leading options (the empty string without one), or
    None when the options are not plain enough to tell (the gate then starts without a record)."""
    lane, i = "", 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a.startswith("--lane="):
            lane, i = a.partition("=")[2], i + 1
        elif a in ("--lane", "--pull"):
            if i + 1 >= len(args):
                return None
            lane = args[i + 1] if a == "--lane" else lane
            i += 2
        elif a.startswith("--pull=") or a == "--lane-only":
            i += 1
        else:
            return None
    return lane


def _secret_name(name: str) -> bool:
    return any(w in name for w in ("KEY", "TOKEN", "PASSWORD", "SECRET"))


def record_key(lane: str) -> str:
    """The sha256 (hex) of what the argv depends on besides files: the nev settings in the
    environment (secrets left out: none shapes the argv), HOME, the user, the working folder
    and the lane asked for."""
    import hashlib
    import json

    env = sorted((k, v) for k, v in os.environ.items()
                 if (k.startswith(("NEV_", "GENERA_", "XDG_")) and not _secret_name(k))
                 or k in ("HOME", "USER", "LOGNAME"))
    try:
        cwd = os.getcwd()
    except OSError:            # the working folder was removed: a key of its own, never a crash
        cwd = ""
    material = json.dumps([env, cwd, lane, sys.implementation.cache_tag])
    return hashlib.sha256(material.encode()).hexdigest()


def signature(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _load() -> dict:
    import json

    try:
        with open(cache_file(), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(lane: str) -> list[str] | None:
    """The recorded argv for `lane` and this environment, when every file it came from is unchanged."""
    entry = _load().get(record_key(lane))
    if not isinstance(entry, dict):
        return None
    argv, files = entry.get("argv"), entry.get("files")
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) and isinstance(files, list)):
        return None
    for item in files:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            return None
        if signature(item[0]) != item[1]:
            return None
    return argv


def start(args: list[str]) -> None:
    """Start the recorded client for the gate `args` (after `lane run|on`), when there is one."""
    if os.environ.get("NEV_ON_LANE") or os.environ.get("GENERA_ON_LANE"):
        return
    lane = lane_option(args)
    if lane is None:
        return
    argv = lookup(lane)
    if argv is None:
        return
    import atexit
    import subprocess

    try:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             bufsize=0, process_group=0)
    except OSError:
        return
    STARTED[tuple(argv)] = p
    atexit.register(stop_all)


def take(argv: list[str]) -> object | None:
    """The client started here with exactly `argv` (a subprocess.Popen), for the gate to adopt;
    any other started here is stopped now."""
    p = STARTED.pop(tuple(argv), None)
    stop_all()
    return p


def stop_all() -> None:
    """Every client started here that nobody took: its input closed, then ended."""
    import subprocess

    while STARTED:
        _, p = STARTED.popitem()
        assert isinstance(p, subprocess.Popen)
        for f in (p.stdin, p.stdout, p.stderr):
            if f is not None:
                f.close()
        p.terminate()
        try:
            p.wait(2.0)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def record(lane: str, argv: list[str], files: list[str]) -> None:
    """Keep `argv` for the next gate with the same settings, folder and `lane`, valid while
    `files` are unchanged (called once nev is loaded). Written by one rename; a cache that
    cannot be written is no loss."""
    import json
    from pathlib import Path

    from lanes.base.jsonfile import write_bytes_atomic  # nev is loaded by now (`lanes.ahead`)

    data = _load()
    key = record_key(lane)
    entry = {"argv": argv, "files": [[f, signature(f)] for f in files]}
    if data.get(key) == entry:
        return
    data.pop(key, None)
    data[key] = entry
    while len(data) > KEEP:
        data.pop(next(iter(data)))
    try:
        write_bytes_atomic(Path(cache_file()), json.dumps(data).encode(), 0o600)
    except OSError:
        pass
