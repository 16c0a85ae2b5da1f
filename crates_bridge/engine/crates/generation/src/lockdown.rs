//! The runner's own lock, taken after it has read everything it needs (the inputs) and before it
//! calls any candidate: the seccomp filter the sandbox wrote next to the probe (a BPF program
//! built by libseccomp on the Python side, `lanes/base/sandbox.py`) is loaded into this process,
//! and a system call it forbids is reported by number on stderr before the process ends.
//!
//! Candidate code cannot run before this point: the probe compiles every candidate module under
//! `#[forbid(unsafe_code)]`, so no candidate can place code in `.init_array`, export a symbol or
//! install a global allocator. Standard library only: the few libc functions are declared here.

use std::path::Path;

/// Exit status after a forbidden system call (the line on stderr names it).
pub const EXIT_FORBIDDEN: i32 = 5;

const SIGSYS: i32 = 31;
const SA_SIGINFO: i32 = 4;
const PR_SET_NO_NEW_PRIVS: i32 = 38;
const PR_SET_SECCOMP: i32 = 22;
const SECCOMP_MODE_FILTER: u64 = 2;

#[repr(C)]
struct SigAction {
    handler: usize,
    mask: [u64; 16],
    flags: i32,
    restorer: usize,
}

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const u8,
}

extern "C" {
    fn sigaction(sig: i32, act: *const SigAction, old: *mut SigAction) -> i32;
    fn prctl(option: i32, ...) -> i32;
    fn write(fd: i32, buf: *const u8, n: usize) -> isize;
    fn _exit(code: i32) -> !;
}

/// The SIGSYS handler: `candidates: forbidden system call N` on stderr, then exit at once. It
/// allocates nothing (a signal handler may not).
extern "C" fn on_sigsys(_sig: i32, info: *const u8, _ctx: *const u8) {
    // siginfo_t for SIGSYS (64-bit Linux): si_signo, si_errno, si_code, padding, then
    // _sigsys { void *_call_addr; int _syscall; unsigned _arch; } at offset 16.
    let nr = unsafe { *(info.add(24) as *const i32) };
    let mut buf = [0u8; 64];
    let head = b"candidates: forbidden system call ";
    buf[..head.len()].copy_from_slice(head);
    let mut n = head.len();
    let mut digits = [0u8; 12];
    let mut d = 0;
    let mut v = nr.unsigned_abs();
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        buf[n] = digits[d];
        n += 1;
    }
    buf[n] = b'\n';
    n += 1;
    unsafe {
        write(2, buf.as_ptr(), n);
        _exit(EXIT_FORBIDDEN);
    }
}

/// Report forbidden system calls by number (the sandbox's filters trap them).
pub fn report_forbidden_calls() {
    let act = SigAction { handler: on_sigsys as *const () as usize, mask: [0; 16], flags: SA_SIGINFO, restorer: 0 };
    unsafe {
        sigaction(SIGSYS, &act, std::ptr::null_mut());
    }
}

/// Load the BPF program in `path` into this process (and every thread it starts from now on).
pub fn lock(path: &Path) -> Result<(), String> {
    let prog = std::fs::read(path).map_err(|e| format!("{}: cannot read the seccomp filter ({e})", path.display()))?;
    if prog.is_empty() || prog.len() % 8 != 0 || prog.len() / 8 > u16::MAX as usize {
        return Err(format!("{}: not a BPF program ({} bytes)", path.display(), prog.len()));
    }
    let fprog = SockFprog { len: (prog.len() / 8) as u16, filter: prog.as_ptr() };
    unsafe {
        if prctl(PR_SET_NO_NEW_PRIVS, 1u64, 0u64, 0u64, 0u64) != 0 {
            return Err("prctl(PR_SET_NO_NEW_PRIVS) failed".into());
        }
        if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog as *const SockFprog, 0u64, 0u64) != 0 {
            return Err(format!("{}: the kernel refused the seccomp filter ({})", path.display(),
                               std::io::Error::last_os_error()));
        }
    }
    // The program's bytes are copied by the kernel; `prog` may go.
    Ok(())
}
