"""Sample candidates of `block_width` for the tests, the benchmark and the demo: right, wrong, broken.

Each is the whole text of a `block_width.rs` a model might return. The right
ones are rewrites of the example engine's generated function; the wrong ones
are plausible slips (each fails some cases of a reference corpus); the broken
ones fail to compile in different compiler phases.
"""

from __future__ import annotations

from crates_bridge.workspace import EXAMPLE_ENGINE

GOOD = (EXAMPLE_ENGINE / "crates/layout/src/generated/block_width.rs").read_text()


def _sub(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


RIGHT = [
    GOOD,
    _sub(GOOD, "fn solve(", "fn solve_once(").replace("solve(input", "solve_once(input"),
    _sub(GOOD, "let free = cb - fixed - w;", "let free = -(fixed + w) + cb;"),
    "// a model's preamble comment\n" + GOOD,
]
WRONG = [
    _sub(GOOD, "free / 2.0, margin_right: free / 2.0", "free / 3.0, margin_right: free / 2.0"),
    _sub(GOOD, "+ input.padding_left.or_zero(cb)\n", "\n"),
    _sub(GOOD, "if first.width < 0.0", "if first.width < -1.0e9"),
    _sub(GOOD, "(Some(ml), _) => BlockWidthOutput { width: w, margin_left: ml, margin_right: free - ml }",
         "(Some(ml), _) => BlockWidthOutput { width: w, margin_left: free - ml, margin_right: ml }"),
    # Panics on some cases: those cases fail, the candidate and the batch go on.
    _sub(GOOD, "let cb = input.cb_width;", "let cb = input.cb_width;\n    if cb == 0.0 { panic!(\"no room\") }"),
]
BROKEN = [
    # parse error
    (_sub(GOOD, "pub fn block_width(", "pub fn block_width(("), "unclosed delimiter"),
    # type error
    (_sub(GOOD, "let cb = input.cb_width;", "let cb: i32 = input.cb_width;"), "mismatched types"),
    # unknown name
    (_sub(GOOD, "let cb = input.cb_width;", "let cb = input.cb_widht;"), "cb_widht"),
    # borrow checker: reported only once everything else type-checks (a later round)
    (_sub(GOOD, "let cb = input.cb_width;",
          "let cb = input.cb_width;\n    let v = vec![cb];\n    let r = &v;\n    drop(v);\n    let _ = r.len();"),
     "borrow"),
    # wrong signature: the error is in the probe's main.rs, on this candidate's line
    (_sub(GOOD, "pub fn block_width(input: &BlockWidthInput) -> BlockWidthOutput {\n    let first = solve(input, input.width);",
          "pub fn block_width(input: &BlockWidthInput) -> f64 {\n    let first = solve(input, input.width);\n    return first.width;"),
     "mismatched types"),
    # no function of that name at all
    (GOOD.replace("pub fn block_width(", "pub fn block_widths("), "block_width"),
]
LOOPS = _sub(GOOD, "let cb = input.cb_width;", "let cb = input.cb_width;\n    loop { std::hint::spin_loop() }")


def batch_of(n: int) -> list[tuple[str, str, str | None]]:
    """n candidates (expected status, source, expected error text): right, wrong and broken kinds
    in turn, each text distinct, the last one never returning."""
    kinds = [("passed", s, None) for s in RIGHT] + [("failed", s, None) for s in WRONG] + \
            [("compile-error", s, why) for s, why in BROKEN]
    out = []
    for i in range(n - 1):
        want, src, why = kinds[i % len(kinds)]
        out.append((want, f"// candidate {i}\n{src}", why))
    out.append(("run-error", LOOPS, None))
    return out
