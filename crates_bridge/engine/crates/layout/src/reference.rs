//! Hand-written references for the generated-function slots, written from the
//! CSS 2.1 text. The tests of this crate exercise these; the generated
//! functions are scored against the three-browser corpus by the runner.

use crate::css::{AbsposWidthInput, AbsposWidthOutput, BlockWidthInput, BlockWidthOutput, Len};

/// §10.4 with `min-width: 0` (the initial value): the rules run with the computed
/// width; a tentative used width below min-width (0) reruns them with min-width
/// as the computed width.
fn min_width_zero<O>(width: Len, rules: impl Fn(Len) -> O, used_width: impl Fn(&O) -> f64) -> O {
    let out = rules(width);
    if used_width(&out) < 0.0 {
        return rules(Len::Px(0.0));
    }
    out
}

/// CSS 2.1 §10.3.3 with §10.4's `min-width: 0` (the initial value).
pub fn block_width(i: &BlockWidthInput) -> BlockWidthOutput {
    min_width_zero(i.width, |w| block_width_pass(i, w), |o| o.width)
}

fn block_width_pass(i: &BlockWidthInput, width: Len) -> BlockWidthOutput {
    let cb = i.cb_width;
    let bp = i.border_left + i.border_right + i.padding_left.or_zero(cb) + i.padding_right.or_zero(cb);
    let mut ml = i.margin_left.resolve(cb);
    let mut mr = i.margin_right.resolve(cb);
    let w = width.resolve(cb);
    // "If 'width' is not 'auto' and 'border-left-width' + 'padding-left' + 'width' +
    // 'padding-right' + 'border-right-width' (plus any of 'margin-left' or
    // 'margin-right' that are not 'auto') is larger than the width of the
    // containing block, then any 'auto' values for 'margin-left' or
    // 'margin-right' are, for the following rules, treated as zero."
    if let Some(w) = w {
        if bp + w + ml.unwrap_or(0.0) + mr.unwrap_or(0.0) > cb {
            ml = Some(ml.unwrap_or(0.0));
            mr = Some(mr.unwrap_or(0.0));
        }
    }
    match (w, ml, mr) {
        // Over-constrained: ltr, so margin-right is ignored and solved for.
        (Some(w), Some(l), Some(_)) => BlockWidthOutput { width: w, margin_left: l, margin_right: cb - bp - w - l },
        // Exactly one auto value: it follows from the equality.
        (Some(w), None, Some(r)) => BlockWidthOutput { width: w, margin_left: cb - bp - w - r, margin_right: r },
        (Some(w), Some(l), None) => BlockWidthOutput { width: w, margin_left: l, margin_right: cb - bp - w - l },
        // Both margins auto: equal used values (centring).
        (Some(w), None, None) => {
            let m = (cb - bp - w) / 2.0;
            BlockWidthOutput { width: w, margin_left: m, margin_right: m }
        }
        // Width auto: other autos become 0, width follows from the equality.
        (None, l, r) => {
            let l = l.unwrap_or(0.0);
            let r = r.unwrap_or(0.0);
            BlockWidthOutput { width: cb - bp - l - r, margin_left: l, margin_right: r }
        }
    }
}

/// CSS 2.1 §10.3.7 (ltr, static left 0) with §10.4's `min-width: 0`.
pub fn abspos_width(i: &AbsposWidthInput) -> AbsposWidthOutput {
    min_width_zero(i.width, |w| abspos_pass(i, w), |o| o.width)
}

