"""The shared store written only by nev (docs/sandbox.md, "A gate's jail"): in a gate's jail the
share's store (`corpora/`, `ground-truth/`, `suites/`) is read-only, so what a gate's `nev oracle
build`, the floors' ground truth or `nev oracle suites fetch` would put there, nev's own builder
does outside the jail, on the gate's request, and the gate copies the result in.

Outside (`serve`): `nev oracle serve-store --fd N`, started by the lane agent on the gate's first
connection (`lanes.agent.storeserve`) with the listening socket, in a folder of the gate's payload
that the jail sees read-only. It runs as the lane user with the gate's environment (never its
`.env`): the corpora it renders or finds go to the store as any build outside a gate does (their
digests recorded, `shared.Digests`), then into its own folder, where the gate reads them.

Inside (`build`, `fetch_suites`, called where `NEV_STORE_SOCKET` names a socket that is there):
one JSON request line, `{"op": "build", "corpora": [...], "shard": S, "engines": [...], "count": N}`
or `{"op": "suites", "suites": [{"name", "url", "commit"}], "user": U, "token": T}`; the answer is
any number of `{"say": LINE}` lines (the builder's progress, shown on the gate's stderr), then one
`{"ok": true, ...}` or `{"error": "...", "exit": N}`. The builder never writes into the jail's
folders, and the gate checks every corpus it copies against its manifest's hashes.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from bench.oracle.truth_service import read_line
from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit
from lanes.base.ui import info

if TYPE_CHECKING:
    from bench.oracle.build import BuildResult
    from bench.oracle.suites import Suite

MAX_REQUEST = 64 * 1024
MAX_LINE = 4 * 1024 * 1024
MAX_COUNT = 100_000
STAGING = "corpora"  # in the service's folder: the corpora it leaves for the gate


def available(environ: Mapping[str, str] | None = None) -> bool:
    """Inside a gate whose agent serves it: its socket named and there."""
    path = settings.given(settings.STORE_SOCKET, environ)
    return bool(path) and os.path.exists(str(path))


# ---- outside: the builder ----


class _Say:
    """sys.stderr of the builder while it answers: each whole line goes to the gate as `say`."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buf = ""

    def write(self, text: str) -> int:
        self.buf += text
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            _send(self.conn, {"say": line})
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _send(conn: socket.socket, obj: dict) -> None:
    try:
        conn.sendall((json.dumps(obj) + "\n").encode())
    except OSError:
        pass


def serve(fd: int) -> int:
    """Answer the gate's requests on the listening socket `fd` until the agent stops this process
    (or it ends: the agent gone)."""
    sock = socket.socket(fileno=fd)
    sock.settimeout(1.0)
    parent = os.getppid()
    while os.getppid() == parent:
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            continue
        except OSError:
            return 0
        with conn:
            conn.settimeout(None)
            err = sys.stderr
            sys.stderr = _Say(conn)  # type: ignore[assignment]
            try:
                reply = _answer(read_line(conn, MAX_REQUEST))
            finally:
                sys.stderr = err
            _send(conn, reply)
    return 0


def _answer(line: bytes) -> dict:
    try:
        req = json.loads(line)
    except (ValueError, RecursionError):
        return {"error": "the request is not one JSON line", "exit": int(Exit.FAILED)}
    op = req.get("op") if isinstance(req, dict) else None
    try:
        if op == "build":
            return _build(req)
        if op == "suites":
            return _suites(req)
    except NevError as e:
        return {"error": str(e), "exit": int(e.exit_code)}
    except Exception as e:  # noqa: BLE001 - the answer names it; the gate fails on it
        return {"error": f"nev's store builder failed: {type(e).__name__}: {e}", "exit": 1}
    return {"error": "op must be build or suites", "exit": int(Exit.FAILED)}


def _names(v: object, what: str) -> list[str]:
    if (
        not isinstance(v, list)
        or not v
        or len(v) > 64
        or not all(isinstance(n, str) and n and "/" not in n and not n.startswith(".") for n in v)
    ):
        raise NevError(f"{what} must be a list of names", Exit.FAILED)
    return list(v)


