"""`nev scores`: every generated function against its corpus, as a table or JSON.

`to_json`/`from_json` are also the wire form of `lane_scorer`, the scorer the landing passes to
`bench.floors.raise_floors`: it runs `nev scores --json` on a build lane and reads the scores
back with `from_json`.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Callable, Mapping

from bench.floors import Judgement, Scorer, Scoring, evaluate
from crates_bridge.runner import Score
from lanes.base.errors import NevError

COLUMNS = ("function", "passed/run", "floor", "batch", "status")


def to_json(judgements: list[Judgement]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for j in judgements:
        s = j.score
        out.append({
            "function": j.function,
            "cases_passed": s.cases_passed if s else None,
            "cases_run": s.cases_run if s else None,
            "ns_per_case": s.ns_per_case if s else None,
            "corpus": s.corpus if s else None,
            "error": s.error if s else None,
            "floor": {"cases_passed": j.held_passed, "cases_run": j.held_run},
            "floor_file": j.floor.to_json() if j.floor else None,
            "batch": j.batch,
            "status": j.status,
            "reason": j.reason,
        })
    return out


def from_json(text: str) -> list[Score]:
    """Scores from `nev scores --json` output (what a lane scorer reads back)."""
    try:
        rows = json.loads(text)
        return [Score(function=r["function"], cases_run=r.get("cases_run") or 0,
                      cases_passed=r.get("cases_passed") or 0, ns_per_case=r.get("ns_per_case"),
                      corpus=r.get("corpus"), error=r.get("error"))
                for r in rows if r.get("status") != "unscored"]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise NevError(f"the lane's `nev scores --json` output is not a score list ({e}); "
                       "check that the lane runs this version of nev") from None


def table(judgements: list[Judgement]) -> list[str]:
    rows = [COLUMNS]
    for j in judgements:
        s = j.score
        got = f"{s.cases_passed}/{s.cases_run}" if s and not s.error else "-"
        floor = f"{j.held_passed}/{j.held_run}" if j.held_run is not None else f"{j.held_passed} (provenance)"
        rows.append((j.function, got, floor, j.batch or "-", j.status))
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    for j in judgements:
        if j.status in ("error", "drop", "shrunk", "zero", "unscored"):
            lines.append(f"{j.function}: {j.reason}")
    return lines


def show(req: Scoring, scorer: Scorer, as_json: bool, echo: Callable[[str], None] = print) -> int:
    judgements = evaluate(req, scorer)
    if as_json:
        echo(json.dumps(to_json(judgements), indent=2))
    else:
        for line in table(judgements):
            echo(line)
    return 0


def lane_scorer(req: Scoring, environ: Mapping[str, str] | None = None) -> list[Score]:
    """A `Scorer` that runs `nev scores --json` on the first build lane that answers, in a lane
    copy of `req.repo` (which builds or finds its corpora there: fresh three-browser ground truth),
    with the NEV_* settings of `environ` that travel to a lane (`bench.onlane.forwarded_env`);
    NoLaneError (exit 3) when none answers. A failure there is one NevError carrying the lane's
    last line (and its exit 11 when it had no three-browser ground truth); nothing is written."""
    import sys

    from bench import onlane
    from lanes import gate, lanesfile, payload  # the SSH stack, loaded only when a lane scores
    from lanes.base.errors import NoLaneError
    from lanes.base.exitcodes import Exit
    from lanes.forge import forge_for

    lf = lanesfile.configured(require=True)
    picked = gate.pick_lane(lf, None)
    if picked is None:
        raise NoLaneError("no build lane answered to score the floors; nothing was written")
    lane, conn = picked
    buf = bytearray()
    err = bytearray()
    text = codecs.getincrementaldecoder("utf-8")("surrogateescape")

    def on_stderr(b: bytes) -> None:
        err.extend(b)
        sys.stderr.write(text.decode(b))  # the lane's words: through the terminal-safe stream
        sys.stderr.flush()

    try:
        wt = payload.Worktree.open(req.repo)
        env = onlane.forwarded_env(os.environ if environ is None else environ)
        out = gate.gate_on_lane(lane, conn, wt, ["nev", "scores", "--json"], forge=forge_for(wt.repo, lf),
                                on_stdout=buf.extend, on_stderr=on_stderr, extra_env=env)
    finally:
        conn.close()
    if out.status != 0:
        last = next((ln.strip() for ln in reversed(err.decode(errors="replace").splitlines()) if ln.strip()), "")
        why = f": {last.removeprefix('nev: ')}" if last else ""
        code = Exit.NO_GROUND_TRUTH if out.status == Exit.NO_GROUND_TRUTH else Exit.FAILED
        raise NevError(f"`nev scores --json` on {lane.label} exited {out.status}{why}; nothing was written", code)
    return from_json(buf.decode(errors="replace"))
