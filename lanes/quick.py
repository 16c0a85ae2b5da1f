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

A record can start a program, so the file is trusted only as far as a file of the user's own:
it is read only when it is a regular file owned by the user, mode 600, in a folder no one else
can write, and no larger than MAX_BYTES; and an entry is started only when its argv is the
client nev would start itself (`argv_ok`: `ssh` as nev runs it, only the options
`lanes.base.openssh.client_options` gives, a jump host's ProxyCommand spelled exactly as nev
spells it, and the lane agent's start as its command). Anything else is no record, and the next
gate writes the file anew (mode 600, in a folder made the user's alone).

Only the stdlib's smallest modules load here (os, sys, json; subprocess and hashlib when a
record is there), and nothing here raises: a missing, torn, foreign or untrusted cache file is
no record.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lanes.gateargs import GateArgs

# The client started here, by its argv, until the gate takes it (`take`).
STARTED: dict[tuple[str, ...], object] = {}
CACHE_NAME = "gate-argv.json"
KEEP = 16    # records kept: one per (settings, folder, lane) a user gates from
MAX_BYTES = 256 * 1024   # KEEP records of a few KB each; a larger file is no record

# The ssh client nev starts (`lanes.base.openssh.OpenSsh.argv`) and the only options it gives
# (`client_options`): an option's fixed value, or None when its value is a path, a number or a
# list (checked by `_option_ok`). ProxyCommand (a jump host) is checked to be nev's own hop.
SSH = "ssh"
OPTIONS: dict[str, str | None] = {
    "BatchMode": "yes", "StrictHostKeyChecking": "yes", "UserKnownHostsFile": None,
    "GlobalKnownHostsFile": "/dev/null", "UpdateHostKeys": "no", "ConnectTimeout": None,
    "ServerAliveInterval": None, "ServerAliveCountMax": None, "ForwardAgent": "no",
    "ControlMaster": None, "ControlPath": None, "ControlPersist": None, "LogLevel": None,
    "KexAlgorithms": None, "IdentitiesOnly": "yes"}
NUMBERS = ("ConnectTimeout", "ServerAliveInterval", "ServerAliveCountMax", "ControlPersist")
# ERROR for the lane's client; INFO for the jump hop's, whose `open failed: <why>` says why the
# jump host could not reach the lane (lanes.base.sshfail); a kept connection or none
CHOICES = {"LogLevel": ("ERROR", "INFO"), "ControlMaster": ("no", "auto")}
# The lane agent's start (`lanes.agentpack.lane_command`) without its hash, as a sha256: a record's
# command must be it (tests/test_lane_quick.py keeps the two the same).
LANE_COMMAND_SHA256 = "c00cba9009f01ed1acf22dccef2bd34c7a035154918ac457a670cfcc1635b273"


def cache_file() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nev", CACHE_NAME)


def lane_key(lane_index: int | None) -> str:
    """The lane asked for as a record's key holds it: the empty string when none was."""
    return "" if lane_index is None else str(lane_index)


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


def _trusted_folder(folder: str) -> bool:
    """`folder` is the user's own and no one else can write it."""
    try:
        st = os.stat(folder)
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _load() -> dict:
    """The records, when the file is one the user alone could have written (see the module's
    docstring); {} otherwise."""
    import json
    import stat

    path = cache_file()
    if not _trusted_folder(os.path.dirname(path)):
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o600
                or st.st_size > MAX_BYTES):
            return {}
        raw = os.read(fd, MAX_BYTES + 1)
    except OSError:
        return {}
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _option_ok(opt: str) -> bool:
    key, _, value = opt.partition(" ")
    if key not in OPTIONS or not value:
        return False
    if key in CHOICES:
        return value in CHOICES[key]
    fixed = OPTIONS[key]
    if fixed is not None:
        return value == fixed
    if key in NUMBERS:
        return value.isdigit()
    if key == "ControlPath" and value != "none" and not value.startswith("/"):
        return False
    return "\n" not in value and "\0" not in value


def control_ok(argv: list[str]) -> bool:
    """The kept connection's socket an argv names (`-o "ControlPath P"`) is in a folder that is
    this user's alone (a real folder, mode 0700), as `lanes.base.ssh.control` checks before every
    use; an argv with none is fine."""
    import stat

    for i, a in enumerate(argv[:-1]):
        if (a == "-o" and argv[i + 1].startswith("ControlPath ")
                and argv[i + 1] != "ControlPath none"):
            try:
                st = os.lstat(os.path.dirname(argv[i + 1][len("ControlPath "):]))
            except OSError:
                return False
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                return False
    return True


