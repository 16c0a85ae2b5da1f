//! Scores every generated function through its own runner against its own
//! corpus and prints one JSON line per function. The floors themselves are
//! judged by `nev floors check`; this binary only measures.
//!
//!   generated_score_check [--generated-dir DIR] [--corpus-root DIR] [--only NAME] [--cases]
//!   generated_score_check --list-caches     # the corpora to build, one per line
//!   generated_score_check --list            # name<TAB>corpus of every entry
//!
//! A function is discovered from its `<name>.provenance.json`; a record with no
//! entry in FUNCTIONS fails (exit 2) with the instruction to add one.

use generation::corpus::{self, Corpus};
use generation::functions;
use generation::score::{to_json_line, Scored};
use std::path::{Path, PathBuf};

struct Entry {
    /// The generated function, as its provenance record names it.
    name: &'static str,
    /// Its corpus, `<corpus-root>/<corpus>/`, built by `nev oracle build <corpus>`.
    corpus: &'static str,
    /// Its runner.
    run: fn(&Corpus) -> Result<Scored, String>,
}

fn run_block_width(c: &Corpus) -> Result<Scored, String> {
    functions::block_width::run(c, layout::generated::block_width::block_width)
}

fn run_abspos_width(c: &Corpus) -> Result<Scored, String> {
    functions::abspos_width::run(c, layout::generated::abspos_width::abspos_width)
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

/// `<name>` of every `<name>.provenance.json` in `dir`, sorted.
fn discover(dir: &Path) -> Vec<(String, PathBuf)> {
    let rd = std::fs::read_dir(dir).unwrap_or_else(|e| fail(2, &format!("{}: cannot list generated functions ({e})", dir.display())));
    let mut out: Vec<(String, PathBuf)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let fname = e.file_name().to_string_lossy().to_string();
            fname.strip_suffix(".provenance.json").map(|n| (n.to_string(), e.path()))
        })
        .collect();
    out.sort();
    out
}

fn main() {
    let mut generated_dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../layout/src/generated"));
    let mut corpus_root = PathBuf::from("corpus");
    let mut only: Option<String> = None;
    let mut cases = false;
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
            "--generated-dir" => generated_dir = PathBuf::from(it.next().unwrap_or_else(|| fail(2, "--generated-dir needs a folder"))),
            "--corpus-root" => corpus_root = PathBuf::from(it.next().unwrap_or_else(|| fail(2, "--corpus-root needs a folder"))),
            "--only" => only = Some(it.next().unwrap_or_else(|| fail(2, "--only needs a function name"))),
            "--cases" => cases = true,
            other => fail(2, &format!("unknown argument `{other}`; see the usage at the top of {SELF_PATH}")),
        }
    }
    let found = discover(&generated_dir);
    for (name, path) in &found {
        if !FUNCTIONS.iter().any(|e| e.name == name) {
            fail(
                2,
                &format!(
                    "{}: `{name}` has no entry in FUNCTIONS in {SELF_PATH}; add one naming its runner and its corpus",
                    path.display()
                ),
            );
        }
    }
    if let Some(o) = &only {
        if !found.iter().any(|(n, _)| n == o) {
            fail(2, &format!("no generated function `{o}` in {}", generated_dir.display()));
        }
    }
    let mut any_error = false;
    for (name, path) in &found {
        if only.as_ref().is_some_and(|o| o != name) {
            continue;
        }
        let entry = FUNCTIONS.iter().find(|e| e.name == name).expect("checked above");
        let dir = corpus_root.join(entry.corpus);
        let prov = path.display().to_string();
        let head = [("function", entry.name), ("corpus", entry.corpus), ("provenance", prov.as_str())];
        let result = corpus::load(&dir).and_then(|c| {
            if c.function != entry.name {
                return Err(format!("{}: holds cases of `{}`, not `{}`", dir.display(), c.function, entry.name));
            }
            (entry.run)(&c)
        });
        match result {
            Ok(scored) => println!("{}", to_json_line(&head, &scored, cases)),
            Err(e) => {
                any_error = true;
                let mut s = String::from("{\"function\": ");
                generation::json::write_str(&mut s, entry.name);
                s.push_str(", \"corpus\": ");
                generation::json::write_str(&mut s, entry.corpus);
                s.push_str(", \"error\": ");
                generation::json::write_str(&mut s, &e);
                s.push('}');
                println!("{s}");
            }
        }
    }
    if any_error {
        std::process::exit(1);
    }
}
