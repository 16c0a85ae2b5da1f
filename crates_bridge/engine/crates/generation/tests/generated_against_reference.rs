//! The generated functions against the hand-written references on many
//! deterministic inputs (the corpus decides the score; this catches a slot
//! that stops compiling or drifts far).

use generation::score::{header, read_inputs, write_outputs};
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
fn outputs_are_one_record_per_case_in_order_and_a_panic_names_its_case() {
    let line = r#"{"cb_width": 100, "width": "50px", "margin_left": "auto", "margin_right": "auto",
        "padding_left": "0px", "padding_right": "0px", "border_left": "0px", "border_right": "0px"}"#
        .replace('\n', " ");
    let inputs: Vec<BlockWidthInput> = read_inputs(&format!("{line}\n\n{line}\n"), "test").unwrap();
    assert_eq!(inputs.len(), 2);
    fn odd(i: &BlockWidthInput) -> BlockWidthOutput {
        if i.cb_width > 0.0 && i.border_left == 0.0 && i.padding_right == Len::Px(0.0) {
            static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            if CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
                panic!("no room\nat all");
            }
        }
        layout::reference::block_width(i)
    }
    let mut out = Vec::new();
    write_outputs(&inputs, odd, &mut out).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "0 50.0 25.0 25.0\n1 panic no room at all\n");
    assert_eq!(header::<BlockWidthOutput>("block_width"), "nev-outputs 1 block_width width,margin_left,margin_right");
    assert!(read_inputs::<BlockWidthInput>("{\"cb_width\": 1}\n", "f").unwrap_err().starts_with("f line 1: input"));
}
