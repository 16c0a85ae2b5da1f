"""Ground truth for a verify in the sandbox (docs/sandbox.md): the jail never builds a corpus and
never sees the store; nev's own oracle builder does, outside the jail, on the verify's request.

Outside (`Service`, started with the verify's jail): a Unix socket and a staging folder in a
private folder bound read-only into the jail. Inside (`request`, called by `fresh_corpora` when
`sandbox.inside()`): one JSON line `{"names": [...], "count": N}` on the socket; the builder checks
every name is a corpus it knows and the count is sane, renders each corpus with the three browsers
or finds it in the store (the store written as always), and copies it into the staging folder;
its answer is one JSON line, `{"ok": true}` or `{"error": "...", "exit": 11}`. The verify then
copies each corpus from the staging folder into its own `corpus/` (through the store's atomic
writer) and checks it as ground truth like any other. The builder never writes into the jail's
folders: a link planted in the copy can send its writes nowhere.

The judge is outside too (`request_scores`, called by the floors' scorer inside the jail):
`{"op": "score", "binary": ..., "generated_dir": ...}` (both inside the verify's copy) has the
service run the engine's built `generated_score_check` in a jail of its own, with the corpora's
inputs only, and judge its outputs against the corpora it built (its staging folder, which the
jail cannot write: never the copy's `corpus/`). The answer carries the scores. So nothing the
track's own code does in the verify's jail (its build script, its tests, a process it leaves
running) reaches the answers or the verdict.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.exitcodes import Exit
from lanes.base.ui import info

MAX_REQUEST = 64 * 1024
MAX_COUNT = 100_000
MAX_ANSWER = 4 * 1024 * 1024


class Service:
    """The builder's side, for one verify: serves until `close`."""

    def __init__(
        self, build: Callable[[list[str], int, Path], None], say: Callable[[str], None] = info,
        score: Callable[[Path, Path, Path], list[dict]] | None = None, workdir: Path | None = None,
    ) -> None:
        """`build(names, count, folder)`: the oracle builder (`truth.fresh_corpora`) into `folder`;
        `score(binary, generated_dir, corpus_root)`: the judge's scores of a built engine
        (`crates_bridge.runner.score_binary`), for binaries and folders inside `workdir` only."""
        self.build = build
        self.say = say
        self.score = score
        self.workdir = workdir.resolve() if workdir is not None else None
        self.dir = Path(tempfile.mkdtemp(prefix="nev-truth-"))
        self.staging = self.dir / "corpora"
        self.staging.mkdir()
        self.path = self.dir / "truth.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self.sock.listen(4)
        self.sock.settimeout(0.5)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def env(self) -> dict[str, str]:
        return {
            settings.TRUTH_SOCKET.name: str(self.path),
            settings.TRUTH_STAGING.name: str(self.staging),
        }

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(None)
                reply = self._answer(read_line(conn))
                try:
                    conn.sendall((json.dumps(reply) + "\n").encode())
                except OSError:
                    pass

    def _answer(self, line: bytes) -> dict:
        from bench.oracle.cases import generator_for

        try:
            req = json.loads(line)
        except (ValueError, RecursionError):
            return {"error": "the request is not one JSON line", "exit": int(Exit.FAILED)}
        if isinstance(req, dict) and req.get("op") == "score":
            return self._score(req)
        names = req.get("names") if isinstance(req, dict) else None
        count = req.get("count") if isinstance(req, dict) else None
        if (
            not isinstance(names, list)
            or not names
            or len(names) > 64
            or not all(
                isinstance(n, str) and n and "/" not in n and not n.startswith(".") for n in names
            )
        ):
            return {"error": "names must be a list of corpus names", "exit": int(Exit.FAILED)}
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_COUNT:
            return {
                "error": f"count must be a whole number from 1 to {MAX_COUNT}",
                "exit": int(Exit.FAILED),
            }
        try:
            for n in names:
                generator_for(n)
            self.say(
                f"sandbox: building the ground truth the verify asks for: {', '.join(names)} "
                f"({count} seeds)"
            )
            self.build(list(names), count, self.staging)
        except NevError as e:
            return {"error": str(e), "exit": int(e.exit_code)}
        except Exception as e:  # noqa: BLE001 - the answer names it; the verify fails on it
            return {"error": f"the oracle builder failed: {e}", "exit": int(Exit.FAILED)}
        return {"ok": True}

    def _score(self, req: dict) -> dict:
        """Judge the verify's built engine here, against the corpora this service built."""
        if self.score is None or self.workdir is None:
            return {"error": "this builder does not score", "exit": int(Exit.FAILED)}
        paths = []
        for key in ("binary", "generated_dir"):
            v = req.get(key)
            p = Path(v).resolve() if isinstance(v, str) and v else None
            if p is None or not p.is_relative_to(self.workdir) or not p.exists():
                return {"error": f"{key} must name a path inside the verify's copy",
                        "exit": int(Exit.FAILED)}
            paths.append(p)
        try:
            return {"ok": True, "scores": self.score(paths[0], paths[1], self.staging)}
        except NevError as e:
            return {"error": str(e), "exit": int(e.exit_code)}
        except Exception as e:  # noqa: BLE001 - the answer names it; the verify fails on it
            return {"error": f"the judge failed: {type(e).__name__}: {e}", "exit": int(Exit.FAILED)}

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=5)
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def read_line(conn: socket.socket, limit: int = MAX_REQUEST) -> bytes:
    buf = b""
    while b"\n" not in buf and len(buf) < limit:
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf.split(b"\n", 1)[0]


