"""The demo's bank: the candidates the stand-in pools answer for the demo's function, made from
the example engine's own version of it."""

from __future__ import annotations

from rig.box.demo.commands import StepFailed
from rig.box.plan import PROJECT

ENGINE = PROJECT / "crates_bridge" / "engine"
FUNCTION = "abspos_width"            # the generated function the demo's track rewrites


def _sub(text: str, old: str, new: str) -> str:
    if old not in text:
        raise StepFailed(f"the example {FUNCTION}.rs changed: the demo's bank cannot find {old!r}")
    return text.replace(old, new, 1)


def demo_bank() -> dict:
    """Candidates a model might answer for `abspos_width`, as whole files.

    - wrong: the example engine's own version (it misses the rule for negative free space with
      both margins auto), and one that also forgets shrink-to-fit;
    - right: the negative-margins rule, and every length resolved to the browsers' layout unit
      (1/64 px, floored), as Blink, Gecko and WebKit do: without it a case such as
      `left: auto; width: 101.4%; right: 56%` is 1/30 px off the browsers' answer.
    """
    example = (ENGINE / "crates/layout/src/generated" / f"{FUNCTION}.rs").read_text()
    auto = "(None, None) => (free / 2.0, free / 2.0),"
    negative = _sub(example, auto, "(None, None) if free < 0.0 => (0.0, free),\n            " + auto)
    head = "fn solve(input: &AbsposWidthInput, width: Len) -> AbsposWidthOutput {\n"
    right = _sub(negative, head, "/// A length in the browsers' layout unit (1/64 px, floored).\n"
                 "fn lu(v: Option<f64>) -> Option<f64> {\n    v.map(|x| (x * 64.0).floor() / 64.0)\n}\n\n" + head)
    for old, new in (("input.padding_left.or_zero(cb)", "lu(input.padding_left.resolve(cb)).unwrap_or(0.0)"),
                     ("input.padding_right.or_zero(cb)", "lu(input.padding_right.resolve(cb)).unwrap_or(0.0)"),
                     ("input.left.resolve(cb)", "lu(input.left.resolve(cb))"),
                     ("input.right.resolve(cb)", "lu(input.right.resolve(cb))"),
                     ("width.resolve(cb)", "lu(width.resolve(cb))"),
                     ("input.margin_left.resolve(cb)", "lu(input.margin_left.resolve(cb))"),
                     ("input.margin_right.resolve(cb)", "lu(input.margin_right.resolve(cb))")):
        right = _sub(right, old, new)
    no_shrink = _sub(negative, "(None, None, None) => (static_left, shrink_to_fit),",
                     "(None, None, None) => (static_left, 0.0),")
    return {"_comment": "nev box demo: abspos_width wrong at the sampling tier, right at the capacity tier",
            "functions": {FUNCTION: {
                "sampling": [{"kind": "wrong", "code": example}, {"kind": "wrong", "code": no_shrink}],
                "capacity": [{"kind": "right", "code": right}]}}}
