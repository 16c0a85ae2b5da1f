"""The one sandbox's jail (`lanes.base.sandbox`, docs/sandbox.md): what a jail is (`Jail`,
`Limits`, `Outcome`), whether this host can build one (`missing`, `check`, `inside`), and
building and running one (`bwrap_argv`, `run`, `popen`, `stop`)."""

from __future__ import annotations

import ctypes
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit
from lanes.base.sandboxfilters import filter_bpf

BWRAP = "bwrap"
GiB = 1 << 30
MiB = 1 << 20
#: A marker in the environment of everything started inside the sandbox (a nested nev knows it is
#: contained already and does not build a second jail around its own children).
INSIDE = "NEV_IN_SANDBOX"

# /etc entries a compiler, a shell, make or git reads; nothing else of /etc is visible.
_ETC = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "ssl",
    "gitconfig",
    "os-release",
    "debian_version",
    "mime.types",
    "fonts",
)
_PR_SET_PDEATHSIG = 1
PYTHON = "/usr/bin/python3"


class SandboxError(NevError):
    """The sandbox cannot be built on this host: nothing ran."""

    exit_code = Exit.NO_SANDBOX


@dataclass(frozen=True)
class Limits:
    """What one jailed process may use. None: no limit of that kind."""

    memory_bytes: int | None = 2 * GiB
    cpu_s: int | None = 60
    file_bytes: int | None = 1 * GiB
    open_files: int = 1024
    scratch_bytes: int = 256 * MiB

    @staticmethod
    def from_settings(environ: Mapping[str, str] | None = None, cpu_s: int | None = 60) -> Limits:
        mem = settings.get_int(settings.SANDBOX_MEMORY_MB, environ)
        scratch = settings.get_int(settings.SANDBOX_SCRATCH_MB, environ)
        if mem <= 0 or scratch <= 0:
            raise NevError(
                f"{settings.SANDBOX_MEMORY_MB.name} and {settings.SANDBOX_SCRATCH_MB.name} must be "
                f"positive whole numbers of MiB (got {mem} and {scratch})"
            )
        return Limits(memory_bytes=mem * MiB, cpu_s=cpu_s, scratch_bytes=scratch * MiB)

    def memory_label(self) -> str:
        if self.memory_bytes is None:
            return "none"
        if self.memory_bytes % GiB == 0:
            return f"{self.memory_bytes // GiB} GiB"
        return f"{self.memory_bytes // MiB} MiB"


def compile_budget_s(environ: Mapping[str, str] | None = None) -> float:
    """NEV_COMPILE_BUDGET_S: the longest one rustc call on candidates may take."""
    b = settings.get_float(settings.COMPILE_BUDGET_S, environ)
    if not b > 0:
        raise NevError(
            f"{settings.COMPILE_BUDGET_S.name} must be a number of seconds above 0, not {b}"
        )
    return b


def compile_memory_bytes(environ: Mapping[str, str] | None = None) -> int:
    """NEV_COMPILE_MEMORY_MB in bytes: the address-space cap of rustc and its linker."""
    mb = settings.get_int(settings.COMPILE_MEMORY_MB, environ)
    if mb <= 0:
        raise NevError(
            f"{settings.COMPILE_MEMORY_MB.name} must be a positive whole number of MiB, not {mb}"
        )
    return mb * MiB


@dataclass(frozen=True)
class Jail:
    """What one sandboxed command sees and may do. Paths are the same inside as outside."""

    read: tuple[Path, ...] = ()
    write: tuple[Path, ...] = ()
    #: may start processes (a compiler runs its linker; a verify runs cargo, make, its tests)
    processes: bool = False
    limits: Limits = field(default_factory=Limits)
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    #: a trusted local run without the sandbox (`--no-sandbox`): a warning, then the command bare
    bare: bool = False
    #: the entries of /etc it sees (a compiler, shell, make or git reads a few; a runner none)
    etc: tuple[str, ...] = _ETC
    #: files inside a visible folder that read as empty inside (a lane copy's `.env`)
    hide: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    #: the wall-clock limit ended it
    timed_out: bool = False
    #: bytes it wrote on stdout in all (`stdout` may keep fewer: `Job.keep`); -1 when not counted
    stdout_bytes: int = -1
    #: its wall time, measured from outside it (by `run_many`'s supervisor); None when not measured
    elapsed_s: float | None = None


