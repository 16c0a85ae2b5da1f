"""A run's budget (tokens, pool GPU-seconds) and the meter that stops drawing before a call would pass it.

Every call is metered from its answer's `usage` (prompt and completion tokens) and its draw
seconds; its GPU-seconds are estimated from the measured throughput of the alias's pool (the
completion tokens over the peak output tokens/s of its `nev rig throughput` sweep: the share of
the whole pool the call took, decode-bound like `nev rig capacity`).

Before a call is sent its cost is estimated and reserved; a call whose estimate, with what is spent
and what the calls in flight reserved, would pass the budget is not sent (`BudgetStop`):

| what | estimate |
|---|---|
| prompt tokens | the prompt's characters x the most tokens per character an answer of the alias reported, else the characters / 3 (a later round's prompt is longer: it carries the failing cases) |
| completion tokens | n x the call's `max_tokens` when given, else n x the largest answer (per choice) seen so far x 1.25, else n x the declared candidate size (`capacity.json`) |

Until an alias's first call has answered its cost is a guess, so its calls go one at a time until then.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from lanes.base.errors import UsageError

#: a later answer may be longer than any seen: the completion estimate carries this margin
MARGIN = 1.25
#: a prompt's tokens are at most its characters / this (English and code: about 4)
CHARS_PER_TOKEN = 3
#: the completion size guessed for an alias none of whose calls has answered yet (capacity.json's candidate)
DEFAULT_ANSWER_TOKENS = 600


class Limit(StrEnum):
    TOKENS = "tokens"
    GPU_S = "gpu_s"


@dataclass(frozen=True)
class Budget:
    """What a run (or a job, across its batch stages) may spend; None: no limit of that kind."""

    tokens: int | None = None
    gpu_s: float | None = None

    def __bool__(self) -> bool:
        return self.tokens is not None or self.gpu_s is not None

    def to_json(self) -> dict[str, int | float | None]:
        return {"tokens": self.tokens, "gpu_s": self.gpu_s}

    @classmethod
    def parse(cls, tokens: str | int | None, gpu_s: str | float | None, where: str = "the budget") -> Budget:
        """From settings or options; UsageError naming `where` when one is not a non-negative number."""
        t: int | None = None
        g: float | None = None
        if tokens not in (None, ""):
            try:
                t = int(str(tokens))
            except ValueError:
                raise UsageError(f"{where}: tokens {tokens!r} is not a whole number; give e.g. 200000") from None
            if t < 0:
                raise UsageError(f"{where}: tokens {t} is negative; give 0 or more")
        if gpu_s not in (None, ""):
            try:
                g = float(str(gpu_s))
            except ValueError:
                raise UsageError(f"{where}: GPU-seconds {gpu_s!r} is not a number; give e.g. 3600") from None
            if not math.isfinite(g) or g < 0:
                raise UsageError(f"{where}: GPU-seconds {gpu_s!r} must be 0 or more")
        return cls(t, g)


class BudgetStop(Exception):
    """The next call would pass the budget: it was not sent."""

    def __init__(self, limit: Limit, message: str) -> None:
        super().__init__(message)
        self.limit = limit


@dataclass
class _Seen:
    tokens_per_char: float = 0.0
    max_out_per_choice: int = 0
    answered: int = 0
    pending: int = 0


@dataclass(frozen=True)
class Reservation:
    alias: str
    tokens: int
    gpu_s: float
    prompt_chars: int


@dataclass
class Meter:
    """The run's spend and the calls in flight's reservations (thread-safe).

    `rates`: the alias's pool's measured output tokens/s (for GPU-seconds; an alias without one
    spends no GPU-seconds, so a GPU-second budget needs every alias measured: `check_rates`)."""

    budget: Budget
    rates: Mapping[str, float] = field(default_factory=dict)
    answer_tokens: int = DEFAULT_ANSWER_TOKENS
    spent_tokens: int = 0
    spent_gpu_s: float = 0.0
    bound: Limit | None = None
    why: str | None = None
    _reserved_tokens: int = 0
    _reserved_gpu_s: float = 0.0
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def check_rates(self, aliases: Iterable[str]) -> None:
        """A GPU-second budget with an alias whose pool was never measured: UsageError naming it."""
        if self.budget.gpu_s is None:
            return
        missing = [a for a in aliases if not self.rates.get(a)]
        if missing:
            raise UsageError(f"a GPU-second budget needs the measured throughput of {', '.join(missing)}: run "
                             f"`nev rig throughput {missing[0]}` (NEV_THROUGHPUT_DIR), or give a token budget only")

    def gpu_s_of(self, alias: str, completion_tokens: int) -> float:
        rate = self.rates.get(alias)
        return completion_tokens / rate if rate else 0.0

    def estimate(self, alias: str, n: int, prompt_chars: int, max_tokens: int | None) -> tuple[int, float]:
        """The next call's tokens and GPU-seconds (see the module's table)."""
        s = self._seen.get(alias) or _Seen()
        prompt = math.ceil(prompt_chars * s.tokens_per_char if s.tokens_per_char else prompt_chars / CHARS_PER_TOKEN)
        if max_tokens:
            per_choice = max_tokens
        elif s.answered:
            per_choice = math.ceil(s.max_out_per_choice * MARGIN)
        else:
            per_choice = self.answer_tokens
        out = n * per_choice
        return prompt + out, self.gpu_s_of(alias, out)

    def _over(self, tokens: int, gpu: float) -> tuple[Limit, str] | None:
        b = self.budget
        if b.tokens is not None and self.spent_tokens + self._reserved_tokens + tokens > b.tokens:
            return Limit.TOKENS, (f"tokens: {self.spent_tokens} spent, {self._reserved_tokens} in flight, the next "
                                  f"call ~{tokens} would pass the budget of {b.tokens}")
        if b.gpu_s is not None and self.spent_gpu_s + self._reserved_gpu_s + gpu > b.gpu_s:
            return Limit.GPU_S, (f"GPU-seconds: {self.spent_gpu_s:.1f} spent, {self._reserved_gpu_s:.1f} in flight, "
                                 f"the next call ~{gpu:.1f} would pass the budget of {b.gpu_s:g}")
        return None

    def admit(self, alias: str, n: int, prompt_chars: int, max_tokens: int | None = None) -> Reservation:
        """Reserve the next call's estimated cost, or raise BudgetStop (and remember the bound).
        Waits while the alias's first call is still out (its cost is a guess until it answers)."""
        with self._cond:
            s = self._seen.setdefault(alias, _Seen())
            while not self.budget_unlimited() and s.answered == 0 and s.pending > 0 and self.bound is None:
                self._cond.wait()
            if self.bound is not None:
                raise BudgetStop(self.bound, self.why or "the budget bound")
            tokens, gpu = self.estimate(alias, n, prompt_chars, max_tokens)
            over = self._over(tokens, gpu)
            if over is not None:
                self.bound, self.why = over
                self._cond.notify_all()
                raise BudgetStop(*over)
            self._reserved_tokens += tokens
            self._reserved_gpu_s += gpu
            s.pending += 1
            return Reservation(alias, tokens, gpu, prompt_chars)

    def stop(self, limit: Limit, why: str) -> None:
        """Stop drawing: the budget left pays for nothing more (the planner's finding)."""
        with self._cond:
            self.bound, self.why = limit, why
            self._cond.notify_all()

    def budget_unlimited(self) -> bool:
        return not self.budget

    def settle(self, r: Reservation, n: int, prompt_tokens: int | None, completion_tokens: int | None) -> float:
        """The call answered (token counts) or failed (None: nothing metered); frees its reservation.
        Returns the call's GPU-seconds."""
        with self._cond:
            s = self._seen.setdefault(r.alias, _Seen())
            s.pending -= 1
            self._reserved_tokens -= r.tokens
            self._reserved_gpu_s -= r.gpu_s
            gpu = 0.0
            if prompt_tokens is not None and completion_tokens is not None:
                gpu = self.gpu_s_of(r.alias, completion_tokens)
                self.spent_tokens += prompt_tokens + completion_tokens
                self.spent_gpu_s = round(self.spent_gpu_s + gpu, 6)
                s.answered += 1
                if r.prompt_chars > 0:
                    s.tokens_per_char = max(s.tokens_per_char, prompt_tokens / r.prompt_chars)
                s.max_out_per_choice = max(s.max_out_per_choice, math.ceil(completion_tokens / max(1, n)))
            self._cond.notify_all()
            return gpu

    def to_json(self) -> dict[str, object]:
        """What the round record's and the ledger line's `budget` hold
        (`bench.ledger.LineBudget`)."""
        with self._cond:
            return {**self.budget.to_json(), "spent_tokens": self.spent_tokens,
                    "spent_gpu_s": round(self.spent_gpu_s, 3), "bound": self.bound.value if self.bound else None,
                    "why": self.why}
