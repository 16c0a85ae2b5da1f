//! Running one function over a corpus's inputs and writing its box geometry, one record per
//! case, for the judge (`crates_bridge/judge.py`) to compare. The expected answers, the
//! tolerance and the verdict never enter this process.

use crate::json::{self, Json};
use layout::prelude::*;
use std::fmt::Write as _;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An input read from a corpus case.
pub trait CaseInput: Sized {
    fn from_json(v: &Json) -> Result<Self, String>;
}

/// An output whose fields are box geometry in px, compared with a tolerance.
pub trait Geometry {
    const FIELDS: &'static [&'static str];
    fn values(&self) -> Vec<f64>;
}

fn num(v: &Json, key: &str) -> Result<f64, String> {
    match v.get(key) {
        Some(Json::Num(n)) => Ok(*n),
        Some(Json::Str(s)) => match Len::parse(s)? {
            Len::Px(n) => Ok(n),
            _ => Err(format!("field {key}: `{s}` must be a px length")),
        },
        _ => Err(format!("field {key} is missing or not a number")),
    }
}

fn len(v: &Json, key: &str) -> Result<Len, String> {
    match v.get(key) {
        Some(Json::Str(s)) => Len::parse(s).map_err(|e| format!("field {key}: {e}")),
        Some(Json::Num(n)) => Ok(Len::Px(*n)),
        _ => Err(format!("field {key} is missing")),
    }
}

/// `CaseInput` for an input struct: every field read from the case's key of the same name,
/// a `num` field as a number of px, a `len` field as a length (auto, px or %).
macro_rules! case_input {
    ($ty:ident { num: $($num:ident),+; len: $($len:ident),+ $(;)? }) => {
        impl CaseInput for $ty {
            fn from_json(v: &Json) -> Result<Self, String> {
                Ok($ty { $($num: num(v, stringify!($num))?,)+ $($len: len(v, stringify!($len))?,)+ })
            }
        }
    };
}

/// `Geometry` for an output struct: the fields compared, in the order the corpus names them.
macro_rules! geometry {
    ($ty:ident { $($field:ident),+ $(,)? }) => {
        impl Geometry for $ty {
            const FIELDS: &'static [&'static str] = &[$(stringify!($field)),+];
            fn values(&self) -> Vec<f64> {
                vec![$(self.$field),+]
            }
        }
    };
}

case_input!(BlockWidthInput {
    num: cb_width, border_left, border_right;
    len: width, margin_left, margin_right, padding_left, padding_right;
});
geometry!(BlockWidthOutput { width, margin_left, margin_right });

case_input!(AbsposWidthInput {
    num: cb_width, border_left, border_right, content_width;
    len: left, right, width, margin_left, margin_right, padding_left, padding_right;
});
geometry!(AbsposWidthOutput { left, width, margin_left, margin_right });

/// The first line of every output stream: the format, the function, and the order of the values
/// in each record.
pub const OUTPUT_FORMAT: &str = "nev-outputs 1";

/// Parse every input line (`inputs.jsonl`: one case's input object per line, in the corpus's
/// order) once, before any candidate runs. Nothing here holds an expected value: the corpus's
/// answers never reach a process that runs candidate code (the judge, on the Python side, holds
/// them).
pub fn read_inputs<I: CaseInput>(text: &str, origin: &str) -> Result<Vec<I>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v = json::parse(line).map_err(|e| format!("{origin} line {}: not valid JSON: {e}", n + 1))?;
        out.push(I::from_json(&v).map_err(|e| format!("{origin} line {}: input {e}", n + 1))?);
    }
    Ok(out)
}

/// The header line: `nev-outputs 1 <function> <field>,<field>,...`.
pub fn header<O: Geometry>(function: &str) -> String {
    format!("{OUTPUT_FORMAT} {function} {}", O::FIELDS.join(","))
}

/// Call `f` on every input in order and write one record per case: `<k> <v1> <v2> ...` (the
/// values in the header's field order, Rust's shortest round-trip form), or `<k> panic <message>`
/// when the call panicked (that case fails; the others go on). No comparison happens here: the
/// judge reads these lines.
pub fn write_outputs<I, O: Geometry, W: Write>(inputs: &[I], f: fn(&I) -> O, out: &mut W) -> std::io::Result<()> {
    let mut line = String::with_capacity(96);
    for (k, input) in inputs.iter().enumerate() {
        line.clear();
        match catch_unwind(AssertUnwindSafe(|| f(input))) {
            Ok(got) => {
                let _ = write!(line, "{k}");
                for v in got.values() {
                    let _ = write!(line, " {v:?}");
                }
            }
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".to_string());
                let msg: String = msg.chars().take(200).map(|c| if c.is_control() { ' ' } else { c }).collect();
                let _ = write!(line, "{k} panic {msg}");
            }
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}