# ---- what the host has ----


def missing() -> list[str]:
    """What this host lacks to build the sandbox, one phrase each (empty: it can)."""
    problems: list[str] = []
    if shutil.which(BWRAP) is None:
        problems.append("bubblewrap is not installed (apt-get install bubblewrap)")
    if not os.access(PYTHON, os.X_OK):
        problems.append(
            f"{PYTHON} is not installed (apt-get install python3): the jail's supervisor runs on it"
        )
    try:
        import pyseccomp  # noqa: F401

        pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    except (ImportError, OSError, RuntimeError) as e:
        problems.append(
            f"libseccomp cannot be used from Python ({e}; apt-get install libseccomp2, "
            "pip install pyseccomp)"
        )
    if problems:
        return problems
    probe = _probe()
    if probe:
        problems.append(probe)
    return problems


@lru_cache(maxsize=1)
def _probe() -> str | None:
    """Start `true` in a real jail once: user namespaces can be off (sysctl), or a container can
    forbid them."""
    try:
        out = run(["true"], Jail(limits=Limits(cpu_s=10)), timeout=30, _checked=False)
    except OSError as e:
        return f"bubblewrap did not start ({e})"
    if out.returncode != 0:
        why = (
            out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
        )
        return (
            f"bubblewrap cannot build a jail here ({why}); unprivileged user namespaces must be "
            "allowed (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)"
        )
    return None


def check() -> None:
    """Raise SandboxError naming what is missing; nothing else to do when the host has it all (or
    when this process is already inside a nev sandbox)."""
    if inside():
        return
    gone = missing()
    if gone:
        raise SandboxError(
            f"the sandbox for model-written code cannot be built on this host: {'; '.join(gone)}; "
            "nothing ran (`nev lane provision` checks a lane)"
        )


def inside() -> bool:
    """This process already runs in a nev sandbox (a verify's `nev floors check`): what it starts is
    contained by that jail, and a jail cannot be built inside one (no user namespaces there). Both
    the marker and a seccomp filter on this process are required, so a marker set by hand outside
    changes nothing."""
    if os.environ.get(INSIDE) != "1":
        return False
    try:
        status = Path("/proc/self/status").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    m = re.search(r"^Seccomp_filters:\s*(\d+)", status, re.M)
    return m is not None and int(m.group(1)) > 0


# ---- the jail ----


def _system_view(etc: Sequence[str]) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / top
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for name in etc:
        p = Path("/etc") / name
        if p.exists():
            args += ["--ro-bind", str(p), str(p)]
    return args


def _binds(jail: Jail) -> list[str]:
    args: list[str] = []
    for p in jail.read:
        if Path(p).exists():
            args += ["--ro-bind", str(p), str(p)]
    for p in jail.write:
        args += ["--bind", str(p), str(p)]
    for p in jail.hide:
        if Path(p).exists():
            args += ["--ro-bind", "/dev/null", str(p)]
    return args


def bwrap_argv(jail: Jail, argv: Sequence[str], seccomp_fd: int) -> list[str]:
    """bubblewrap's command line for `argv` in `jail` (the filter read from `seccomp_fd`)."""
    out = [
        BWRAP,
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
        *_system_view(jail.etc),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(jail.limits.scratch_bytes),
        "--tmpfs",
        "/tmp",
        *_binds(jail),
        "--clearenv",
    ]
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        **dict(jail.env),
        INSIDE: "1",
    }
    for k, v in env.items():
        out += ["--setenv", k, v]
    if jail.cwd is not None:
        out += ["--chdir", str(jail.cwd)]
    out += ["--add-seccomp-fd", str(seccomp_fd), "--", *argv]
    return out


