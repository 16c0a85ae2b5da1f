"""Score floors: the ratchet on every generated function's score.

The decisions (`judge`, `raise_to`) are pure functions over plain values. The
scoring step is pluggable (`Scorer`): `nev floors check|raise` and `nev scores`
score locally when they run on a lane (`NEV_ON_LANE`, the gate), against corpora
the three browsers built (`bench.oracle.truth`); the landing passes a scorer that
runs `nev scores --json` on the build lane (see docs/floors.md). Raising commits
through `lanes.base.gitrun`, the only place that runs git.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from crates_bridge.errors import BridgeError
from crates_bridge.registry import Floor, GeneratedFunction, discover, write_floor
from crates_bridge.runner import SCORE_CHECK, Score, list_caches, score_generated
from crates_bridge.workspace import Workspace
from lanes.base import settings
from lanes.base.errors import NevError, NoLaneError
from lanes.base.gitrun import Repo

FAILING = ("drop", "shrunk", "zero", "error", "unscored")
_SCORE_FIELDS = ("function", "cases_run", "cases_passed", "ns_per_case", "corpus", "candidate",
                 "error")


@dataclass(frozen=True)
class Scoring:
    """What one scoring run needs: the repository, its engine workspace, its corpora."""

    repo: Path
    engine: Path
    corpus_root: Path

    @property
    def generated_dir(self) -> Path:
        return Workspace(self.engine).generated_dir


#: Scores every generated function of `Scoring.engine` against `Scoring.corpus_root`.
Scorer = Callable[[Scoring], list[Score]]
#: Makes sure each named corpus exists under the root (the oracle: cache hit or rebuild).
CorpusProvider = Callable[[list[str], Path], None]


@dataclass(frozen=True)
class Judgement:
    function: str
    status: str  # ok | better | drop | shrunk | zero | error | unscored
    reason: str
    score: Score | None
    floor: Floor | None
    held_passed: int
    held_run: int | None
    batch: str | None

    @property
    def failed(self) -> bool:
        return self.status in FAILING


# ---- pure decisions ----

def held_to(floor: Floor | None, provenance_passed: int) -> tuple[int, int | None]:
    """The numbers a function is held to: never below its provenance record's cases_passed."""
    if floor is None:
        return provenance_passed, None
    return max(floor.cases_passed, provenance_passed), floor.cases_run


def judge(fn: GeneratedFunction, score: Score | None) -> Judgement:
    passed_min, run_min = held_to(fn.floor, fn.provenance.cases_passed)

    def j(status: str, reason: str) -> Judgement:
        return Judgement(fn.name, status, reason, score, fn.floor, passed_min, run_min, fn.provenance.batch)

    if score is None:
        return j("unscored", "the runner printed no score for it")
    if score.error:
        return j("error", score.error)
    if score.cases_passed == 0:
        return j("zero", f"passes no case of {score.cases_run} (a floor of zero cannot hide that)")
    if score.cases_passed < passed_min:
        src = "floor" if fn.floor and fn.floor.cases_passed >= fn.provenance.cases_passed else "provenance record"
        return j("drop", f"passes {score.cases_passed} cases, below its {src}'s {passed_min}")
    if run_min is not None and score.cases_run < run_min and score.cases_passed == passed_min:
        return j("shrunk", f"its corpus holds {score.cases_run} cases, fewer than the floor's {run_min}, "
                           f"and the passing count only holds ({score.cases_passed})")
    if raise_to(fn, score) is not None:
        return j("better", f"{score.cases_passed}/{score.cases_run} is above the floor")
    return j("ok", "holds its floor")


def raise_to(fn: GeneratedFunction, score: Score) -> Floor | None:
    """The new floor when the fresh score is above the current one; None otherwise. Never lowers."""
    if score.error or score.cases_passed == 0:
        return None
    passed_min, _ = held_to(fn.floor, fn.provenance.cases_passed)
    if score.cases_passed < passed_min:
        return None
    if fn.floor is None:
        return Floor(score.cases_passed, score.cases_run)
    if score.cases_run < fn.floor.cases_run:
        # Writing the fresh count would lower cases_run; the old floor stays.
        return None
    if score.cases_passed > fn.floor.cases_passed or score.cases_run > fn.floor.cases_run:
        return Floor(max(score.cases_passed, fn.floor.cases_passed), score.cases_run)
    return None


def judge_all(functions: list[GeneratedFunction], scores: list[Score]) -> list[Judgement]:
    by_name = {s.function: s for s in scores}
    return [judge(fn, by_name.get(fn.name)) for fn in functions]


# ---- the scoring step ----

def require_corpora(names: list[str], root: Path) -> None:
    """A corpus provider for corpora the caller made itself (tests: the engine's reference corpora):
    each must already be there. Never the floors' own: they use `bench.oracle.truth.fresh_corpora`."""
    missing = [n for n in names if not (root / n / "manifest.json").is_file()]
    if missing:
        raise NevError(f"no corpus for {', '.join(missing)} under {root}; build each with "
                       f"`nev oracle build NAME` (on a lane), then score again")


def local_scorer(builder: Workspace | None = None, corpora: CorpusProvider = require_corpora) -> Scorer:
    """Score here: build the engine (or use `builder`'s build) and run generated_score_check.

    `builder` lets tests reuse one build of an identical engine for many fixture repositories.
    """
    def score(req: Scoring) -> list[Score]:
        ws = builder or Workspace(req.engine)
        try:
            corpora(list_caches(ws), req.corpus_root)
            from bench.oracle import truth_service
            from lanes.base import sandbox

            if sandbox.inside() and truth_service.available():
                # a verify's jail: the judge is the service outside it, which holds the answers
                binary = ws.build().binary(SCORE_CHECK)
                got = truth_service.request_scores(binary, req.generated_dir)
                return [Score(**{k: v for k, v in s.items() if k in _SCORE_FIELDS}) for s in got]
            return score_generated(ws, req.corpus_root, generated_dir=req.generated_dir)
        except BridgeError as e:
            raise NevError(str(e)) from None
    return score


