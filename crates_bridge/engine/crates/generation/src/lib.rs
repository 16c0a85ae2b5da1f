//! Running generated functions for the judge: the per-function kinds (input parsing, output
//! geometry), the writer of a function's outputs over a corpus's inputs, and the candidate
//! probe's entry point. The bridge (`crates_bridge`, Python) drives the binaries, holds the
//! expected answers and judges their outputs (`crates_bridge/judge.py`); no expected value enters
//! a process that runs generated code.

pub mod candidates;
pub mod functions;
pub mod json;
pub mod lockdown;
pub mod score;
