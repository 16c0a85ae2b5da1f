//! The candidate probe's runner: every compiled candidate of one batch is a
//! module of one binary, scored over the corpus in this process. A candidate
//! that panics fails that case. One that runs past the time limit is reported
//! as timed out and the process exits with status 3 at once (its thread cannot
//! be stopped, and would slow every later candidate): the caller starts the
//! binary again with `--only` the candidates not yet reported.
//!
//! In the sandbox (`--lockdown FILE`) the process locks itself after reading the corpus and
//! before calling any candidate (`lockdown.rs`): a forbidden system call ends it with a line
//! naming the call. The bridge runs one candidate per process there, so whatever one candidate
//! does to its process (exit, abort, overflow its stack, exhaust memory) is its verdict alone.

use crate::corpus;
use crate::json;
use crate::lockdown;
use crate::score::{prepare, run_prepared, to_json_line, CaseInput, Geometry, Scored};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Exit status after a candidate timed out: run again with the rest.
pub const EXIT_TIMED_OUT: i32 = 3;

struct Args {
    corpus: PathBuf,
    timeout: Duration,
    cases: bool,
    only: Option<Vec<String>>,
    lockdown: Option<PathBuf>,
}

fn usage(msg: &str) -> ! {
    eprintln!("candidates: {msg}; usage: <binary> --corpus DIR [--timeout-ms N] [--no-cases] [--only c000,c001] [--lockdown FILE]");
    std::process::exit(2)
}

fn args() -> Args {
    let mut a = Args { corpus: PathBuf::new(), timeout: Duration::from_millis(10_000), cases: true, only: None, lockdown: None };
    let mut it = std::env::args().skip(1);
    let mut seen = false;
    while let Some(x) = it.next() {
        match x.as_str() {
            "--corpus" => {
                a.corpus = PathBuf::from(it.next().unwrap_or_else(|| usage("--corpus needs a folder")));
                seen = true;
            }
            "--timeout-ms" => {
                let v = it.next().unwrap_or_else(|| usage("--timeout-ms needs a number"));
                a.timeout = Duration::from_millis(v.parse().unwrap_or_else(|_| usage("--timeout-ms needs a number")));
            }
            "--no-cases" => a.cases = false,
            "--only" => {
                let v = it.next().unwrap_or_else(|| usage("--only needs candidate names"));
                a.only = Some(v.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect());
            }
            "--lockdown" => {
                a.lockdown = Some(PathBuf::from(it.next().unwrap_or_else(|| usage("--lockdown needs a file"))));
            }
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    if !seen {
        usage("--corpus is required");
    }
    a
}

pub fn main<I, O>(function: &'static str, cands: &[(&'static str, fn(&I) -> O)]) -> !
where
    I: CaseInput + Send + Sync + 'static,
    O: Geometry + 'static,
{
    let a = args();
    if a.lockdown.is_some() {
        lockdown::report_forbidden_calls();
    }
    // Panics are results here, not noise on stderr.
    std::panic::set_hook(Box::new(|_| {}));
    let c = corpus::load(&a.corpus).unwrap_or_else(|e| {
        eprintln!("candidates: {e}");
        std::process::exit(1)
    });
    if c.function != function {
        eprintln!("candidates: {} holds cases of `{}`, not `{function}`", a.corpus.display(), c.function);
        std::process::exit(1);
    }
    let tol = c.tolerance_px;
    let prepared = Arc::new(prepare::<I, O>(&c).unwrap_or_else(|e| {
        eprintln!("candidates: {e}");
        std::process::exit(1)
    }));
    let stdout = std::io::stdout();
    // In the sandbox every report carries the nonce read from stdin before the lock: a candidate
    // (safe code, after the lock) can print lines of its own but cannot know it.
    let mut nonce = String::new();
    if a.lockdown.is_some() {
        let _ = std::io::stdin().read_line(&mut nonce);
        nonce = nonce.trim().to_string();
    }
    if let Some(path) = &a.lockdown {
        if let Err(e) = lockdown::lock(path) {
            eprintln!("candidates: {e}");
            std::process::exit(1);
        }
    }
    for (name, f) in cands {
        if a.only.as_ref().is_some_and(|o| !o.iter().any(|x| x == name)) {
            continue;
        }
        let (tx, rx) = mpsc::channel::<Scored>();
        let cases = Arc::clone(&prepared);
        let f = *f;
        std::thread::spawn(move || {
            let _ = tx.send(run_prepared(&cases, f, tol));
        });
        let (line, timed_out) = match rx.recv_timeout(a.timeout) {
            Ok(scored) => {
                let mut head = vec![("function", function), ("candidate", *name)];
                if !nonce.is_empty() {
                    head.push(("nonce", nonce.as_str()));
                }
                (to_json_line(&head, &scored, a.cases), false)
            }
            Err(_) => {
                let mut s = String::from("{\"function\": ");
                json::write_str(&mut s, function);
                s.push_str(", \"candidate\": ");
                json::write_str(&mut s, name);
                if !nonce.is_empty() {
                    s.push_str(", \"nonce\": ");
                    json::write_str(&mut s, &nonce);
                }
                s.push_str(&format!(", \"error\": \"timed out after {} ms\"}}", a.timeout.as_millis()));
                (s, true)
            }
        };
        let mut out = stdout.lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
        if timed_out {
            // Its thread still runs: end the process, not the thread.
            std::process::exit(EXIT_TIMED_OUT);
        }
    }
    std::process::exit(0)
}
