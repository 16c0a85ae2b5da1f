"""`nev oracle suites fetch` and `nev oracle suite run`: the conformance suites tracks.json declares
(bench/oracle/suites.py), fetched once into the share and run in the three engines, on a lane."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lanes.base.laneopt import Default, lane_option

if TYPE_CHECKING:
    from lanes.forgeauth import Credential

_LANE = lane_option(Default.FIRST)
_REPO = click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=".",
                     show_default=True, help="The checkout whose tracks.json declares the suites.")


def _top(repo: Path) -> Path:
    from lanes.base.gitrun import Repo

    return Repo(repo).toplevel_or_self()


def _declared(top: Path) -> dict:
    from jobs import tracks

    return tracks.load(top / "tracks.json").suites


def _elsewhere(top: Path, argv: list[str], lane_index: int | None) -> int | None:
    """Off a lane with no suite store here: run `nev ARGV` on a lane (exit 3 with none answering)
    and return its status; None: run here."""
    from bench import onlane
    from bench.oracle.suites import store_root

    if store_root() is not None and lane_index is None:
        return None
    if onlane.on_lane():
        return None
    return onlane.run_on_lane(top, ["nev", *argv], lane_index=lane_index)


def _cred(top: Path, url: str) -> tuple[str, Credential]:
    """The URL without a credential, and the forge credential for it (the lane copy's `.env`, the
    environment, then what the URL carried)."""
    from lanes import forgeauth
    from lanes.base.gitrun import Repo
    from lanes.base.mask import register_secret
    from lanes.forge import split_credentials

    clean, user, token = split_credentials(url)
    register_secret(token)
    cred = forgeauth.lookup(Repo(top))
    return clean, forgeauth.Credential(cred.user or user, cred.token or token)


@click.group("suites")
def suites() -> None:
    """Conformance suites declared in tracks.json: their pinned checkouts on the share."""


@suites.command("fetch")
@click.argument("names", nargs=-1)
@_LANE
@click.option("--json", "as_json", is_flag=True, help="Print one object per suite.")
@_REPO
def suites_fetch(names: tuple[str, ...], lane_index: int | None, as_json: bool, repo: Path) -> int:
    """Put each declared suite's pinned checkout (all, or NAMES) on the share, once.

    Runs on a build lane (this worktree's copy there; here when NEV_ON_LANE is set, or when
    NEV_SUITE_STORE names a store and no --lane is given). A checkout another lane or call
    published is found without reaching the forge; otherwise it is fetched into a temporary folder
    on the share, checked to be at the pinned commit, and published by one rename, under a lock
    (a second fetch of the same pin waits, then finds it). Exit 0 done, 1 a fetch failed, 2 bad
    arguments or tracks.json, 3 no lane answered (nothing ran).
    """
    from dataclasses import replace

    from bench.oracle import store_service
    from bench.oracle import suites as s
    from lanes.base import settings, ui
    from lanes.base.errors import NevError
    from lanes.base.ui import emit_json

    top = _top(repo)
    argv = ["oracle", "suites", "fetch", *names, *(["--json"] if as_json else [])]
    status = _elsewhere(top, argv, lane_index)
    if status is not None:
        return status
    picked = s.pick(_declared(top), names, str(top / "tracks.json"))
    rows = []
    if store_service.available():
        # in a gate's jail, where the store is read-only: nev's builder outside fetches them
        for suite in picked:
            url, cred = _cred(top, suite.url)
            rows += store_service.fetch_suites([replace(suite, url=url)], cred.user, cred.token)
    else:
        root = s.store_root()
        assert root is not None   # on a lane: the share's
        if settings.given(settings.SUITE_STORE) is None and not root.parent.is_dir():
            raise NevError(f"the share {root.parent} is not there; mount it (NEV_LANE_SHARED) or "
                           "set NEV_SUITE_STORE")
        for suite in picked:
            url, cred = _cred(top, suite.url)
            r = s.fetch(replace(suite, url=url), root, cred.git_env(), say=ui.info)
            rows.append({"suite": r.suite, "commit": r.commit, "folder": str(r.folder),
                         "fetched": r.fetched, "seconds": r.seconds})
    for row in rows:
        row["seconds"] = round(float(row["seconds"]), 2)
        if not as_json:
            how = "fetched" if row["fetched"] else "found (already published)"
            click.echo(f"{row['suite']} {row['commit'][:12]}: {how} in {row['seconds']:.1f} s: "
                       f"{row['folder']}")
    if as_json:
        emit_json(rows)
    return 0


@click.group("suite")
def suite() -> None:
    """One conformance suite: run its check-layout tests in the engines."""


@suite.command("run")
@click.argument("name")
@click.argument("paths", nargs=-1)
@click.option("--engines", default="chromium,firefox,webkit", show_default=True)
@_LANE
@click.option("--json", "as_json", is_flag=True,
              help="Print the run's record (every test and engine).")
@_REPO
def suite_run(name: str, paths: tuple[str, ...], engines: str, lane_index: int | None,
              as_json: bool, repo: Path) -> int:
    """Run suite NAME's check-layout tests (all, or those under PATHS of its checkout).

    Where `nev oracle suites fetch` runs, from the checkout it published; one long-lived process
    per engine. Each page calling checkLayout is checked as `nev oracle render` checks pages
    (data-expected-width etc.). Writes per test and engine pass/fail with the failing checks to
    oracle/suites/results/NAME/ (on a lane: archive/suite-results/<worktree>/ on the share) and
    compares with the known failures (the suite's expectations file, docs/oracle.md).
    Exit 0 no change (the failures are exactly the expected ones), 1 something changed (new
    failures or new passes, listed) or a run failed, 2 bad arguments, 3 no lane answered.
    """
    from bench.oracle import suites as s
    from bench.oracle.engines import parse_engines
    from bench.oracle.vote import DEFAULT_TOLERANCE
    from lanes.base import ui
    from lanes.base.ui import emit_json

    top = _top(repo)
    argv = ["oracle", "suite", "run", name, *paths, "--engines", engines,
            *(["--json"] if as_json else [])]
    names = parse_engines(engines)
    declared = s.pick(_declared(top), [name], str(top / "tracks.json"))[0]
    status = _elsewhere(top, argv, lane_index)
    if status is not None:
        return status
    checkout = s.checkout_of(declared, s.store_root())
    expected = s.load_expectations(top / declared.expectations, names)
    tests = s.collect_tests(checkout, paths)
    ui.info(f"suite {name}: {len(tests)} tests in {', '.join(names)}")
    run = s.run_tests(checkout, tests, names, DEFAULT_TOLERANCE, say=ui.info)
    rep = s.report(declared, run, expected, names)
    if expected.path:
        rep = dataclasses.replace(rep, expectations=os.path.relpath(expected.path, top))
    written = s.write_report(top / "oracle" / "suites" / "results", rep)
    if as_json:
        emit_json({**rep.to_json(), "written": str(written)})
    else:
        for line in s.format_report(rep):
            click.echo(line)
        click.echo(f"written: {written}")
    return 1 if rep.changed else 0
