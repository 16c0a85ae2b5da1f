//! Reading a corpus folder (`corpus/<name>/manifest.json` + `cases.jsonl`), in
//! the format agreed with the oracle.

use crate::json::{self, Json};
use std::path::{Path, PathBuf};

/// 1/30 px: the tolerance when the manifest names none.
pub const DEFAULT_TOLERANCE_PX: f64 = 1.0 / 30.0;

pub struct RawCase {
    pub id: String,
    pub input: Json,
    pub expected: Json,
}

pub struct Corpus {
    pub dir: PathBuf,
    pub function: String,
    pub tolerance_px: f64,
    pub cases: Vec<RawCase>,
}

pub fn load(dir: &Path) -> Result<Corpus, String> {
    let mpath = dir.join("manifest.json");
    let mtext = std::fs::read_to_string(&mpath)
        .map_err(|e| format!("{}: cannot read the corpus manifest ({e}); build the corpus with `nev oracle build`", mpath.display()))?;
    let manifest = json::parse(&mtext).map_err(|e| format!("{}: not valid JSON: {e}", mpath.display()))?;
    match manifest.get("format").and_then(Json::as_f64) {
        Some(f) if f == 1.0 => {}
        other => return Err(format!("{}: format {other:?} is not 1; this runner reads format 1", mpath.display())),
    }
    let function = manifest
        .get("function")
        .and_then(Json::as_str)
        .ok_or_else(|| format!("{}: field function is missing", mpath.display()))?
        .to_string();
    let tolerance_px = manifest.get("tolerance_px").and_then(Json::as_f64).unwrap_or(DEFAULT_TOLERANCE_PX);
    let cpath = dir.join("cases.jsonl");
    let ctext = std::fs::read_to_string(&cpath).map_err(|e| format!("{}: cannot read the cases ({e})", cpath.display()))?;
    let mut cases = Vec::new();
    for (n, line) in ctext.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{} line {}", cpath.display(), n + 1);
        let v = json::parse(line).map_err(|e| format!("{}: not valid JSON: {e}", at()))?;
        let id = v.get("id").and_then(Json::as_str).ok_or_else(|| format!("{}: field id is missing", at()))?;
        let input = v.get("input").cloned().ok_or_else(|| format!("{}: field input is missing", at()))?;
        let expected = v.get("expected").cloned().ok_or_else(|| format!("{}: field expected is missing", at()))?;
        cases.push(RawCase { id: id.to_string(), input, expected });
    }
    if let Some(n) = manifest.get("cases").and_then(Json::as_f64) {
        if n as usize != cases.len() {
            return Err(format!(
                "{}: the manifest says {n} cases but cases.jsonl holds {}; rebuild the corpus",
                dir.display(),
                cases.len()
            ));
        }
    }
    Ok(Corpus { dir: dir.to_path_buf(), function, tolerance_px, cases })
}