def _build(req: dict) -> dict:
    from bench.oracle import shared
    from bench.oracle.build import build_many
    from bench.oracle.cases import Shard
    from bench.oracle.engines import ENGINES

    corpora = _names(req.get("corpora"), "corpora")
    engines = _names(req.get("engines"), "engines")
    if any(e not in ENGINES for e in engines):
        raise NevError(f"engines must be among {', '.join(ENGINES)}", Exit.FAILED)
    count = req.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_COUNT:
        raise NevError(f"count must be a whole number from 1 to {MAX_COUNT}", Exit.FAILED)
    shard = req.get("shard")
    if shard is not None and not isinstance(shard, str):
        raise NevError("shard must be i/n", Exit.FAILED)
    staging = Path.cwd() / STAGING
    results = build_many(
        corpora,
        root=staging,
        shard=Shard.parse(shard),
        engine_names=engines,
        count=count,
        store_root=_store(req.get("store"), shared.store_root()),
    )
    return {
        "ok": True,
        "results": [
            {
                "folder": r.folder.name,
                "rendered": r.rendered,
                "manifest": r.manifest.to_json(),
                "seconds": round(r.seconds, 3),
                "rates": r.rates,
                "bytes_per_case": r.bytes_per_case,
                "shared": str(r.shared) if r.shared else None,
            }
            for r in results
        ],
    }


def _store(asked: object, default: Path | None) -> Path | None:
    """The corpus store a gate named (its NEV_CORPUS_STORE): only a folder `corpora*` right under
    the share, so that a gate can keep a store of its own there (a test's) and nothing else."""
    if asked is None:
        return default
    share = settings.path(settings.LANE_SHARED)
    p = Path(asked) if isinstance(asked, str) else None
    if p is None or p.parent != share or not re.fullmatch(r"corpora[A-Za-z0-9_.-]*", p.name):
        raise NevError(
            f"the corpus store must be a folder corpora* right under the share {share} "
            f"(NEV_CORPUS_STORE={asked!r})",
            Exit.FAILED,
        )
    return p


