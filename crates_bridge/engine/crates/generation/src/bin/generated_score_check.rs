//! Runs every committed generated function for the judge: the registry of functions and their
//! corpora, and one function's outputs over a corpus's inputs. It compares nothing and prints no
//! score: the expected answers stay with the judge (`crates_bridge/judge.py`, which `nev floors
//! check` and `nev scores` use), outside every process that runs generated code.
//!
//!   generated_score_check --list-caches     # the corpora to build, one per line
//!   generated_score_check --list            # name<TAB>corpus of every entry
//!   generated_score_check --run NAME --inputs FILE [--lockdown FILE]
//!                                           # NAME's outputs over the inputs (see score.rs)
//!
//! A function is discovered (by the bridge) from its `<name>.provenance.json`; a record with no
//! entry in FUNCTIONS is refused with the instruction to add one here.

use generation::functions;
use std::path::{Path, PathBuf};

struct Entry {
    /// The generated function, as its provenance record names it.
    name: &'static str,
    /// Its corpus, `<corpus-root>/<corpus>/`, built by `nev oracle build <corpus>`.
    corpus: &'static str,
    /// Writes its outputs over the inputs file (locked first when a filter is given); ends the
    /// process.
    run: fn(&Path, Option<&Path>) -> !,
}

fn run_block_width(inputs: &Path, lock: Option<&Path>) -> ! {
    functions::block_width::answer(inputs, lock, layout::generated::block_width::block_width)
}

fn run_abspos_width(inputs: &Path, lock: Option<&Path>) -> ! {
    functions::abspos_width::answer(inputs, lock, layout::generated::abspos_width::abspos_width)
}

/// One entry per generated function: the only place outside its own files
/// that a track adding a function touches.
const FUNCTIONS: &[Entry] = &[
    Entry { name: "block_width", corpus: "block_width", run: run_block_width },
    Entry { name: "abspos_width", corpus: "abspos_width", run: run_abspos_width },
];

const SELF_PATH: &str = "crates/generation/src/bin/generated_score_check.rs";

fn fail(code: i32, msg: &str) -> ! {
    eprintln!("generated_score_check: {msg}");
    std::process::exit(code)
}

fn main() {
    let mut run: Option<String> = None;
    let mut inputs: Option<PathBuf> = None;
    let mut lock: Option<PathBuf> = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list-caches" => {
                let mut seen: Vec<&str> = Vec::new();
                for e in FUNCTIONS {
                    if !seen.contains(&e.corpus) {
                        seen.push(e.corpus);
                        println!("{}", e.corpus);
                    }
                }
                return;
            }
            "--list" => {
                for e in FUNCTIONS {
                    println!("{}\t{}", e.name, e.corpus);
                }
                return;
            }
            "--run" => run = Some(it.next().unwrap_or_else(|| fail(2, "--run needs a function name"))),
            "--inputs" => inputs = Some(PathBuf::from(it.next().unwrap_or_else(|| fail(2, "--inputs needs a file")))),
            "--lockdown" => lock = Some(PathBuf::from(it.next().unwrap_or_else(|| fail(2, "--lockdown needs a file")))),
            other => fail(2, &format!("unknown argument `{other}`; see the usage at the top of {SELF_PATH}")),
        }
    }
    let Some(name) = run else { fail(2, &format!("nothing to do; see the usage at the top of {SELF_PATH}")) };
    let Some(inputs) = inputs else { fail(2, "--run needs --inputs FILE") };
    let Some(entry) = FUNCTIONS.iter().find(|e| e.name == name) else {
        fail(2, &format!("`{name}` has no entry in FUNCTIONS in {SELF_PATH}; add one naming its runner and its corpus"))
    };
    if lock.is_some() {
        generation::lockdown::report_forbidden_calls();
    }
    std::panic::set_hook(Box::new(|_| {}));
    (entry.run)(&inputs, lock.as_deref())
}
