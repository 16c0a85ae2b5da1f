//! Scoring generated functions: the corpus reader, the in-process runner, the
//! per-function kinds (input parsing, output geometry) and the candidate
//! probe's entry point. The bridge (`crates_bridge`, Python) drives the
//! binaries and reads their JSON lines.

pub mod candidates;
pub mod corpus;
pub mod functions;
pub mod json;
pub mod lockdown;
pub mod score;
