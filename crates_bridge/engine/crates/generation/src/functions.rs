//! One module per generated-function kind: its signature (`F`), its
//! hand-written reference, its corpus runner and its candidate-probe entry.
//! A new function adds one `function_kind!` line here and one entry in
//! `FUNCTIONS` (`src/bin/generated_score_check.rs`).

macro_rules! function_kind {
    ($name:ident, $input:ty, $output:ty, $reference:path) => {
        pub mod $name {
            use crate::json::Json;
            use crate::score::{CaseInput, Geometry};
            use layout::prelude::*;
            use std::collections::BTreeMap;

            pub const NAME: &str = stringify!($name);
            /// The signature every generated `$name` and every candidate has.
            pub type F = fn(&$input) -> $output;
            pub const REFERENCE: F = $reference;

            /// The outputs of `f` over the inputs in `inputs` (locked by `lockdown` first, when
            /// given), written on stdout for the judge; ends the process.
            pub fn answer(inputs: &std::path::Path, lockdown: Option<&std::path::Path>, f: F) -> ! {
                let cases = crate::candidates::load_inputs::<$input>(inputs);
                crate::candidates::lock_or_exit(lockdown);
                crate::candidates::answer::<$input, $output>(NAME, &cases, f)
            }

            /// The candidate probe: one candidate (`--only`) over the inputs named on the command line.
            pub fn candidates_main(cands: &[(&'static str, F)]) -> ! {
                crate::candidates::main::<$input, $output>(NAME, cands)
            }

            /// The reference's answer for one input, as the corpus's `expected` object.
            pub fn reference_expected(input: &Json) -> Result<Json, String> {
                let i = <$input as CaseInput>::from_json(input)?;
                let o = REFERENCE(&i);
                let mut m = BTreeMap::new();
                for (k, v) in <$output as Geometry>::FIELDS.iter().zip(o.values()) {
                    m.insert(k.to_string(), Json::Num(v));
                }
                Ok(Json::Obj(m))
            }
        }
    };
}

function_kind!(block_width, BlockWidthInput, BlockWidthOutput, layout::reference::block_width);
function_kind!(abspos_width, AbsposWidthInput, AbsposWidthOutput, layout::reference::abspos_width);
