//! The example engine's layout crate: CSS 2.1 width algorithms.
//!
//! Each algorithm has a hand-written reference (`reference`) and a
//! generated-function slot (`generated/<name>.rs`, with its provenance record
//! and score floor beside it). Generated code sees only `prelude`, so the same
//! source compiles in this crate and in a candidate crate of the bridge.

pub mod css;
pub mod generated;
pub mod reference;

/// Everything a generated function may name: `use super::prelude::*;`.
pub mod prelude {
    pub use crate::css::{
        AbsposWidthInput, AbsposWidthOutput, BlockWidthInput, BlockWidthOutput, Len,
    };
}