def _url_ok(url: str) -> bool:
    """A suite's URL the builder fetches from outside the gate's jail: http(s), or a file: URL
    of a repository on the share (which the gate reads anyway); never ssh (the lane's own keys)
    or a local path elsewhere on the lane."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    if u.scheme in ("http", "https"):
        return bool(u.netloc)
    if u.scheme == "file" and not u.netloc:
        share = os.path.realpath(settings.path(settings.LANE_SHARED))
        return os.path.realpath(u.path).startswith(share.rstrip("/") + "/")
    return False


def _suites(req: dict) -> dict:
    from bench.oracle import suites as s
    from lanes import forgeauth

    raw = req.get("suites")
    if not isinstance(raw, list) or not raw or len(raw) > 64:
        raise NevError("suites must be a list", Exit.FAILED)
    asked = []
    for one in raw:
        name, url, commit = (
            one.get(k) if isinstance(one, dict) else None for k in ("name", "url", "commit")
        )
        if not (
            isinstance(name, str)
            and s.NAME.match(name)
            and isinstance(url, str)
            and url
            and isinstance(commit, str)
            and s.COMMIT.match(commit)
        ):
            raise NevError("a suite needs a name, a url and a whole commit id", Exit.FAILED)
        if not _url_ok(url):
            raise NevError(
                f"suite {name}: its url must be http(s), or a file: URL on the share "
                "(this builder runs outside the gate's jail: no ssh key of the lane's "
                "and no other folder of it)",
                Exit.FAILED,
            )
        asked.append(s.Suite(name, url, commit, s.default_expectations(name)))
    root = s.store_root()
    if root is None or not root.parent.is_dir():
        raise NevError("there is no share on this lane to fetch suites into", Exit.FAILED)
    user, token = req.get("user"), req.get("token")
    env = forgeauth.Credential(
        user if isinstance(user, str) else None, token if isinstance(token, str) else None
    ).git_env()
    rows = []
    for suite in asked:
        r = s.fetch(suite, root, env, say=info)
        rows.append(
            {
                "suite": r.suite,
                "commit": r.commit,
                "folder": str(r.folder),
                "fetched": r.fetched,
                "seconds": round(r.seconds, 2),
            }
        )
    return {"ok": True, "suites": rows}


# ---- inside: the gate ----


def _ask(req: dict, environ: Mapping[str, str] | None = None) -> dict:
    """One request to the builder; its `say` lines on stderr; its last answer, or NevError."""
    path = str(settings.value(settings.STORE_SOCKET, environ))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s, s.makefile("rb") as f:
        try:
            # through the folder's descriptor: a socket's path may hold only 107 bytes
            dfd = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
            try:
                s.connect(f"/proc/self/fd/{dfd}/{os.path.basename(path)}")
            finally:
                os.close(dfd)
            s.sendall((json.dumps(req) + "\n").encode())
            while True:
                line = f.readline(MAX_LINE)
                reply = json.loads(line) if line.strip() else None
                if isinstance(reply, dict) and isinstance(reply.get("say"), str):
                    info(reply["say"])
                    continue
                break
        except OSError as e:
            raise NevError(
                f"nev's store builder outside this gate's jail did not answer "
                f"({e.strerror or e}); nothing was built"
            ) from None
        except ValueError:
            reply = None
    if not isinstance(reply, dict) or not reply.get("ok"):
        msg = reply.get("error") if isinstance(reply, dict) else None
        code = reply.get("exit") if isinstance(reply, dict) else None
        known = {int(x) for x in Exit}
        raise NevError(
            str(msg or "nev's store builder ended without an answer; nothing was built"),
            code if isinstance(code, int) and code in known else None,
        )
    return reply


@dataclass(frozen=True)
class Asked:
    corpora: Sequence[str]
    engines: Sequence[str]
    count: int
    shard: str | None = None


def build(asked: Asked, root: Path, environ: Mapping[str, str] | None = None) -> list[BuildResult]:
    """Inside a gate: the corpora built (or found) by nev's builder outside, each copied into
    `root` unless it is there up to date; `bench.oracle.build.BuildResult`s as a build here
    would give."""
    from bench.oracle import shared, store
    from bench.oracle.build import BuildResult

    reply = _ask(
        {
            "op": "build",
            "corpora": list(asked.corpora),
            "engines": list(asked.engines),
            "count": asked.count,
            "shard": asked.shard,
            "store": settings.given(settings.CORPUS_STORE, environ),
        },
        environ,
    )
    staging = Path(str(settings.value(settings.STORE_SOCKET, environ))).parent / STAGING
    out = []
    for r in reply.get("results") or []:
        name = str(r.get("folder", ""))
        if not name or "/" in name or name.startswith("."):
            raise NevError(f"nev's store builder named a corpus folder {name!r}; nothing was built")
        man = store.read_manifest(staging / name) or store.StoreManifest({})
        res = BuildResult(
            root / name,
            True,
            man,
            float(r.get("seconds") or 0.0),
            dict(r.get("rates") or {}),
            None,
            float(r.get("bytes_per_case") or 0.0),
            bool(r.get("rendered")),
            Path(r["shared"]) if r.get("shared") else None,
        )
        if store.up_to_date(root / name, str(man.doc.get("key"))):
            res = replace(res, written=False)
        else:
            res.superseded = shared.copy_in(staging / name, root, name)
        out.append(res)
    return out


def fetch_suites(
    suites: Sequence[Suite],
    user: str | None,
    token: str | None,
    environ: Mapping[str, str] | None = None,
) -> list[dict]:
    """Inside a gate: each suite's pinned checkout published in the share's `suites/` by nev's
    builder outside; one row per suite (as `nev oracle suites fetch --json` prints)."""
    reply = _ask(
        {
            "op": "suites",
            "user": user,
            "token": token,
            "suites": [{"name": x.name, "url": x.url, "commit": x.commit} for x in suites],
        },
        environ,
    )
    return [x for x in reply.get("suites") or [] if isinstance(x, dict)]
