"""Conformance suites: their declaration (tracks.json's `suites`), a pinned checkout fetched once
into the share's store, a run of their check-layout pages in the engines, and what changed
against the known failures.

The store is `<NEV_LANE_SHARED>/suites` on a lane (NEV_SUITE_STORE elsewhere); a suite pinned at
commit C is published there as `<suite>-<C>/`, the folder a lane copy's
`oracle/suites/checkouts/<suite>` links to (lanes/agent/links.py). A fetcher takes
`<store>/<suite>-<C>.lock` (flock), fetches into `<store>/.tmp-<suite>-<C>-<pid>`, checks that
`git rev-parse HEAD` there is C and publishes with one rename. A published folder is found by its
`.git/HEAD` (the pinned commit, detached), without running git or reaching the forge.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.oracle import shared, store
from bench.oracle.fleet import Fleet
from bench.oracle.render import PageCheck, check_page
from lanes.base import jsonfile, settings
from lanes.base.errors import NevError
from lanes.base.gitrun import GitError, Repo
from lanes.base.jsonfile import Fields

FOLDER = "suites"   # under the share
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,80}$")
COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
PAGE_SUFFIXES = (".html", ".htm", ".xhtml")
CHECK_LAYOUT = "checkLayout("


@dataclass(frozen=True)
class Suite:
    """One declared suite: where it is fetched from, the commit it is pinned at, and the file of
    its known failures (relative to the repository)."""

    name: str
    url: str
    commit: str
    expectations: str

    @property
    def folder(self) -> str:
        """Its folder in the store (and the target of the lane copy's link)."""
        return f"{self.name}-{self.commit}"


def default_expectations(name: str) -> str:
    return f"oracle/suites/{name}.expected.json"


def parse_section(f: Fields, raw: object) -> dict[str, Suite]:
    """tracks.json's `suites`: `{NAME: {"url": ..., "commit": 40 hex, "expectations": path}}`."""
    suites: dict[str, Suite] = {}
    for name, entry in f.obj(raw, "suites").items():
        where = f"suites.{name}"
        if not NAME.match(name):
            raise f.fail(where, "is not a suite name (letters, digits, '_', '.', '-')")
        f.known(f.obj(entry, where), ("url", "commit", "expectations"), where)
        url = f.get(entry, "url", str, where)
        if not url.strip():
            raise f.fail(f"{where}.url", "is empty; give the suite's git URL on the forge")
        commit = f.get(entry, "commit", str, where)
        if not COMMIT.match(commit):
            raise f.fail(f"{where}.commit", "must be a whole commit id (40 lowercase hex digits)")
        exp = f.get(entry, "expectations", str, where, required=False) or default_expectations(name)
        parts = exp.split("/")
        if exp.startswith("/") or ".." in parts or not exp.strip():
            raise f.fail(f"{where}.expectations",
                         "must be a file inside the checkout (relative, no '..')")
        suites[name] = Suite(name=name, url=url, commit=commit, expectations=exp)
    return suites


def pick(suites: Mapping[str, Suite], names: Sequence[str], label: str) -> list[Suite]:
    """The named suites (every declared one when none is named)."""
    if not suites:
        raise NevError(f"{label} declares no suites; add a `suites` section (docs/oracle.md)", 2)
    for n in names:
        if n not in suites:
            raise NevError(f"suite {n!r} is not declared in {label}; "
                           f"declared: {', '.join(sorted(suites))}", 2)
    return [suites[n] for n in (names or sorted(suites))]


def store_root(environ: Mapping[str, str] | None = None) -> Path | None:
    """NEV_SUITE_STORE when set; on a lane the share's `suites/`; else None (run it on a lane)."""
    given = settings.given(settings.SUITE_STORE, environ)
    if given:
        return Path(given).expanduser()
    if settings.get(settings.ON_LANE, environ):
        return settings.path(settings.LANE_SHARED, environ) / FOLDER
    return None


# --- fetching ---------------------------------------------------------------------------------

def published(folder: Path, commit: str) -> bool:
    """`folder` is the checkout of `commit` (its detached HEAD), read without running git."""
    try:
        return (folder / ".git" / "HEAD").read_text(encoding="ascii").strip() == commit
    except (OSError, UnicodeDecodeError):
        return False


@dataclass(frozen=True)
class Fetched:
    suite: str
    commit: str
    folder: Path
    fetched: bool        # False: found published (nothing fetched)
    seconds: float


def fetch(suite: Suite, root: Path, git_env: Mapping[str, str],
          say: Callable[[str], None] = lambda _: None) -> Fetched:
    """The suite's pinned checkout in the store `root`, fetched by this call only when no one
    published it before (`git_env`: the forge credential for git)."""
    t0 = time.monotonic()
    folder = root / suite.folder
    if not published(folder, suite.commit):
        with shared.locked(root, suite.folder, say, what="fetch of this suite"):
            if not published(folder, suite.commit):
                _fetch_and_publish(suite, root, folder, git_env)
                return Fetched(suite.name, suite.commit, folder, True, time.monotonic() - t0)
    shared.touch(folder)
    return Fetched(suite.name, suite.commit, folder, False, time.monotonic() - t0)


def _fetch_and_publish(suite: Suite, root: Path, folder: Path, git_env: Mapping[str, str]) -> None:
    tmp = root / f"{store.TMP_PREFIX}{suite.folder}-{os.getpid()}"
    tmp.mkdir(parents=True)
    try:
        repo = Repo(tmp, env=dict(git_env), timeout=3600.0)
        repo.git("init", "-q")
        # One commit, shallow; a forge refusing a want by id is asked for its branches and tags.
        shallow = repo.git("fetch", "-q", "--depth", "1", suite.url, suite.commit, check=False)
        if shallow.returncode != 0:
            repo.git("fetch", "-q", suite.url, "+refs/heads/*:refs/remotes/origin/*",
                     "+refs/tags/*:refs/tags/*")
        if repo.git("checkout", "-q", "--detach", suite.commit, check=False).returncode != 0:
            raise NevError(f"suite {suite.name}: commit {suite.commit} is not in its repository; "
                           "fix the pin in tracks.json")
        head = repo.out("rev-parse", "HEAD")
        if head != suite.commit:
            raise NevError(f"suite {suite.name}: the checkout is at {head}, not the pinned "
                           f"{suite.commit}; nothing published")
        _make_room(folder)
        os.rename(tmp, folder)
    except GitError as e:
        raise NevError(f"suite {suite.name}: fetching it failed ({e.message}); check its url in "
                       "tracks.json and the forge credential") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _make_room(folder: Path) -> None:
    """An empty folder at the published place (made by an older link) goes; anything else stays
    and refuses the publish."""
    if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
        folder.rmdir()
    elif folder.exists() or folder.is_symlink():
        raise NevError(f"{folder} is there but is not the pinned checkout; "
                       "move it away and fetch again")


# --- running ----------------------------------------------------------------------------------

def checkout_of(suite: Suite, root: Path | None) -> Path:
    """The suite's published checkout in the store, or a one-line error saying how to get it."""
    if root is None:
        raise NevError("no suite store here; run it on a lane (--lane N) or set NEV_SUITE_STORE", 2)
    folder = root / suite.folder
    if not published(folder, suite.commit):
        raise NevError(f"suite {suite.name} at {suite.commit[:12]} is not in {root}; "
                       "run `nev oracle suites fetch` first")
    return folder


def is_test(text: str) -> bool:
    """A check-layout test calls `checkLayout(selector)`; other pages (references, resources,
    support files) are not tests."""
    return CHECK_LAYOUT in text


def collect_tests(checkout: Path, paths: Sequence[str]) -> list[str]:
    """The check-layout tests under `paths` of the checkout (all of it when none), relative."""
    base = checkout.resolve()
    found: set[str] = set()
    for arg in paths or ["."]:
        p = (base / arg).resolve()
        if p != base and base not in p.parents:
            raise NevError(f"{arg}: not inside the suite's checkout; give paths relative to it", 2)
        if p.is_dir():
            files = [q for q in p.rglob("*")
                     if q.suffix.lower() in PAGE_SUFFIXES and ".git" not in q.parts]
        elif p.is_file():
            files = [p]
        else:
            raise NevError(f"{arg}: no such page or folder in the suite's checkout", 2)
        for q in files:
            if q.is_file() and is_test(q.read_text(encoding="utf-8", errors="replace")):
                found.add(q.relative_to(base).as_posix())
    if not found:
        where = ", ".join(paths or ["the suite"])
        raise NevError(f"no check-layout tests (pages calling checkLayout) in {where}", 2)
    return sorted(found)


@dataclass(frozen=True)
class Failure:
    """One failing check of a test in one engine."""

    element: str
    check: str
    want: float
    got: float | None

    def to_json(self) -> dict[str, object]:
        return {"element": self.element, "check": self.check, "want": self.want, "got": self.got}


@dataclass(frozen=True)
class Outcome:
    """A test in one engine: passed, or its failing checks."""

    passed: bool
    failures: list[Failure] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"pass": self.passed, "failures": [f.to_json() for f in self.failures]}


