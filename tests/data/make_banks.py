"""Write the stand-in pool banks the batch tests hand to `pool_control(bank=...)`.

Run once after the example engine's generated functions change:
    .venv/bin/python tests/data/make_banks.py
Each candidate is a whole `<name>.rs` a model might answer: right ones (rewrites of the
example engine's functions), wrong ones (plausible slips that fail some cases of a reference
corpus) and broken ones (do not compile). `kind` is for people; the pool never sends it.
"""

from __future__ import annotations

import json
from pathlib import Path

from crates_bridge import samples
from crates_bridge.workspace import EXAMPLE_ENGINE

HERE = Path(__file__).resolve().parent
#: the example engine's generated abspos_width misses the negative-margins rule: a wrong answer
ABS_EXAMPLE = (EXAMPLE_ENGINE / "crates/layout/src/generated/abspos_width.rs").read_text()


def sub(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def c(kind: str, code: str) -> dict[str, str]:
    return {"kind": kind, "code": code}


BW_RIGHT = samples.RIGHT
BW_WRONG = samples.WRONG
BW_BROKEN = [s for s, _ in samples.BROKEN]

ABS = sub(ABS_EXAMPLE, "(None, None) => (free / 2.0, free / 2.0),",
          "(None, None) if free < 0.0 => (0.0, free),\n            (None, None) => (free / 2.0, free / 2.0),")
ABS_RIGHT = [
    ABS,
    sub(ABS, "let free = cb - l - r - fixed - w;", "let free = cb - (l + r + fixed + w);"),
]
ABS_WRONG = [
    # both auto margins negative: still equal (ltr puts margin-left at 0)
    ABS_EXAMPLE,
    # shrink-to-fit forgotten when all three are auto
    sub(ABS, "(None, None, None) => (static_left, shrink_to_fit),", "(None, None, None) => (static_left, 0.0),"),
    # rule 5 forgets the borders and paddings when solving for 'width'
    sub(ABS, "(Some(l), None, Some(r)) => (l, cb - l - r - ml - mr - fixed),",
        "(Some(l), None, Some(r)) => (l, cb - l - r - ml - mr),"),
    # §10.4 forgotten: negative widths kept
    sub(ABS, "if first.width < 0.0 {", "if first.width < -1.0e9 {"),
]
ABS_BROKEN = [
    sub(ABS, "let cb = input.cb_width;", "let cb: i32 = input.cb_width;"),
    sub(ABS, "pub fn abspos_width(", "pub fn abspos_width(("),
]


def block_width_find() -> dict:
    """The sampling tier holds right answers (one twice, once with only a comment added: the
    same after normalising), wrong and broken ones; the capacity tier one right answer."""
    return {
        "sampling": [c("right", BW_RIGHT[0]), c("right", BW_RIGHT[2]), c("right", BW_RIGHT[3]),
                     c("wrong", BW_WRONG[0]), c("wrong", BW_WRONG[1]),
                     c("wrong", BW_WRONG[0].replace("    ", "        ")),
                     c("broken", BW_BROKEN[0]), c("broken", BW_BROKEN[1])],
        "capacity": [c("right", BW_RIGHT[1])],
    }


def main() -> None:
    find = {"_comment": "batch tests: block_width has right answers at both tiers; abspos_width only wrong "
                        "and broken ones at the sampling tier and a right one at the capacity tier",
            "functions": {"block_width": block_width_find(),
                          "abspos_width": {"sampling": [c("wrong", ABS_WRONG[0]), c("wrong", ABS_WRONG[1]),
                                                        c("broken", ABS_BROKEN[0])],
                                           "capacity": [c("right", ABS_RIGHT[1])]}}}
    (HERE / "bank_find.json").write_text(json.dumps(find, indent=1) + "\n")
    esc = {"_comment": "batch escalation test: no right answer at the sampling tier; at the capacity tier "
                       "a right answer only under the function key `abspos_width_with_geometry_diffs`, which "
                       "the test renames to an exact geometry-difference line of the escalated prompt: the "
                       "pool answers right only when that line reached it",
           "functions": {"abspos_width": {"sampling": [c("wrong", ABS_WRONG[0]), c("wrong", ABS_WRONG[1]),
                                                       c("wrong", ABS_WRONG[2]),
                                                       c("broken", ABS_BROKEN[0]), c("broken", ABS_BROKEN[1])],
                                          "capacity": [c("wrong", ABS_WRONG[3])]},
                         "abspos_width_with_geometry_diffs": {
                             "sampling": [c("wrong", ABS_WRONG[0]), c("wrong", ABS_WRONG[1]),
                                          c("wrong", ABS_WRONG[2])],
                             "capacity": [c("right", ABS_RIGHT[1])]}}}
    (HERE / "bank_escalate.json").write_text(json.dumps(esc, indent=1) + "\n")


if __name__ == "__main__":
    main()
