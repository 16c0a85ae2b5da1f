//! Adds the hand-written reference's answer to each input: reads
//! `{"id", "seed", "input"}` lines on stdin, writes corpus case lines
//! (`{"id", "seed", "input", "expected"}`) on stdout. Test corpora only; the
//! real corpora come from the three-browser oracle.
//!
//!   reference_cases FUNCTION < inputs.jsonl > cases.jsonl

use generation::functions;
use generation::json::{self, Json};
use std::io::{BufRead, Write};

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let expected: fn(&Json) -> Result<Json, String> = match name.as_str() {
        "block_width" => functions::block_width::reference_expected,
        "abspos_width" => functions::abspos_width::reference_expected,
        _ => {
            eprintln!("reference_cases: no reference for `{name}`; known: block_width, abspos_width");
            std::process::exit(2)
        }
    };
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (n, line) in stdin.lock().lines().enumerate() {
        let line = line.expect("stdin");
        if line.trim().is_empty() {
            continue;
        }
        let mut v = json::parse(&line).unwrap_or_else(|e| {
            eprintln!("reference_cases: line {}: {e}", n + 1);
            std::process::exit(1)
        });
        let input = v.get("input").cloned().unwrap_or(Json::Null);
        let exp = expected(&input).unwrap_or_else(|e| {
            eprintln!("reference_cases: line {}: {e}", n + 1);
            std::process::exit(1)
        });
        if let Json::Obj(m) = &mut v {
            m.insert("expected".into(), exp);
        }
        let mut s = String::new();
        json::write_value(&mut s, &v);
        writeln!(out, "{s}").expect("stdout");
    }
}