@dataclass(frozen=True)
class SuiteRun:
    """A run: the engines' versions, and per test and engine its outcome."""

    versions: dict[str, str]
    tests: dict[str, dict[str, Outcome]]


def engine_failures(checked: PageCheck, engine: str) -> list[Failure]:
    """The failing checks of one engine in one page's `check_page` answer (pure)."""
    out = []
    for key, e in checked.elements.items():
        for attr, c in e.checks.items():
            if engine in c.failed_in:
                out.append(Failure(key, attr, c.want, c.got.get(engine)))
    return out


def run_tests(checkout: Path, tests: Sequence[str], engine_names: Sequence[str], tol: float,
              say: Callable[[str], None] = lambda _: None) -> SuiteRun:
    """Every test in every engine (one long-lived process each): per test and engine, pass or the
    failing checks."""
    rows: dict[str, dict[str, Outcome]] = {}
    with Fleet(engine_names) as fleet:
        versions = fleet.versions()
        for i, t in enumerate(tests, 1):
            page = checkout / t
            measured = fleet.each(lambda n, e, p=page: e.render_page(p))  # type: ignore[misc]
            checked = check_page(measured, tol)
            rows[t] = {}
            for n in engine_names:
                fails = engine_failures(checked, n)
                rows[t][n] = Outcome(not fails, fails)
            if i % 50 == 0:
                say(f"{i}/{len(tests)} tests")
    return SuiteRun(versions, rows)


