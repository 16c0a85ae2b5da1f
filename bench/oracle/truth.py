"""Fresh ground truth for the scoring step: every corpus the engine lists, built with all three
browsers (or found up to date, or in the corpus store, under the key of their versions), and never
one built with fewer.

`fresh_corpora()` is the `bench.floors.CorpusProvider` that `nev floors check|raise` and `nev
scores` use where they score (a lane). In order:

| step | when | what happens |
|---|---|---|
| browsers | one of chromium, firefox, webkit is not installed here | refused, the browser, host and Debian package named (exit 11); nothing built or scored |
| corpus folders | `corpus/<name>/` holds a corpus whose manifest names fewer than the three browsers | refused, the corpus and its engines named (exit 11); it is left for a person to remove |
| build | otherwise | `bench.oracle.build.build_many` with the three engines: up to date -> nothing; in the store -> copied; else rendered once (and published to the store) |
| check | after the build | every listed corpus is checked again (exit 11 if one is not three browsers') |

A corpus of other browser *versions* is simply stale: the build supersedes it (`corpus/.superseded/`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from pathlib import Path

from bench.oracle import engines as eng
from bench.oracle import shared, store, store_service, truth_service
from bench.oracle.store import StoreManifest
from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit
from lanes.base.ui import info

THREE = eng.ENGINES


class NoGroundTruth(NevError):
    """No three-browser ground truth to score against; nothing was scored."""

    exit_code = Exit.NO_GROUND_TRUTH


def not_ground_truth(manifest: StoreManifest | None) -> str | None:
    """Why a corpus manifest is not three-browser ground truth; None when it is (pure)."""
    if manifest is None:
        return "it has no readable manifest.json"
    engines = manifest.engines
    if not engines:
        return "its manifest names no engines"
    missing = [e for e in THREE if e not in engines]
    if missing:
        return f"it was built with {', '.join(sorted(engines))} only (no {', '.join(missing)})"
    return None


def missing_line(gone: list[str], host: str | None = None) -> str:
    """The refusal for browsers not installed where the corpora are built."""
    pkgs = " ".join(p for n in gone for p in eng.PACKAGES.get(n, ()))
    which = ", ".join(gone)
    return (f"{which} {'is' if len(gone) == 1 else 'are'} not installed on {host or socket.gethostname()}: the "
            f"floors score against corpora of {', '.join(THREE)} and a corpus built with fewer browsers is never "
            f"ground truth; install {pkgs} (on a lane: nev lane provision) and score again; nothing was scored")


def refused_line(folder: Path, why: str) -> str:
    return (f"{folder} is not ground truth for the floors: {why}; a corpus built with fewer than "
            f"{', '.join(THREE)} is never scored against; remove it and score again (the scoring step then "
            f"builds it with all three); nothing was scored")


def check_folders(names: list[str], root: Path, *, require: bool) -> None:
    """Refuse (NoGroundTruth) the first listed corpus that is not three browsers'. `require`: a
    missing folder is refused too (after the build); before it, a missing folder is the build's."""
    for n in names:
        folder = root / n
        man = store.read_manifest(folder)
        if man is None and not require:
            continue
        why = not_ground_truth(man)
        if why is not None:
            raise NoGroundTruth(refused_line(folder, why))
        if require:
            changed = store.verify(folder)
            if changed is not None:
                raise NoGroundTruth(f"{folder} is not ground truth for the floors: its bytes no longer match the "
                                    f"content hashes its manifest carries ({changed.removeprefix(str(folder) + ': ')}); "
                                    "it is never scored against; remove it and score again (the scoring step "
                                    "builds it anew); nothing was scored")


def fresh_corpora(count: int | None = None, store_root: Path | None = None,
                  environ: Mapping[str, str] | None = None,
                  say: Callable[[str], None] = info) -> Callable[[list[str], Path], None]:
    """The corpus provider of the floors (see the module's table). `count`: seeds per corpus
    (NEV_CORPUS_CASES); `store_root`: the corpus store (default: `shared.store_root`, the share's
    `corpora/` on a lane)."""
    n_cases = count if count is not None else settings.get_int(settings.CORPUS_CASES, environ)
    if n_cases < 1:
        raise NevError(f"NEV_CORPUS_CASES={n_cases}: a corpus needs at least 1 case; unset it (default "
                       f"{settings.CORPUS_CASES.default}) or give a positive number")

    def provide(names: list[str], root: Path) -> None:
        if not names:
            return
        from lanes.base import sandbox

        if sandbox.inside() and truth_service.available(environ):
            # a verify in the sandbox: nev's builder outside renders it (the jail never does)
            truth_service.request(names, n_cases, root, environ)
            check_folders(names, root, require=True)
            return
        # the engines' stack, loaded only when a corpus is asked for
        from bench.oracle.build import build_many, summary_lines

        gone = eng.missing(THREE)
        if gone:
            raise NoGroundTruth(missing_line(gone))
        check_folders(names, root, require=False)
        where = store_root if store_root is not None else shared.store_root(environ)
        if store_root is None and store_service.available(environ):
            # a gate, where the store is read-only: nev's builder outside its jail builds it
            built = store_service.build(store_service.Asked(names, THREE, n_cases), root, environ)
        else:
            built = build_many(names, root=root, engine_names=THREE, count=n_cases, store_root=where,
                               quiet=True)
        for r in built:
            for line in summary_lines(r):
                say(f"floors: {line}")
        check_folders(names, root, require=True)
    return provide
