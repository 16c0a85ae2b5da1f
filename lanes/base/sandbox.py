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

The sandbox is built in parts, each importable from here (`from lanes.base import sandbox`):
the jail and the host's check (`lanes.base.sandboxjail`), the seccomp filters
(`lanes.base.sandboxfilters`), a batch in one jail and its verdicts (`lanes.base.sandboxbatch`),
and a gate's own jail on a lane (`lanes.base.gatejail`).
"""

from __future__ import annotations

from lanes.base.gatejail import GATE_HOME_READ, GateView, gate_jail_args
from lanes.base.sandboxbatch import Job, explain, run_many
from lanes.base.sandboxfilters import filter_bpf, syscall_name
from lanes.base.sandboxjail import (
    BWRAP,
    INSIDE,
    PYTHON,
    GiB,
    Jail,
    Limits,
    MiB,
    Outcome,
    SandboxError,
    bwrap_argv,
    check,
    compile_budget_s,
    compile_memory_bytes,
    inside,
    missing,
    popen,
    run,
    stop,
    warn_bare,
)

__all__ = [
    "BWRAP", "GATE_HOME_READ", "INSIDE", "PYTHON", "GateView", "GiB", "Jail", "Job", "Limits",
    "MiB", "Outcome", "SandboxError", "bwrap_argv", "check", "compile_budget_s",
    "compile_memory_bytes", "explain", "filter_bpf", "gate_jail_args", "inside", "missing",
    "popen", "run", "run_many", "stop", "syscall_name", "warn_bare",
]