def no_lane_scorer(req: Scoring) -> list[Score]:
    raise NoLaneError("scoring runs on a build lane and no lane scorer answered; run it there "
                      "(`nev lane run WORKTREE nev floors check`) or set NEV_ON_LANE=1 to score here; "
                      "nothing was written")


def default_scorer(environ: Mapping[str, str] | None = None) -> Scorer:
    """On a lane (NEV_ON_LANE): score here, on fresh ground truth (`bench.oracle.truth.fresh_corpora`:
    every listed corpus built by the three browsers, or found under the key of their versions).
    Elsewhere the lane scorer, which is the caller's to pass."""
    if settings.get_flag(settings.ON_LANE, environ):
        # the oracle's stack, loaded only where it builds
        from bench.oracle.truth import fresh_corpora

        return local_scorer(corpora=fresh_corpora(environ=environ))
    return no_lane_scorer


def scoring_for(repo: Path, environ: Mapping[str, str] | None = None) -> Scoring:
    env = os.environ if environ is None else environ
    return Scoring(repo, settings.path_under(settings.ENGINE_DIR, repo, env),
                   settings.path_under(settings.CORPUS_DIR, repo, env))


def functions_of(req: Scoring) -> list[GeneratedFunction]:
    try:
        return discover(req.generated_dir)
    except BridgeError as e:
        raise NevError(str(e)) from None


def evaluate(req: Scoring, scorer: Scorer) -> list[Judgement]:
    fns = functions_of(req)
    return judge_all(fns, scorer(req))


# ---- commands ----

def describe(j: Judgement) -> str:
    s = j.score
    got = f"{s.cases_passed}/{s.cases_run}" if s and not s.error else "-"
    run = f"/{j.held_run}" if j.held_run is not None else ""
    return f"{j.function:<24} {got:>11}  floor {j.held_passed}{run:<8} {j.status:<8} {j.reason}"


def check(req: Scoring, scorer: Scorer, echo: Callable[[str], None] = print) -> int:
    """`nev floors check`: 0 when every function holds its floor; 1 (one line) otherwise."""
    judgements = evaluate(req, scorer)
    for j in judgements:
        echo(describe(j))
    bad = [j for j in judgements if j.failed]
    if bad:
        raise NevError("floors broken: " + "; ".join(f"{j.function} {j.status} ({j.reason})" for j in bad)
                       + "; fix the function (a floor comes down only by a person's reviewed edit)")
    return 0


@dataclass(frozen=True)
class Raise:
    function: str
    path: Path
    old: Floor | None
    new: Floor

    def line(self) -> str:
        old = f"{self.old.cases_passed}/{self.old.cases_run}" if self.old else "none"
        return f"{self.function}: {old} -> {self.new.cases_passed}/{self.new.cases_run}"


def plan_raises(functions: list[GeneratedFunction], judgements: list[Judgement]) -> list[Raise]:
    out = []
    for fn, j in zip(functions, judgements, strict=True):
        if j.score is None:
            continue
        new = raise_to(fn, j.score)
        if new is not None:
            out.append(Raise(fn.name, fn.floor_path, fn.floor, new))
    return out


def raise_floors(req: Scoring, scorer: Scorer, print_raises: bool = False,
                 echo: Callable[[str], None] = print, branch: str = "main") -> int:
    """`nev floors raise`: write each floor the fresh score is above; one commit of only those files."""
    repo = Repo(req.repo)
    head_branch = repo.git("symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
    if head_branch != branch:
        raise NevError(f"{req.repo} is on {head_branch or 'a detached HEAD'}, not {branch}; "
                       f"floors are raised on {branch} only; nothing was written")
    if repo.out("status", "--porcelain", "--untracked-files=no"):
        raise NevError(f"{req.repo} has uncommitted changes; commit or stash them first; nothing was written")
    head = repo.rev("HEAD")
    fns = functions_of(req)
    judgements = judge_all(fns, scorer(req))  # a NevError here (no lane, a failed build) writes nothing
    bad = [j for j in judgements if j.failed]
    if bad:
        raise NevError("not raising: " + "; ".join(f"{j.function} {j.status} ({j.reason})" for j in bad)
                       + "; nothing was written")
    raises = plan_raises(fns, judgements)
    if not raises:
        echo("floors: no floor to raise")
        return 0
    if repo.rev("HEAD") != head or repo.out("status", "--porcelain", "--untracked-files=no"):
        raise NevError(f"{req.repo} changed while scoring; run the raise again; nothing was written")
    paths = [str(r.path.relative_to(req.repo)) for r in raises]
    msg = "floors: raise " + ", ".join(r.line() for r in raises)
    try:
        for r in raises:
            write_floor(r.path, r.new)
        repo.git("add", "--", *paths)
        repo.git("commit", "-q", "-m", msg, "--", *paths)
    except BaseException:
        _undo(repo, raises, paths)
        raise
    if print_raises:
        for r in raises:
            echo(r.line())
    echo(f"floors: raised {len(raises)} in {repo.out('rev-parse', '--short', 'HEAD')}")
    return 0


def _undo(repo: Repo, raises: list[Raise], paths: list[str]) -> None:
    """Put the floor files back as they were when the commit did not happen."""
    repo.git("reset", "-q", "--", *paths, check=False)
    for r, p in zip(raises, paths, strict=True):
        if r.old is None:
            r.path.unlink(missing_ok=True)
        else:
            repo.git("checkout", "--", p, check=False)