# --- expectations -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Expectations:
    """The known failures per engine (test paths relative to the suite's checkout)."""

    failures: dict[str, frozenset[str]] = field(default_factory=dict)
    path: str | None = None       # the file read (None: there is none)


def load_expectations(path: Path, engine_names: Sequence[str]) -> Expectations:
    """`{"failures": {"<engine>": ["<test>", ...]}}`; a missing file expects every test to pass."""
    if not path.exists():
        return Expectations()
    data = jsonfile.load(path, "suite expectations file")
    f = Fields(path)
    top = f.known(f.obj(data, "(top level)"), ("failures",), "")
    raw = f.known(f.get(top, "failures", dict, "", required=False, default={}), engine_names,
                  "failures")
    return Expectations({n: frozenset(f.str_list(raw, n, "failures")) for n in raw}, str(path))


def changes(results: Mapping[str, Mapping[str, Outcome]], expected: Expectations,
            engine_names: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """Per engine, among the tests run: the new failures (failing, not expected to) and the new
    passes (expected to fail, passing). Expected failures of tests not run count for nothing.

    | test fails now | expected to fail | reported as |
    |---|---|---|
    | yes | no | new failure |
    | no | yes | new pass |
    | yes | yes | (expected: no change) |
    | no | no | (no change) |
    """
    out: dict[str, dict[str, list[str]]] = {}
    for n in engine_names:
        known = expected.failures.get(n, frozenset())
        failing = {t for t, r in results.items() if not r[n].passed}
        out[n] = {"new_failures": sorted(failing - known),
                  "new_passes": sorted(t for t in results if t in known and t not in failing)}
    return out


def changed(ch: Mapping[str, Mapping[str, list[str]]]) -> bool:
    return any(v["new_failures"] or v["new_passes"] for v in ch.values())


@dataclass(frozen=True)
class Report:
    """A run's record (`oracle/suites/results/<suite>/...json`, `--json`): per test and engine
    its outcome, the changes against the known failures, a count per engine."""

    suite: str
    commit: str
    engines: dict[str, str]
    expectations: str | None
    tests: dict[str, dict[str, Outcome]]
    summary: dict[str, dict[str, int]]
    changes: dict[str, dict[str, list[str]]]
    changed: bool

    def to_json(self) -> dict[str, object]:
        return {"suite": self.suite, "commit": self.commit, "engines": self.engines,
                "expectations": self.expectations,
                "tests": {t: {n: o.to_json() for n, o in r.items()} for t, r in self.tests.items()},
                "summary": self.summary, "changes": self.changes, "changed": self.changed}


def report(suite: Suite, run: SuiteRun, expected: Expectations,
           engine_names: Sequence[str]) -> Report:
    """The run's record: per test and engine, the changes, a count per engine."""
    tests = run.tests
    ch = changes(tests, expected, engine_names)
    summary = {n: {"pass": sum(1 for r in tests.values() if r[n].passed),
                   "fail": sum(1 for r in tests.values() if not r[n].passed),
                   "new_failures": len(ch[n]["new_failures"]),
                   "new_passes": len(ch[n]["new_passes"])}
               for n in engine_names}
    return Report(suite.name, suite.commit, run.versions, expected.path, tests, summary, ch,
                  changed(ch))


def format_report(rep: Report) -> list[str]:
    """The summary table, then each change with its failing checks, then the verdict."""
    lines = [f"suite {rep.suite} at {rep.commit[:12]}: {len(rep.tests)} tests; "
             f"expectations: {rep.expectations or 'none (every test expected to pass)'}",
             f"{'engine':<9} {'pass':>5} {'fail':>5} {'new failures':>13} {'new passes':>11}"]
    for n, s in rep.summary.items():
        lines.append(f"{n:<9} {s['pass']:>5} {s['fail']:>5} {s['new_failures']:>13} "
                     f"{s['new_passes']:>11}")
    for n, ch in rep.changes.items():
        for t in ch["new_failures"]:
            checks = "; ".join(f"{f.element} {f.check}={f.want:g} got "
                               + ("-" if f.got is None else f"{f.got:g}")
                               for f in rep.tests[t][n].failures)
            lines.append(f"new failure  {n:<9} {t}: {checks}")
        for t in ch["new_passes"]:
            lines.append(f"new pass     {n:<9} {t}")
    lines.append("changed" if rep.changed else "no change")
    return lines


def write_report(results_dir: Path, rep: Report) -> Path:
    """`<results>/<suite>/<UTC time>-<commit12>.json` (results: the copy's
    `oracle/suites/results`, on a lane a link to `archive/suite-results/<worktree>/`)."""
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = results_dir / rep.suite / f"{when}-{rep.commit[:12]}.json"
    jsonfile.write_atomic(path, rep.to_json())
    return path
