// Generated: CSS 2.1 §10.3.3 Block-level, non-replaced elements in normal flow.
// Provenance: block_width.provenance.json beside this file.
use super::prelude::*;

pub fn block_width(input: &BlockWidthInput) -> BlockWidthOutput {
    let first = solve(input, input.width);
    // §10.4: the tentative used width is below 'min-width' (0): apply the rules
    // again with 'min-width' as the computed value for 'width'.
    if first.width < 0.0 {
        solve(input, Len::Px(0.0))
    } else {
        first
    }
}

fn solve(input: &BlockWidthInput, width: Len) -> BlockWidthOutput {
    let cb = input.cb_width;
    // 'margin-left' + 'border-left-width' + 'padding-left' + 'width' +
    // 'padding-right' + 'border-right-width' + 'margin-right' = width of containing block
    let fixed = input.border_left
        + input.border_right
        + input.padding_left.or_zero(cb)
        + input.padding_right.or_zero(cb);
    let mut margin_left = input.margin_left.resolve(cb);
    let mut margin_right = input.margin_right.resolve(cb);
    let width = width.resolve(cb);

    // Step 1: a non-auto width that overflows makes auto margins zero.
    if let Some(w) = width {
        if fixed + w + margin_left.unwrap_or(0.0) + margin_right.unwrap_or(0.0) > cb {
            margin_left.get_or_insert(0.0);
            margin_right.get_or_insert(0.0);
        }
    }

    match width {
        // Step 4: width auto, other autos become 0.
        None => {
            let ml = margin_left.unwrap_or(0.0);
            let mr = margin_right.unwrap_or(0.0);
            BlockWidthOutput { width: cb - fixed - ml - mr, margin_left: ml, margin_right: mr }
        }
        Some(w) => {
            let free = cb - fixed - w;
            match (margin_left, margin_right) {
                // Step 5: both margins auto, equal used values.
                (None, None) => BlockWidthOutput { width: w, margin_left: free / 2.0, margin_right: free / 2.0 },
                // Step 3: exactly one auto value.
                (None, Some(mr)) => BlockWidthOutput { width: w, margin_left: free - mr, margin_right: mr },
                // Step 2 (over-constrained, ltr) and step 3 both solve margin-right.
                (Some(ml), _) => BlockWidthOutput { width: w, margin_left: ml, margin_right: free - ml },
            }
        }
    }
}
