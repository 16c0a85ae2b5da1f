"""A landing's announcement, read from the ledger (pure once the lines are read): the function, its
floor before and after, each batch behind it (start and end, lane CPU-seconds) and per model the
candidates, compiled count, best score, tokens and draw seconds. Never a host name, address, key
or URL: the ledger holds none (refused when written), and what is announced is scrubbed and
masked once more all the same.

`read` and `build` make what every landing posts (the tick's, `nev land --approved`, a person's
`nev land --reviewed-by`: `jobs/land_after.py`) and what `nev ledger announce NAME` prints; the
webhook's format (`lanes.base.chatformat`: nev, discord, slack) shapes it for the receiver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import ledger
from bench.ledger import LedgerLine, ModelLine
from lanes.base.mask import known_secrets, mask
from lanes.base.termsafe import safe_line


@dataclass(frozen=True)
class Announcement:
    name: str  # the track (or job) whose batches these are
    functions: tuple[str, ...]
    floors: Mapping[str, tuple[str | None, str | None]]  # function -> (before, after), "P/R"
    batches: tuple[LedgerLine, ...]  # oldest first
    landed: str | None = None  # "old -> new" of main, short
    by: str | None = None  # "the tick", "reviewed by NAME", ...
    unreadable: int = 0  # ledger lines that did not read (skipped)

    def title(self) -> str:
        fns = ", ".join(self.functions) or "no generated function"
        floors = "; ".join(
            f"{f} floor {b or '-'} → {a or '-'}" for f, (b, a) in self.floors.items()
        )
        return _clean(f"{self.name} landed: {fns}" + (f" ({floors})" if floors else ""))

    def text(self) -> str:
        if not self.batches:
            lines = [f"no batch of `{self.name}` in the ledger"]
        else:
            cands = sum(_n(b.candidates) for b in self.batches)
            comp = sum(_n(b.compiled) for b in self.batches)
            tin = sum(_n(m.tokens_in) for b in self.batches for m in _models(b).values())
            tout = sum(_n(m.tokens_out) for b in self.batches for m in _models(b).values())
            draw = sum(_f(m.draw_s) for b in self.batches for m in _models(b).values())
            cpu = sum(_f(b.lane_cpu_s) for b in self.batches)
            best = max((_n(b.best) for b in self.batches), default=0)
            run = max((_n(b.cases_run) for b in self.batches), default=0)
            lines = [
                f"{len(self.batches)} batch(es): {cands} candidates, {comp} compiled, best {best}/{run}",
                f"tokens {tin:,} in / {tout:,} out, draw {draw:.1f} s, lane CPU {cpu:.1f} s",
            ]
        if self.landed:
            lines.append(f"main {self.landed}" + (f" ({self.by})" if self.by else ""))
        if self.unreadable:
            lines.append(f"{self.unreadable} ledger line(s) did not read and are left out")
        return _clean("\n".join(lines), keep_newlines=True)

    def fields(self) -> list[tuple[str, str]]:
        out = []
        for b in self.batches:
            rnd = f" round {b.round}" if b.round is not None else ""
            when = f"({_as_read(b, 'start')} → {_as_read(b, 'end')})"
            name = f"batch {_as_read(b, 'batch')}{rnd} {when}"
            rows = [f"lane CPU {_f(b.lane_cpu_s):.1f} s"]
            for alias, m in sorted(_models(b).items()):
                tokens = f"{_n(m.tokens_in):,}/{_n(m.tokens_out):,}"
                rows.append(
                    f"{alias}: {_n(m.candidates)} candidates, {_n(m.compiled)} "
                    f"compiled, best {_n(m.best)}/{_n(b.cases_run)}, tokens {tokens}, "
                    f"draw {_f(m.draw_s):.1f} s"
                )
            out.append((_clean(name), _clean("\n".join(rows), keep_newlines=True)))
        return out

    def to_json(self) -> dict[str, object]:
        """The payload's `announcement` (what a chat format shows) and the numbers behind it."""
        return {
            "title": self.title(),
            "text": self.text(),
            "fields": [list(f) for f in self.fields()],
            "name": _clean(self.name),
            "functions": list(self.functions),
            "floors": {f: {"before": b, "after": a} for f, (b, a) in self.floors.items()},
            "batches": len(self.batches),
        }

    def render(self) -> str:
        """The announcement as a person reads it (`nev ledger announce`)."""
        parts = [self.title(), self.text()]
        for name, value in self.fields():
            parts.append(f"{name}\n" + "\n".join(f"  {v}" for v in value.splitlines()))
        return "\n".join(parts)


def _models(b: LedgerLine) -> dict[str, ModelLine]:
    return b.model_lines()


def _as_read(b: LedgerLine, key: str) -> str:
    """A text field as the line holds it: "?" when the line has no such key."""
    return "?" if key in b.absent else str(b.to_json()[key])


def _n(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _f(v: object) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def _clean(text: str, keep_newlines: bool = False) -> str:
    """No address, URL, key or control character: scrubbed, masked, made safe."""
    scrubbed = ledger.scrub(text)
    masked = mask(scrubbed, extra=known_secrets())
    if keep_newlines:
        return "\n".join(safe_line(x) for x in masked.splitlines())
    return safe_line(masked)


def functions_in(lines: Sequence[LedgerLine]) -> tuple[str, ...]:
    """The functions the batches worked on, in order."""
    return tuple(dict.fromkeys(b.function for b in lines if b.function))


def build(
    name: str,
    lines: Sequence[LedgerLine],
    floors: Mapping[str, tuple[str | None, str | None]],
    landed: str | None = None,
    by: str | None = None,
    unreadable: int = 0,
) -> Announcement:
    """The announcement of `lines`: with batches, the floors of the functions they worked on;
    without, every floor given."""
    fns = functions_in(lines)
    shown = {f: v for f, v in floors.items() if f in fns} if fns else dict(floors)
    return Announcement(name, fns or tuple(floors), shown, tuple(lines), landed, by, unreadable)


def read(names: Sequence[str], shared: Path | None = None) -> tuple[list[LedgerLine], int]:
    """The ledger lines filed under each of `names` (ledger/<name>.jsonl on the share: the job's
    name for the tick's landing of a job, the track's for a track's), oldest first, and how many
    did not read; none for a ledger that is not there."""
    lines: list[LedgerLine] = []
    bad = 0
    for n in dict.fromkeys(names):
        path = ledger.ledger_dir(shared) / f"{n}.jsonl"
        if path.is_file():
            got, b = ledger.read_lenient(path)
            lines += got
            bad += b
    lines.sort(key=lambda x: str(x.start or ""))
    return lines, bad


def floors_now(repo: Path, functions: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
    """Each function's floor as `repo` holds it now, as (None, "P/R"): what `nev ledger announce`
    shows when no landing says what it was before."""
    from bench.floors import functions_of, scoring_for
    from lanes.base.errors import NevError

    try:
        fns = functions_of(scoring_for(repo))
    except (NevError, OSError):
        return {f: (None, None) for f in functions}
    have = {f.name: f for f in fns}
    out: dict[str, tuple[str | None, str | None]] = {}
    for f in functions:
        fl = have[f].floor if f in have else None
        out[f] = (None, f"{fl.cases_passed}/{fl.cases_run}" if fl else None)
    return out
