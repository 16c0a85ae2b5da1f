"""`--lane N`, the option every command that picks lanes takes: one wording, and one rule for what
leaving it out means, named in each help from `Default`.

The rule: left out, a command that acts on each lane acts on every lane (`EVERY`); one that acts
on one lane takes the lane its subject is on when there is one (`DAGU`: the Dagu lane; `WRITER`:
the lane that has the writer), else the first lane that answers (`FIRST`); `HERE` reads this
machine's own (the inventory snapshot), and `REQUIRED` has no default."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

import click

WORDING = "Lane N of the lanes file, counted from 0"


class Default(Enum):
    EVERY = "every lane"
    FIRST = "the first that answers"
    DAGU = "the Dagu lane: NEV_DAGU_LANE, else NEV_LANE_SSH's, else 0"
    WRITER = "the lane that has the writer"
    HERE = "this machine's, not a lane's"
    REQUIRED = "none, required"


def help_text(default: Default) -> str:
    return f"{WORDING} (default: {default.value})."


def lane_option(default: Default) -> Callable[[Any], Any]:
    """The `--lane` option (parameter `lane_index`) with the one wording and `default` named."""
    return click.option("--lane", "lane_index", type=int, metavar="N", help=help_text(default),
                        required=default is Default.REQUIRED)