def _limits_in_child(limits: Limits) -> None:
    """Runs in the child before bubblewrap starts: its limits pass to everything in the jail; it
    dies with the process that started it (bubblewrap's --die-with-parent then ends the jail)."""
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.memory_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    if limits.cpu_s is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
    if limits.file_bytes is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))


def warn_bare(what: str) -> None:
    print(
        f"nev: warning: {what} runs WITHOUT the sandbox (--no-sandbox): it can read your keys, reach "
        "the network and write anything you can",
        file=sys.stderr,
    )


def run(
    argv: Sequence[str],
    jail: Jail,
    *,
    timeout: float,
    stdin: bytes | None = None,
    _checked: bool = True,
) -> Outcome:
    """Run `argv` in `jail`, waiting at most `timeout` seconds (then the whole jail is killed)."""
    if jail.bare or inside():
        return _run_bare(argv, jail, timeout, stdin)
    if _checked:
        check()
    bpf = filter_bpf("noproc" if not jail.processes else "base")
    r, w = os.pipe()  # a filter is a few hundred bytes: far below a pipe's buffer
    try:
        os.write(w, bpf)
    finally:
        os.close(w)
    full = bwrap_argv(jail, argv, r)
    lim = jail.limits
    try:
        proc = subprocess.Popen(
            full,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(r,),
            preexec_fn=lambda: _limits_in_child(lim),
        )
    finally:
        os.close(r)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
        return Outcome(
            _status(proc.returncode), out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        )
    except subprocess.TimeoutExpired:
        stop(proc)
        out, err = proc.communicate()
        return Outcome(
            _status(proc.returncode),
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            timed_out=True,
        )


def popen(argv: Sequence[str], jail: Jail, **kw: object) -> subprocess.Popen:
    """`argv` started in `jail` (a long command whose output is streamed: a verify stage). The
    caller waits; `stop` (killing the process group) ends the whole jail. `warn=False`: no warning
    for a bare jail (its caller said it once)."""
    warn = bool(kw.pop("warn", True))
    if jail.bare or inside():
        if jail.bare and warn:
            warn_bare("this command")
        return subprocess.Popen(
            list(argv), cwd=jail.cwd, env=dict(jail.env) or None, start_new_session=True, **kw
        )  # type: ignore[call-overload]
    check()
    r, w = os.pipe()
    os.write(w, filter_bpf("noproc" if not jail.processes else "base"))
    os.close(w)
    lim = jail.limits
    try:
        return subprocess.Popen(
            bwrap_argv(jail, argv, r),
            pass_fds=(r,),  # type: ignore[call-overload]
            preexec_fn=lambda: _limits_in_child(lim),
            **kw,
        )
    finally:
        os.close(r)


def stop(proc: subprocess.Popen) -> None:
    """End a process `popen` started, and with it its whole jail (every process in it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _status(code: int) -> int:
    """A negative code (killed by a signal) as the shell writes it, 128 + the signal, the way bubblewrap
    reports its child's."""
    return 128 - code if code < 0 else code


def _run_bare(argv: Sequence[str], jail: Jail, timeout: float, stdin: bytes | None) -> Outcome:
    env = {**os.environ, **dict(jail.env)}
    try:
        cp = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            timeout=timeout,
            cwd=jail.cwd,
            env=env,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired as e:
        return Outcome(
            137,
            (e.stdout or b"").decode("utf-8", "replace"),
            (e.stderr or b"").decode("utf-8", "replace"),
            timed_out=True,
        )
    return Outcome(
        _status(cp.returncode),
        cp.stdout.decode("utf-8", "replace"),
        cp.stderr.decode("utf-8", "replace"),
    )
