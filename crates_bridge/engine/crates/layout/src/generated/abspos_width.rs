// Generated: CSS 2.1 §10.3.7 Absolutely positioned, non-replaced elements (ltr).
// Provenance: abspos_width.provenance.json beside this file.
use super::prelude::*;

pub fn abspos_width(input: &AbsposWidthInput) -> AbsposWidthOutput {
    let first = solve(input, input.width);
    if first.width < 0.0 {
        solve(input, Len::Px(0.0))
    } else {
        first
    }
}

fn solve(input: &AbsposWidthInput, width: Len) -> AbsposWidthOutput {
    let cb = input.cb_width;
    let fixed = input.border_left
        + input.border_right
        + input.padding_left.or_zero(cb)
        + input.padding_right.or_zero(cb);
    let left = input.left.resolve(cb);
    let right = input.right.resolve(cb);
    let width = width.resolve(cb);
    let ml = input.margin_left.resolve(cb);
    let mr = input.margin_right.resolve(cb);
    let shrink_to_fit = input.content_width;
    let static_left = 0.0;

    if let (Some(l), Some(w), Some(r)) = (left, width, right) {
        let free = cb - l - r - fixed - w;
        let (ml, mr) = match (ml, mr) {
            // Both margins auto: equal values.
            (None, None) => (free / 2.0, free / 2.0),
            (None, Some(mr)) => (free - mr, mr),
            (Some(ml), None) => (ml, free - ml),
            // Over-constrained: ignore 'right'.
            (Some(ml), Some(mr)) => (ml, mr),
        };
        return AbsposWidthOutput { left: l, width: w, margin_left: ml, margin_right: mr };
    }

    let ml = ml.unwrap_or(0.0);
    let mr = mr.unwrap_or(0.0);
    let (l, w) = match (left, width, right) {
        (None, None, None) => (static_left, shrink_to_fit),
        (None, None, Some(r)) => (cb - r - mr - fixed - shrink_to_fit - ml, shrink_to_fit),
        (None, Some(w), None) => (static_left, w),
        (Some(l), None, None) => (l, shrink_to_fit),
        (None, Some(w), Some(r)) => (cb - r - mr - fixed - w - ml, w),
        (Some(l), None, Some(r)) => (l, cb - l - r - ml - mr - fixed),
        (Some(l), Some(w), None) => (l, w),
        (Some(_), Some(_), Some(_)) => unreachable!(),
    };
    AbsposWidthOutput { left: l, width: w, margin_left: ml, margin_right: mr }
}
