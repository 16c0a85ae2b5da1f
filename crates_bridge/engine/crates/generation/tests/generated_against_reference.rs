//! The generated functions against the hand-written references on many
//! deterministic inputs (the corpus decides the score; this catches a slot
//! that stops compiling or drifts far).

use generation::json;
use generation::score::{run_prepared, CaseInput};
use layout::prelude::*;

/// A small deterministic generator (no crates.io here).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn len(&mut self, auto: bool) -> Len {
        match self.next() % 4 {
            0 if auto => Len::Auto,
            1 => Len::Percent((self.next() % 60) as f64),
            _ => Len::Px((self.next() % 340) as f64 - 40.0),
        }
    }
}

fn block_input(r: &mut Lcg) -> BlockWidthInput {
    BlockWidthInput {
        cb_width: (r.next() % 1000) as f64,
        width: r.len(true),
        margin_left: r.len(true),
        margin_right: r.len(true),
        padding_left: Len::Px((r.next() % 30) as f64),
        padding_right: r.len(false),
        border_left: (r.next() % 10) as f64,
        border_right: (r.next() % 10) as f64,
    }
}

#[test]
fn generated_block_width_agrees_with_the_reference() {
    let mut r = Lcg(7);
    for _ in 0..20_000 {
        let i = block_input(&mut r);
        assert_eq!(layout::generated::block_width::block_width(&i), layout::reference::block_width(&i), "{i:?}");
    }
}

#[test]
fn generated_abspos_width_differs_only_where_centring_margins_go_negative() {
    let mut r = Lcg(11);
    let mut differ = 0;
    for _ in 0..20_000 {
        let i = AbsposWidthInput {
            cb_width: (r.next() % 1000) as f64,
            left: r.len(true),
            right: r.len(true),
            width: r.len(true),
            margin_left: r.len(true),
            margin_right: r.len(true),
            padding_left: r.len(false),
            padding_right: r.len(false),
            border_left: (r.next() % 10) as f64,
            border_right: (r.next() % 10) as f64,
            content_width: (r.next() % 400) as f64,
        };
        let g = layout::generated::abspos_width::abspos_width(&i);
        let want = layout::reference::abspos_width(&i);
        if g != want {
            differ += 1;
            assert!(i.margin_left.is_auto() && i.margin_right.is_auto(), "{i:?}");
            assert!(want.margin_left == 0.0 && g.margin_left < 0.0, "{i:?}");
        }
    }
    assert!(differ > 0);
}

#[test]
fn a_case_outside_the_tolerance_reports_each_field() {
    let input = json::parse(r#"{"cb_width": 100, "width": "50px", "margin_left": "auto", "margin_right": "auto",
        "padding_left": "0px", "padding_right": "0px", "border_left": "0px", "border_right": "0px"}"#)
    .unwrap();
    let i = BlockWidthInput::from_json(&input).unwrap();
    let cases = vec![
        ("ok".to_string(), i.clone(), vec![50.0, 25.0, 25.0]),
        ("near".to_string(), i.clone(), vec![50.0 + 1.0 / 60.0, 25.0, 25.0]),
        ("off".to_string(), i, vec![50.0, 20.0, 30.0]),
    ];
    let s = run_prepared(&cases, layout::reference::block_width, 1.0 / 30.0);
    assert_eq!(s.results.iter().map(|r| r.passed).collect::<Vec<_>>(), vec![true, true, false]);
    let fields: Vec<_> = s.results[2].diff.iter().map(|d| (d.field, d.expected, d.got)).collect();
    assert_eq!(fields, vec![("margin_left", 20.0, 25.0), ("margin_right", 30.0, 25.0)]);
}
