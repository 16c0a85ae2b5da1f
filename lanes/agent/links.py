"""Which folders of a lane copy link into the NAS share (the seed's table), and making the links.

| in the worktree                                   | on the share                              |
|---------------------------------------------------|-------------------------------------------|
| `oracle/suites/checkouts/<suite>`                 | `suites/<suite>-<pinned commit>/`         |
| `oracle/suites/results`                           | `archive/suite-results/<worktree>/`       |
| `webgpu-cts/results`                              | `archive/webgpu-cts-results/<worktree>/`  |
| (the command's output, copied)                    | `archive/gate-logs/<worktree>/<time>-<guest>-<commit>.log` |
| (one line per model batch)                        | `ledger/<worktree>.jsonl`                 |

The share is read-only in a gate's jail but for the entries `gate_writes` names; its store is
written by nev's builders only (`bench.oracle.store_service`). So what a track's own code writes
is the copy's own folder, not a link: a `corpus/<name>` `*ground-truth` cache (its cache binary
writes it) and `webgpu-cts/cts`; a link an earlier gate made there into the share
(`ground-truth/<name>/`, `suites/webgpu-cts/`) is removed (`retired`), so the next gate builds it
in the copy.

Suite pins come from the copy's `tracks.json` (`suites`: `{"<suite>": {"commit": ...}}`, the
declaration `nev oracle suites fetch` reads, bench/oracle/suites.py). A suite's link is made
before its checkout is fetched (it dangles until then; its target is never created here, so
only a fetch's rename puts a folder there). An existing real directory at a link's place is left
alone.
"""

from __future__ import annotations

import json
import os
import re
from typing import NamedTuple

GROUND_TRUTH = re.compile(r"corpus/([A-Za-z0-9_.-]*ground-truth)\b")
SUITE_PINS = "tracks.json"   # its `suites` section


class Link(NamedTuple):
    path: str      # relative to the worktree
    target: str    # relative to the share
    make_target: bool = True   # False: the target is published by someone else (a suite's fetch)


def safe_part(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def plan(worktree: str, pins: dict[str, str], has_oracle: bool, has_webgpu_cts: bool) -> list[Link]:
    """The links a copy named `worktree` gets, from facts about its tree."""
    links: list[Link] = []
    for suite, commit in sorted(pins.items()):
        if safe_part(suite) and safe_part(commit):
            links.append(Link(f"oracle/suites/checkouts/{suite}", f"suites/{suite}-{commit}",
                              make_target=False))
    if has_oracle or any(link.path.startswith("oracle/") for link in links):  # suites declared
        links.append(Link("oracle/suites/results", f"archive/suite-results/{worktree}"))
    if has_webgpu_cts:
        links.append(Link("webgpu-cts/results", f"archive/webgpu-cts-results/{worktree}"))
    return links


def retired(copy: str, shared: str, ground_truth: set[str]) -> list[str]:
    """Remove the links earlier gates made into what is now the read-only store (the copy's
    `corpus/<name>` of each `*ground-truth` cache, `webgpu-cts/cts`); one line per link removed."""
    gone: list[str] = []
    olds = [(f"corpus/{n}", f"ground-truth/{n}") for n in sorted(ground_truth) if safe_part(n)]
    for rel, target in [*olds, ("webgpu-cts/cts", "suites/webgpu-cts")]:
        where = os.path.join(copy, rel)
        if not through_link(copy, os.path.dirname(rel)) and os.path.islink(where) \
                and os.readlink(where) == os.path.join(shared, target):
            os.unlink(where)
            gone.append(f"{rel}: no longer a link into the share's {target} (read-only in a gate; "
                        "the copy's own folder from now on)")
    return gone


def gate_log_path(worktree: str, when: str, guest: str, commit: str) -> str:
    """Where a gate's output is copied on the share (relative to it)."""
    return f"archive/gate-logs/{worktree}/{when}-{guest}-{commit[:12]}.log"


def ledger_path(worktree: str) -> str:
    return f"ledger/{worktree}.jsonl"


def gate_writes(name: str, ledger: str | None = None) -> tuple[str, ...]:
    """The share's entries a gate of copy `name` may write from its jail (relative to the share;
    `lanes.base.sandbox.gate_jail_args` binds them): its own results folders, its ledger file
    (`ledger/<name>.jsonl`, or the one its requester named with NEV_LEDGER_NAME: a plain file
    name) and the npm cache. The agent makes them before the command starts."""
    plain = name
    if ledger and "/" not in ledger and "\0" not in ledger and ledger.strip("."):
        plain = ledger
    return (f"archive/suite-results/{name}", f"archive/webgpu-cts-results/{name}",
            ledger_path(plain), "npm-cache")


def ground_truth_names(texts: list[str]) -> set[str]:
    """Every `corpus/<name>ground-truth` cache the given source texts name."""
    names: set[str] = set()
    for t in texts:
        names.update(GROUND_TRUTH.findall(t))
    return names


def read_pins(copy: str) -> dict[str, str]:
    """`{suite: commit}` from the copy's tracks.json (nev validates it; here what is malformed is
    skipped)."""
    p = os.path.join(copy, SUITE_PINS)
    try:   # never through a link (a committed `tracks.json -> /home/...` reads nothing)
        with open(os.open(p, os.O_RDONLY | os.O_NOFOLLOW), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, RecursionError, MemoryError):  # nested 200,000 deep, not UTF-8, ...
        return {}
    suites = data.get("suites") if isinstance(data, dict) else None
    if not isinstance(suites, dict):
        return {}
    return {str(k): v["commit"] for k, v in suites.items()
            if isinstance(v, dict) and isinstance(v.get("commit"), str)}


def through_link(copy: str, rel: str) -> bool:
    """A folder on the way to `rel` (relative to `copy`, itself included) is a symlink: making
    folders or links there would follow it, perhaps out of the copy."""
    p = copy
    for part in [x for x in rel.split("/") if x]:
        p = os.path.join(p, part)
        if os.path.islink(p):
            return True
        if not os.path.exists(p):
            return False
    return False


def apply_links(copy: str, shared: str, links: list[Link]) -> list[str]:
    """Create the links; returns one line per link made. Real directories are left alone."""
    made: list[str] = []
    for link in links:
        where = os.path.join(copy, link.path)
        target = os.path.join(shared, link.target)
        if os.path.islink(where):
            if os.readlink(where) == target:
                continue
            os.unlink(where)
        elif os.path.exists(where):
            continue
        if through_link(copy, os.path.dirname(link.path)):
            made.append(f"{link.path}: not linked, a folder on its way is a symlink (nothing "
                        "outside the copy is made or followed)")
            continue
        if link.make_target:
            os.makedirs(target, exist_ok=True)
        os.makedirs(os.path.dirname(where), exist_ok=True)
        os.symlink(target, where)
        made.append(f"{link.path} -> {target}")
    return made
