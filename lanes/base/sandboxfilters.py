"""The seccomp filters of the one sandbox (`lanes.base.sandbox`, docs/sandbox.md): what every
jail traps, what a jail without processes traps besides, and the candidate runner's own lock;
built by libseccomp (`pyseccomp`) as BPF for bubblewrap."""

from __future__ import annotations

import errno
import tempfile
from functools import lru_cache

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
