//! The candidate probe's runner: every compiled candidate of one batch is a module of one binary;
//! one process runs one candidate (`--only NAME`) over a corpus's inputs and writes its outputs.
//!
//! This process is the candidate's, and nothing in it decides a verdict: it reads the inputs
//! (`--inputs FILE`: one input object per line, no expected value, no tolerance, no case id),
//! writes the header line and one record per case on stdout (`score::write_outputs`), and exits.
//! The judge (`crates_bridge/judge.py`, a separate process that never runs candidate code) holds
//! the expected geometry, compares with the tolerance, times the process from outside and writes
//! the verdict. Safe Rust is not a memory boundary (a candidate can read its whole address space
//! through a compiler soundness hole), so what the verdict depends on is never in this one.
//!
//! In the sandbox (`--lockdown FILE`) the process locks itself after reading its inputs and
//! before calling the candidate (`lockdown.rs`): a forbidden system call ends it with a line
//! naming the call. Whatever the candidate does to its process (exit, abort, overflow its stack,
//! exhaust memory, loop) is its verdict alone.

use crate::lockdown;
use crate::score::{header, read_inputs, write_outputs, CaseInput, Geometry};
use std::io::Write;
use std::path::PathBuf;

struct Args {
    inputs: PathBuf,
    only: Option<String>,
    lockdown: Option<PathBuf>,
}

fn usage(msg: &str) -> ! {
    eprintln!("candidates: {msg}; usage: <binary> --inputs FILE --only NAME [--lockdown FILE]");
    std::process::exit(2)
}

fn args() -> Args {
    let mut a = Args { inputs: PathBuf::new(), only: None, lockdown: None };
    let mut it = std::env::args().skip(1);
    let mut seen = false;
    while let Some(x) = it.next() {
        match x.as_str() {
            "--inputs" => {
                a.inputs = PathBuf::from(it.next().unwrap_or_else(|| usage("--inputs needs a file")));
                seen = true;
            }
            "--only" => a.only = Some(it.next().unwrap_or_else(|| usage("--only needs a candidate name"))),
            "--lockdown" => {
                a.lockdown = Some(PathBuf::from(it.next().unwrap_or_else(|| usage("--lockdown needs a file"))));
            }
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    if !seen {
        usage("--inputs is required");
    }
    a
}

/// Read the inputs at `path` (before any lock), or end the process with a line naming the file.
pub fn load_inputs<I: CaseInput>(path: &std::path::Path) -> Vec<I> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("candidates: {}: cannot read the inputs ({e})", path.display());
        std::process::exit(1)
    });
    read_inputs::<I>(&text, &path.display().to_string()).unwrap_or_else(|e| {
        eprintln!("candidates: {e}");
        std::process::exit(1)
    })
}

/// Lock this process with the filter at `path` (when given), or end it with a line.
pub fn lock_or_exit(path: Option<&std::path::Path>) {
    if let Some(path) = path {
        if let Err(e) = lockdown::lock(path) {
            eprintln!("candidates: {e}");
            std::process::exit(1);
        }
    }
}

/// Write the header and every case's record for `f` on stdout, then exit 0.
pub fn answer<I, O: Geometry>(function: &str, inputs: &[I], f: fn(&I) -> O) -> ! {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let ok = writeln!(out, "{}", header::<O>(function)).is_ok()
        && write_outputs(inputs, f, &mut out).is_ok()
        && out.flush().is_ok();
    std::process::exit(if ok { 0 } else { 1 })
}

pub fn main<I, O>(function: &'static str, cands: &[(&'static str, fn(&I) -> O)]) -> !
where
    I: CaseInput,
    O: Geometry,
{
    let a = args();
    if a.lockdown.is_some() {
        lockdown::report_forbidden_calls();
    }
    // Panics are results here (the record names them), not noise on stderr.
    std::panic::set_hook(Box::new(|_| {}));
    let name = a.only.clone().unwrap_or_else(|| usage("--only is required"));
    let f = cands.iter().find(|(n, _)| *n == name).map(|(_, f)| *f).unwrap_or_else(|| {
        eprintln!("candidates: no candidate `{name}` in this probe");
        std::process::exit(2)
    });
    let inputs = load_inputs::<I>(&a.inputs);
    lock_or_exit(a.lockdown.as_deref());
    answer(function, &inputs, f)
}