def available(environ: Mapping[str, str] | None = None) -> bool:
    return bool(settings.given(settings.TRUTH_SOCKET, environ))


def request(
    names: Sequence[str], count: int, root: Path, environ: Mapping[str, str] | None = None
) -> None:
    """Inside the jail: ask the builder for `names`, then copy each into `root`."""
    from bench.oracle import shared, store

    path = settings.value(settings.TRUTH_SOCKET, environ)
    staging = Path(settings.value(settings.TRUTH_STAGING, environ))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
            s.sendall((json.dumps({"names": list(names), "count": count}) + "\n").encode())
            answer = read_line(s)
        except OSError as e:
            raise NevError(
                f"the sandbox's ground-truth builder did not answer ({e.strerror}); "
                "nothing was scored"
            ) from None
    try:
        reply = json.loads(answer)
    except ValueError:
        reply = {"error": "the ground-truth builder's answer is not JSON"}
    if not isinstance(reply, dict) or not reply.get("ok"):
        msg = str(reply.get("error") if isinstance(reply, dict) else reply)
        code = reply.get("exit") if isinstance(reply, dict) else None
        raise NevError(msg, Exit.NO_GROUND_TRUTH if code == Exit.NO_GROUND_TRUTH else None)
    root.mkdir(parents=True, exist_ok=True)
    for n in names:
        src = staging / n
        if store.verify(src) is not None:
            raise NevError(
                f"{src}: the builder's corpus does not match its manifest; nothing was scored",
                Exit.NO_GROUND_TRUTH,
            )
        man = store.read_manifest(src) or store.StoreManifest({})
        if not store.up_to_date(root / n, str(man.doc.get("key"))):
            shared.copy_in(src, root, n)


def request_scores(binary: Path, generated_dir: Path,
                   environ: Mapping[str, str] | None = None) -> list[dict]:
    """Inside the jail: the scores of the engine built at `binary` (its generated functions in
    `generated_dir`), judged by the service outside against the corpora it built."""
    path = settings.value(settings.TRUTH_SOCKET, environ)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
            s.sendall((json.dumps({"op": "score", "binary": str(binary),
                                   "generated_dir": str(generated_dir)}) + "\n").encode())
            answer = read_line(s, MAX_ANSWER)
        except OSError as e:
            raise NevError(f"the sandbox's judge did not answer ({e.strerror}); "
                           "nothing was scored") from None
    try:
        reply = json.loads(answer)
    except ValueError:
        reply = {"error": "the judge's answer is not JSON"}
    scores = reply.get("scores") if isinstance(reply, dict) else None
    if not isinstance(reply, dict) or not reply.get("ok") or not isinstance(scores, list):
        raise NevError(str(reply.get("error") if isinstance(reply, dict) else reply))
    return [x for x in scores if isinstance(x, dict)]


def judge_scores(binary: Path, generated_dir: Path, corpus_root: Path) -> list[dict]:
    """The service's judge: the built engine in a jail of its own, its outputs judged against the
    corpora under `corpus_root` (the builder's, never the copy's); scores without their cases."""
    import dataclasses

    from crates_bridge.errors import BridgeError
    from crates_bridge.runner import score_binary

    try:
        got = score_binary(binary, generated_dir, corpus_root)
    except BridgeError as e:
        raise NevError(str(e)) from None
    return [{k: v for k, v in dataclasses.asdict(s).items() if k != "cases"} for s in got]
