"""The one sandbox for model-written code: every candidate compile and run, and every verify of a
model-written track, starts here and nowhere else (docs/sandbox.md).

One call builds the whole jail, deny by default:

- **bubblewrap** (Debian's `bubblewrap`) for the namespaces: a new user, PID, IPC, UTS, cgroup and
  an empty network namespace (its own loopback, nothing listening, no rig address); a fresh `/proc`
  that shows only the jail's processes; a minimal `/dev`; the system's programs and libraries
  (`/usr`) read-only; a private `/tmp` of bounded size; no home: only the folders a `Jail` names,
  read-only or writable, at the same paths as outside; the environment cleared;
- **seccomp** filters built by libseccomp (`pyseccomp`), handed to bubblewrap as BPF: always the
  calls no build or test needs (ptrace, mount, kernel keyrings, bpf, ...); for a jail that may not
  start processes, fork/vfork/clone of a process too. A forbidden call is *trapped*: the process ends
  with SIGSYS (a runner that reports it names the call, `explain`);
- **rlimits** set before bubblewrap starts: address space (the memory cap), CPU seconds, file size,
  open files, no core files.

`check()` says what a host lacks to build it; `run()` refuses rather than run bare. A `Jail` with
`bare=True` (`--no-sandbox`, a trusted local run) runs the command without any of it and says so on
stderr; the tick, jobs, batches and landings never ask for it.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit

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

# Calls no compile, build or test needs, whatever the jail: trapped in every jail.
_NEVER = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "mount",
    "umount2",
    "pivot_root",
    "setns",
    "unshare",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "open_by_handle_at",
    "name_to_handle_at",
    "lookup_dcookie",
    "syslog",
    "settimeofday",
    "clock_settime",
    "adjtimex",
    "clock_adjtime",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "personality",
    "vhangup",
)
# A jail without processes: these start one. clone3 cannot be told from a thread's start (its flags
# are behind a pointer), so it fails with ENOSYS and libc falls back to clone, whose flags are read.
_PROCESS = ("fork", "vfork", "execveat")
CLONE_THREAD = 0x00010000
#: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NEW = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_PR_SET_PDEATHSIG = 1
# The runner's own lock after it read the corpus (crates_bridge/engine .../lockdown.rs): what a
# candidate's function has no business doing, each trapped so the verdict names it.
_RUNNER = (
    "open",
    "openat",
    "openat2",
    "creat",
    "stat",
    "lstat",
    "newfstatat",
    "statx",
    "access",
    "faccessat",
    "faccessat2",
    "readlink",
    "readlinkat",
    "getdents64",
    "statfs",
    "getxattr",
    "lgetxattr",
    "listxattr",
    "setxattr",
    "lsetxattr",
    "removexattr",
    "lremovexattr",
    "execve",
    "execveat",
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    "sendto",
    "sendmsg",
    "recvfrom",
    "recvmsg",
    "kill",
    "tkill",
    "unlink",
    "unlinkat",
    "rename",
    "renameat",
    "renameat2",
    "mkdir",
    "mkdirat",
    "rmdir",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "chmod",
    "fchmod",
    "fchmodat",
    "chown",
    "fchown",
    "fchownat",
    "lchown",
    "truncate",
    "ftruncate",
    "chdir",
    "fchdir",
    "chroot",
    "mknod",
    "mknodat",
    "utimensat",
    "inotify_init1",
    "fanotify_init",
    "memfd_create",
    "pidfd_open",
    "pidfd_send_signal",
    "pidfd_getfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "shmget",
    "shmat",
    "msgget",
    "semget",
    "mq_open",
    "setrlimit",
    "prlimit64",
    "setpriority",
    "sched_setaffinity",
    "sched_setscheduler",
)


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


# ---- the filters ----


@lru_cache(maxsize=8)
def filter_bpf(kind: str) -> bytes:
    """The BPF program of one filter: `base` (every jail), `noproc` (base, and no new process) or
    `runner` (the candidate runner's lock after it read the corpus)."""
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    names = list(_NEVER)
    # No namespace of its own inside the jail (bubblewrap's --disable-userns writes /proc/sys, which
    # an LXC guest mounts read-only): clone3's flags are behind a pointer, so it is ENOSYS (libc
    # falls back to clone) and clone with any CLONE_NEW* flag is trapped, as unshare and setns are.
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for flag in _CLONE_NEW:
        f.add_rule(sc.TRAP, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    if kind in ("noproc", "runner"):
        names += _PROCESS
        f.add_rule(sc.TRAP, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    if kind == "runner":
        names += _RUNNER
    for name in dict.fromkeys(names):
        try:
            f.add_rule(sc.TRAP, name)
        except (OSError, RuntimeError, ValueError):
            continue  # a call this architecture does not have
    with tempfile.TemporaryFile() as t:
        f.export_bpf(t)
        t.seek(0)
        return t.read()


def syscall_name(nr: int) -> str:
    try:
        import pyseccomp as sc

        return sc.resolve_syscall(sc.Arch.NATIVE, nr).decode()
    except (ImportError, OSError, ValueError, RuntimeError):
        return f"#{nr}"


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


# ---- a batch in one jail ----


@dataclass(frozen=True)
class Job:
    """One process of a batch run in one jail (`run_many`)."""

    argv: Sequence[str]
    stdin: str = ""
    #: bytes of its stdout kept (the rest is read, counted and dropped)
    keep: int = 1 << 20


PYTHON = "/usr/bin/python3"


def run_many(
    jobs: Sequence[Job], jail: Jail, *, parallel: int, timeout_each: float
) -> list[Outcome]:
    """Every job as a process of its own, `parallel` at a time, under one supervisor inside one jail
    (`lanes/base/jailrun.py`): a jail costs ~15 ms to build, a process in it ~1 ms. Each process
    keeps the jail's limits for itself; the jail may start processes (the supervisor does), so what
    a job runs must lock itself (the candidate runner's `--lockdown`) before any untrusted code."""
    from lanes.base import jailrun

    spec = [{"argv": list(j.argv), "stdin": j.stdin, "keep": j.keep} for j in jobs]
    if not jobs:
        return []
    if jail.bare or inside():
        got = jailrun.run_all(spec, parallel, timeout_each)
        return [_outcome(r) for r in got]
    check()
    supervisor = Path(jailrun.__file__).resolve()
    outer = Jail(
        read=(*jail.read, supervisor),
        write=jail.write,
        processes=True,
        limits=jail.limits,
        env=jail.env,
        cwd=jail.cwd,
        etc=jail.etc,
    )
    rounds = -(-len(jobs) // max(1, parallel))
    req = json.dumps({"jobs": spec, "parallel": parallel, "timeout": timeout_each}).encode()
    out = run(
        [PYTHON, "-I", "-S", str(supervisor)],
        outer,
        timeout=rounds * (timeout_each + 5) + 60,
        stdin=req,
    )
    results: dict[int, Outcome] = {}
    for line in out.stdout.splitlines():
        try:
            r = json.loads(line)
            results[int(r["index"])] = _outcome(r)
        except (ValueError, KeyError, TypeError):
            continue
    why = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
    lost = Outcome(
        out.returncode,
        "",
        f"the sandbox's supervisor ended before this job: {why}",
        timed_out=out.timed_out,
    )
    return [results.get(k, lost) for k in range(len(jobs))]


def _outcome(r: dict) -> Outcome:
    """One job's result as the supervisor reported it."""
    return Outcome(
        int(r["returncode"]),
        str(r["stdout"]),
        str(r["stderr"]),
        bool(r["timed_out"]),
        int(r.get("stdout_bytes", -1)),
        float(r["elapsed"]) if r.get("elapsed") is not None else None,
    )


# ---- verdicts ----

_FORBIDDEN = re.compile(r"forbidden system call (\d+)")
_OOM = re.compile(
    r"memory allocation of \d+ bytes failed|cannot allocate memory|out of memory", re.I
)


def explain(out: Outcome, limits: Limits, reported: bool) -> str | None:
    """Why a jailed process ended without its answer, in a few words; None when it gave it.

    | what happened                              | verdict                               |
    |--------------------------------------------|---------------------------------------|
    | the runner named a trapped call            | forbidden system call: socket         |
    | SIGSYS with no name (before the runner's lock) | forbidden system call             |
    | Rust's stack overflow message              | stack overflow                        |
    | an allocation failed                       | killed: memory cap 2 GiB              |
    | SIGXCPU / SIGKILL after the CPU limit      | killed: CPU time cap 60 s             |
    | the wall-clock limit                       | killed: timed out                     |
    | SIGABRT otherwise                          | aborted                               |
    | another signal                             | killed by signal N                    |
    | exit status without the answer             | exited N before reporting             |
    """
    if out.timed_out:
        return "killed: timed out"
    m = _FORBIDDEN.search(out.stderr)
    if m:
        return f"forbidden system call: {syscall_name(int(m.group(1)))}"
    if "has overflowed its stack" in out.stderr or "stack overflow" in out.stderr:
        return "stack overflow"
    if _OOM.search(out.stderr):
        return f"killed: memory cap {limits.memory_label()}"
    sig = out.returncode - 128 if out.returncode > 128 else None
    if sig == signal.SIGSYS:
        return "forbidden system call"
    if sig in (signal.SIGXCPU, signal.SIGKILL) and limits.cpu_s is not None:
        return f"killed: CPU time cap {limits.cpu_s} s"
    if sig == signal.SIGABRT:
        return "aborted"
    if sig is not None:
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    if reported:
        return None
    return f"exited {out.returncode} before reporting"


# ---- a gate's own jail (docs/sandbox.md, "A gate's jail") ----
#
# Every gate's command on a lane runs in a jail of its own, a person's own gate included: the lane
# agent (standard library only) runs `<bwrap> <gate_jail_args(...)> -- COMMAND`, the arguments made
# here on the development box from the paths the lane's hello reported. It is not the candidate's
# jail above: a gate keeps its network, its `.env` and its environment, and sees the system and
# its toolchains as they are; what it loses is every other gate's things and nev's own.


@dataclass(frozen=True)
class GateView:
    """A gate's paths on its lane, resolved there (`HelloAnswer`, `lanes.agent.layout`): the lane
    root, the copy (named `name`), the mirror, the gate's own scratch folder, the lane user's home
    and the NAS share (None when the lane has none)."""

    root: str
    name: str
    copy: str
    mirror: str
    tmp: str
    home: str
    shared: str | None = None
    #: the share's entries (relative to it) the gate writes (`lanes.agent.links.gate_writes`): its
    #: own results folders and ledger file, the npm cache (content-addressed: npm checks each
    #: entry's integrity as it reads it)
    share_writes: tuple[str, ...] = ()
    #: the socket of nev's store builder serving this gate from outside its jail
    #: (`lanes.agent.storeserve`); its folder (the corpora it leaves there too) read-only inside
    store_socket: str | None = None


#: The lane home's entries a gate sees, read-only: nev's installs and the lane's `nev` (a gate may
#: call nev, `--sandbox` does), the lane's environment files, and the Rust toolchain in the home
#: when it is there. Everything else of the home (`~/.ssh`, Dagu's home and keys, the services'
#: state, the agent's cache, writers' briefs) is an empty folder.
GATE_HOME_READ = (".local/share/nev", ".local/bin", ".lane-env", ".lane-shared-env",
                  ".lane-model-env", ".cargo", ".rustup")


def gate_jail_args(view: GateView) -> list[str]:
    """bubblewrap's options (no program, no `--`) for one gate's command: new user, PID, IPC, UTS
    and cgroup namespaces, so every process the command starts ends with it; capabilities
    dropped; the system read-only as it is; a fresh /proc showing only its processes, a minimal
    /dev with its own /dev/shm; the lane root an empty folder but for its own copy (written) and
    the mirror (read-only, for git in the copy: its objects and refs; the copy's own worktree
    entry, its index and HEAD, written; the agent never trusts it, `lanes.agent.git`); /tmp the
    gate's own folder in its payload (`<root>/.payload-<name>/tmp`, removed with it); the home
    empty but for GATE_HOME_READ (read-only); the share read-only but for its `share_writes`:
    every ledger, archive and corpus digest, and the store nev's builders write (`corpora/`,
    `ground-truth/`, `suites/`), which the gate asks nev's store builder outside its jail to fill
    (`store_socket`, its folder read-only, named by `NEV_STORE_SOCKET`).
    The network and the environment are the gate's own."""
    args = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm",
            # /tmp first: a lane root or home under /tmp (a test's) is mounted on top of it
            "--bind", view.tmp, "/tmp", "--tmpfs", view.home]
    for entry in GATE_HOME_READ:
        p = f"{view.home.rstrip('/')}/{entry}"
        args += ["--ro-bind-try", p, p]
    entry = f"{view.mirror}/worktrees/{view.name}"
    args += ["--tmpfs", view.root, "--bind", view.copy, view.copy,
             "--ro-bind", view.mirror, view.mirror, "--bind-try", entry, entry]
    if view.shared:
        args += ["--ro-bind", view.shared, view.shared]
        for entry in view.share_writes:
            p = f"{view.shared.rstrip('/')}/{entry}"
            args += ["--bind-try", p, p]
    if view.store_socket:
        folder = os.path.dirname(view.store_socket)
        args += ["--ro-bind-try", folder, folder, "--setenv", settings.STORE_SOCKET.name,
                 view.store_socket]
    args += ["--setenv", settings.IN_GATE.name, "1", "--chdir", view.copy]
    return args