fn abspos_pass(i: &AbsposWidthInput, width: Len) -> AbsposWidthOutput {
    let cb = i.cb_width;
    let bp = i.border_left + i.border_right + i.padding_left.or_zero(cb) + i.padding_right.or_zero(cb);
    let left = i.left.resolve(cb);
    let right = i.right.resolve(cb);
    let w = width.resolve(cb);
    let ml = i.margin_left.resolve(cb);
    let mr = i.margin_right.resolve(cb);
    let stf = i.content_width; // shrink-to-fit: min(max(min, available), preferred) = content
    const STATIC_LEFT: f64 = 0.0;
    let out = |left: f64, width: f64, ml: f64, mr: f64| AbsposWidthOutput { left, width, margin_left: ml, margin_right: mr };

    match (left, w, right) {
        // All three auto: auto margins 0, left = static position, then rule 3.
        (None, None, None) => out(STATIC_LEFT, stf, ml.unwrap_or(0.0), mr.unwrap_or(0.0)),
        // None of the three auto.
        (Some(l), Some(w), Some(r)) => {
            let rest = cb - l - r - bp - w;
            match (ml, mr) {
                (None, None) => {
                    let m = rest / 2.0;
                    if m < 0.0 {
                        // ltr: margin-left 0, solve for margin-right.
                        out(l, w, 0.0, rest)
                    } else {
                        out(l, w, m, m)
                    }
                }
                (None, Some(mr)) => out(l, w, rest - mr, mr),
                (Some(ml), None) => out(l, w, ml, rest - ml),
                // Over-constrained: 'right' is ignored; margins stand.
                (Some(ml), Some(mr)) => out(l, w, ml, mr),
            }
        }
        // Otherwise auto margins are 0 and one of six rules applies.
        (left, w, right) => {
            let ml = ml.unwrap_or(0.0);
            let mr = mr.unwrap_or(0.0);
            match (left, w, right) {
                // 1. left and width auto, right not: shrink-to-fit width, solve for left.
                (None, None, Some(r)) => out(cb - r - mr - bp - stf - ml, stf, ml, mr),
                // 2. left and right auto, width not: left = static position.
                (None, Some(w), None) => out(STATIC_LEFT, w, ml, mr),
                // 3. width and right auto, left not: shrink-to-fit width.
                (Some(l), None, None) => out(l, stf, ml, mr),
                // 4. left auto, width and right not: solve for left.
                (None, Some(w), Some(r)) => out(cb - r - mr - bp - w - ml, w, ml, mr),
                // 5. width auto, left and right not: solve for width.
                (Some(l), None, Some(r)) => out(l, cb - l - r - ml - mr - bp, ml, mr),
                // 6. right auto, left and width not.
                (Some(l), Some(w), None) => out(l, w, ml, mr),
                _ => unreachable!("handled above"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lens<const N: usize>(texts: [&str; N]) -> [Len; N] {
        texts.map(|t| Len::parse(t).unwrap())
    }

    fn bw(cb: f64, w: &str, ml: &str, mr: &str, p: &str, b: f64) -> BlockWidthOutput {
        let [width, margin_left, margin_right, padding] = lens([w, ml, mr, p]);
        block_width(&BlockWidthInput { cb_width: cb, width, margin_left, margin_right, padding_left: padding,
                                       padding_right: padding, border_left: b, border_right: b })
    }

    #[test]
    fn auto_width_fills_the_containing_block() {
        let o = bw(500.0, "auto", "10px", "20px", "5px", 1.0);
        assert_eq!(o, BlockWidthOutput { width: 500.0 - 30.0 - 12.0, margin_left: 10.0, margin_right: 20.0 });
    }

    #[test]
    fn auto_margins_centre() {
        let o = bw(500.0, "100px", "auto", "auto", "0px", 0.0);
        assert_eq!(o, BlockWidthOutput { width: 100.0, margin_left: 200.0, margin_right: 200.0 });
    }

    #[test]
    fn over_constrained_margin_right_absorbs() {
        let o = bw(500.0, "100px", "10px", "10px", "0px", 0.0);
        assert_eq!(o.margin_right, 390.0);
    }

    #[test]
    fn too_wide_auto_margins_become_zero() {
        let o = bw(100.0, "200px", "auto", "auto", "0px", 0.0);
        assert_eq!(o, BlockWidthOutput { width: 200.0, margin_left: 0.0, margin_right: -100.0 });
    }

    #[test]
    fn negative_auto_width_clamps_to_zero() {
        let o = bw(10.0, "auto", "20px", "auto", "0px", 0.0);
        assert_eq!(o, BlockWidthOutput { width: 0.0, margin_left: 20.0, margin_right: -10.0 });
    }

    #[test]
    fn percentages_resolve_against_the_containing_block() {
        let o = bw(400.0, "50%", "10%", "auto", "0%", 0.0);
        assert_eq!(o, BlockWidthOutput { width: 200.0, margin_left: 40.0, margin_right: 160.0 });
    }

    fn ap(cb: f64, l: &str, w: &str, r: &str, ml: &str, mr: &str, content: f64) -> AbsposWidthOutput {
        let [left, width, right, margin_left, margin_right] = lens([l, w, r, ml, mr]);
        let none = Len::Px(0.0);
        abspos_width(&AbsposWidthInput { cb_width: cb, left, right, width, margin_left, margin_right, padding_left: none,
                                         padding_right: none, border_left: 0.0, border_right: 0.0, content_width: content })
    }

    #[test]
    fn all_auto_shrinks_to_fit_at_the_static_position() {
        assert_eq!(ap(500.0, "auto", "auto", "auto", "auto", "5px", 80.0),
                   AbsposWidthOutput { left: 0.0, width: 80.0, margin_left: 0.0, margin_right: 5.0 });
    }

    #[test]
    fn left_and_right_set_solve_for_width() {
        assert_eq!(ap(500.0, "10px", "auto", "20px", "0px", "0px", 80.0).width, 470.0);
    }

    #[test]
    fn auto_margins_centre_unless_negative() {
        assert_eq!(ap(500.0, "0px", "100px", "0px", "auto", "auto", 0.0).margin_left, 200.0);
        let o = ap(100.0, "0px", "200px", "0px", "auto", "auto", 0.0);
        assert_eq!((o.margin_left, o.margin_right), (0.0, -100.0));
    }

    #[test]
    fn right_and_width_set_solve_for_left() {
        assert_eq!(ap(500.0, "auto", "100px", "50px", "0px", "0px", 0.0).left, 350.0);
    }
}
