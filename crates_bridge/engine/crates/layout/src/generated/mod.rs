//! Generated-function slots. Each `<name>.rs` is written by the generation
//! loop and committed with `<name>.provenance.json` (the batch that admitted
//! it, never rewritten) and `<name>.floor.json` (its score floor, only raised
//! by `nev floors raise`, lowered only by a person's edit).
//!
//! A generated file names engine types only through `use super::prelude::*;`.

pub use crate::prelude;

pub mod abspos_width;
pub mod block_width;