def _options(argv: list[str], i: int, jump_ok: bool) -> int | None:
    """The index after the client options at `i` (`-F none`, then `-o "Key value"` and `-i KEY`),
    or None when one is not nev's."""
    if argv[i:i + 2] != ["-F", "none"]:
        return None
    i += 2
    while i + 1 < len(argv) and argv[i] in ("-o", "-i"):
        value = argv[i + 1]
        if argv[i] == "-i":
            if value.startswith("-") or "\n" in value:
                return None
        elif value.startswith("ProxyCommand "):
            if not (jump_ok and _proxy_ok(value[len("ProxyCommand "):])):
                return None
        elif not _option_ok(value):
            return None
        i += 2
    return i


def _dest_ok(port: str, dest: str) -> bool:
    user, at, host = dest.partition("@")
    return (port.isdigit() and bool(at and user and host) and not dest.startswith("-")
            and not any(c.isspace() or c in "'\"`$;|&<>()\\" for c in dest))


def _proxy_ok(value: str) -> bool:
    """The jump hop exactly as nev spells it (`ssh OPTIONS -W [%h]:%p -p PORT USER@JUMP`, each
    word shell-quoted and its % doubled): the shell that runs a ProxyCommand then sees only
    quoted words."""
    import shlex

    try:
        hop = [w.replace("%%", "%") for w in shlex.split(value)]
    except ValueError:
        return False
    spelled = " ".join(w if w == "[%h]:%p" else shlex.quote(w).replace("%", "%%") for w in hop)
    if spelled != value or hop[:1] != [SSH]:
        return False
    i = _options(hop, 1, jump_ok=False)
    return (i is not None and len(hop) == i + 5 and hop[i:i + 2] == ["-W", "[%h]:%p"] and hop[i + 2] == "-p"
            and _dest_ok(hop[i + 3], hop[i + 4]))


def _command_ok(command: str) -> bool:
    import hashlib

    start, _, digest = command.rpartition(" ")
    return (len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
            and hashlib.sha256(start.encode()).hexdigest() == LANE_COMMAND_SHA256)


def argv_ok(argv: object) -> bool:
    """`argv` is the gate's client as nev starts it (`lanes.base.openssh.OpenSsh.argv` of the lane
    agent's start): `ssh -T`, nev's options only, `-p PORT USER@HOST -- COMMAND`."""
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv) and argv[:2] == [SSH, "-T"]):
        return False
    i = _options(argv, 2, jump_ok=True)
    return (i is not None and len(argv) == i + 5 and argv[i] == "-p" and _dest_ok(argv[i + 1], argv[i + 2])
            and argv[i + 3] == "--" and _command_ok(argv[i + 4]))


def _entry(data: dict, key: str) -> list[str] | None:
    """The argv of record `key` when the record is well formed and its argv nev's client."""
    entry = data.get(key)
    if not isinstance(entry, dict):
        return None
    argv, files = entry.get("argv"), entry.get("files")
    if not argv_ok(argv) or not isinstance(files, list):
        return None
    for item in files:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            return None
    return argv  # type: ignore[return-value]


def lookup(lane: str) -> list[str] | None:
    """The recorded argv for `lane` and this environment, when every file it came from is
    unchanged."""
    data = _load()
    key = record_key(lane)
    argv = _entry(data, key)
    if argv is None:
        return None
    for item in data[key]["files"]:
        if signature(item[0]) != item[1]:
            return None
    return argv


def start(g: GateArgs) -> None:
    """Start the recorded client for the gate `g` (`lanes.gateargs`), when there is one."""
    if os.environ.get("NEV_ON_LANE") or os.environ.get("GENERA_ON_LANE"):
        return
    argv = lookup(lane_key(g.lane_index))
    if argv is None or not control_ok(argv):
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

    if not argv_ok(argv):
        return
    loaded = _load()
    # only records it would start
    data = {k: loaded[k] for k in loaded if _entry(loaded, k) is not None}
    key = record_key(lane)
    entry = {"argv": argv, "files": [[f, signature(f)] for f in files]}
    if data.get(key) == entry and data == loaded:
        return
    data.pop(key, None)
    data[key] = entry
    while len(data) > KEEP:
        data.pop(next(iter(data)))
    path = Path(cache_file())
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = path.parent.stat()
        if st.st_uid != os.geteuid():
            return            # a folder of someone else's: no record kept there
        if st.st_mode & 0o022:
            os.chmod(path.parent, 0o700)
        write_bytes_atomic(path, json.dumps(data).encode(), 0o600)
    except OSError:
        pass
