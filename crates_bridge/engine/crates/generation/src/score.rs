//! Running one function over a corpus in-process and comparing its box
//! geometry with the agreed answers.

use crate::corpus::Corpus;
use crate::json::{self, Json};
use layout::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

/// An input read from a corpus case.
pub trait CaseInput: Sized {
    fn from_json(v: &Json) -> Result<Self, String>;
}

/// An output whose fields are box geometry in px, compared with a tolerance.
pub trait Geometry {
    const FIELDS: &'static [&'static str];
    fn values(&self) -> Vec<f64>;
}

pub struct FieldDiff {
    pub field: &'static str,
    pub expected: f64,
    pub got: f64,
}

pub struct CaseResult {
    pub id: String,
    pub passed: bool,
    pub diff: Vec<FieldDiff>,
    pub error: Option<String>,
}

pub struct Scored {
    pub results: Vec<CaseResult>,
    /// Wall time of the calls and comparisons only (inputs parsed beforehand).
    pub elapsed_ns: u128,
}

impl Scored {
    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.passed).count()
    }
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

/// Parse every case's input and expected geometry once, before any timing.
pub fn prepare<I: CaseInput, O: Geometry>(corpus: &Corpus) -> Result<Vec<(String, I, Vec<f64>)>, String> {
    let mut out = Vec::with_capacity(corpus.cases.len());
    for c in &corpus.cases {
        let input = I::from_json(&c.input).map_err(|e| format!("{}: case {}: input {e}", corpus.dir.display(), c.id))?;
        let mut expected = Vec::with_capacity(O::FIELDS.len());
        for f in O::FIELDS {
            expected.push(num(&c.expected, f).map_err(|e| format!("{}: case {}: expected {e}", corpus.dir.display(), c.id))?);
        }
        out.push((c.id.clone(), input, expected));
    }
    Ok(out)
}

/// Run `f` over prepared cases: a panic fails its case, the others go on.
pub fn run_prepared<I, O: Geometry>(cases: &[(String, I, Vec<f64>)], f: fn(&I) -> O, tolerance_px: f64) -> Scored {
    let mut results = Vec::with_capacity(cases.len());
    let t0 = Instant::now();
    for (id, input, expected) in cases {
        match catch_unwind(AssertUnwindSafe(|| f(input))) {
            Ok(got) => {
                let mut diff = Vec::new();
                for ((field, e), g) in O::FIELDS.iter().zip(expected).zip(got.values()) {
                    // NaN never passes.
                    if !((g - e).abs() <= tolerance_px) {
                        diff.push(FieldDiff { field, expected: *e, got: g });
                    }
                }
                results.push(CaseResult { id: id.clone(), passed: diff.is_empty(), diff, error: None });
            }
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".to_string());
                results.push(CaseResult { id: id.clone(), passed: false, diff: Vec::new(), error: Some(format!("panicked: {msg}")) });
            }
        }
    }
    Scored { results, elapsed_ns: t0.elapsed().as_nanos() }
}

pub fn run_corpus<I: CaseInput, O: Geometry>(corpus: &Corpus, f: fn(&I) -> O) -> Result<Scored, String> {
    let cases = prepare::<I, O>(corpus)?;
    Ok(run_prepared(&cases, f, corpus.tolerance_px))
}

/// One JSON line: the score, and (with `cases`) every case's result.
pub fn to_json_line(head: &[(&str, &str)], scored: &Scored, cases: bool) -> String {
    let mut s = String::from("{");
    for (k, v) in head {
        json::write_str(&mut s, k);
        s.push_str(": ");
        json::write_str(&mut s, v);
        s.push_str(", ");
    }
    let n = scored.results.len();
    s.push_str(&format!("\"cases_run\": {n}, \"cases_passed\": {}, \"ns_per_case\": ", scored.passed()));
    json::write_num(&mut s, if n == 0 { 0.0 } else { scored.elapsed_ns as f64 / n as f64 });
    if cases {
        s.push_str(", \"cases\": [");
        for (i, r) in scored.results.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            s.push_str("{\"id\": ");
            json::write_str(&mut s, &r.id);
            s.push_str(if r.passed { ", \"passed\": true" } else { ", \"passed\": false" });
            if !r.diff.is_empty() {
                s.push_str(", \"diff\": {");
                for (j, d) in r.diff.iter().enumerate() {
                    if j > 0 {
                        s.push_str(", ");
                    }
                    json::write_str(&mut s, d.field);
                    s.push_str(": {\"expected\": ");
                    json::write_num(&mut s, d.expected);
                    s.push_str(", \"got\": ");
                    json::write_num(&mut s, d.got);
                    s.push('}');
                }
                s.push('}');
            }
            if let Some(e) = &r.error {
                s.push_str(", \"error\": ");
                json::write_str(&mut s, e);
            }
            s.push('}');
        }
        s.push(']');
    }
    s.push('}');
    s
}
