"""`nev sandbox check [--hostile]`: can this host build the sandbox, and does it hold?

Without `--hostile`: what the host lacks (bubblewrap, user namespaces, libseccomp, python3), and a
jailed shell that must not see the home, the share or a listener on the loopback. With
`--hostile`: a batch of hostile candidates of every class of docs/sandbox.md's threat model
(`crates_bridge.hostile`) compiled and scored here against this host's real targets — the user's
`~/.ssh` and caches, a mode-600 file in the home, the share's corpus store, a loopback listener
and a rig address — with two good candidates beside them: each hostile one must get its own
verdict naming the cause, the good ones must pass, and the targets must be byte for byte as they
were. `nev lane provision` runs the first; `nev lane run WT nev sandbox check --hostile` the second
on a lane.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base import sandbox, settings


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def ok(self, what: str) -> None:
        self.lines.append(f"ok    {what}")

    def bad(self, what: str) -> None:
        self.lines.append(f"FAIL  {what}")
        self.failed.append(what)


class Listener:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            c.close()

    def close(self) -> None:
        self._stop = True
        self._t.join()
        self.sock.close()


def digest(root: Path) -> str | None:
    """A hash of a tree's names and bytes (None when it is not there or cannot be read whole)."""
    if not root.exists():
        return None
    h = hashlib.sha256()
    try:
        for p in sorted(root.rglob("*")) if root.is_dir() else [root]:
            h.update(str(p).encode())
            if p.is_file() and not p.is_symlink():
                with open(p, "rb") as f:
                    for chunk in iter(lambda f=f: f.read(1 << 20), b""):  # type: ignore[misc]
                        h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def basic(report: Report) -> None:
    gone = sandbox.missing()
    if gone:
        for g in gone:
            report.bad(g)
        return
    report.ok("bubblewrap, user namespaces, libseccomp and python3 are here")
    home = Path.home()
    lst = Listener()
    try:
        script = (
            f"ls -a {home} >/dev/null 2>&1 && echo home-seen; "
            f"(exec 3<>/dev/tcp/127.0.0.1/{lst.port}) 2>/dev/null && echo connected; "
            "ls /proc | grep -c '^[0-9]'"
        )
        out = sandbox.run(["bash", "-c", script], sandbox.Jail(processes=True), timeout=30)
    finally:
        lst.close()
    if out.returncode != 0:
        report.bad(f"a jailed shell failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
        return
    (report.bad if "home-seen" in out.stdout else report.ok)(f"a jailed shell does not see {home}")
    (report.bad if "connected" in out.stdout or lst.accepted else report.ok)(
        "a jailed shell reaches no listener on this host's loopback"
    )
    procs = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "?"
    (report.ok if procs.isdigit() and int(procs) <= 4 else report.bad)(
        f"a jailed shell sees only its own processes ({procs})"
    )


def _rig_address(environ: dict[str, str]) -> str:
    from urllib.parse import urlsplit

    for s in (settings.LANE_GIT_URL, settings.LANE_MODEL_URL):
        raw = settings.get(s, environ)
        if raw:
            u = urlsplit(raw)
            if u.hostname:
                return f"{u.hostname}:{u.port or (443 if u.scheme == 'https' else 80)}"
    return "198.18.0.1:22"


def hostile(report: Report, say: Callable[[str], None]) -> None:
    from crates_bridge import candidates, corpus
    from crates_bridge import hostile as hostile_mod
    from crates_bridge.samples import GOOD, RIGHT
    from crates_bridge.workspace import EXAMPLE_ENGINE, Workspace

    environ = dict(os.environ)
    home = Path.home()
    store = Path(settings.value(settings.LANE_SHARED, environ)) / "corpora"
    with tempfile.TemporaryDirectory(prefix="nev-sandbox-check-") as tmp:
        t = Path(tmp)
        secret_dir = Path(tempfile.mkdtemp(prefix=".nev-sandbox-secret-", dir=home))
        secret = secret_dir / "secret"
        secret.write_text("not for candidates\n")
        secret.chmod(0o600)
        marker = t / "spawned"
        lst = Listener()
        try:
            say("sandbox: building the example engine and a reference corpus ...")
            shutil.copytree(EXAMPLE_ENGINE, t / "engine", ignore=shutil.ignore_patterns("target"))
            ws = Workspace(t / "engine")
            ws.build()
            cdir = corpus.write_reference_corpus(
                ws, "block_width", t / "corpus" / "block_width", 60
            )
            targets = hostile_mod.Targets(
                secret=str(secret),
                copy_to=str(home / ".nev-sandbox-stolen"),
                corpus=str(cdir),
                ssh_dir=str(home / ".ssh"),
                cache=str(home / ".cache"),
                store=str(store),
                marker=str(marker),
                loopback_port=lst.port,
                rig_address=_rig_address(environ),
            )
            # the host's attackers, then the verdict's (the judge's red team: answers read out of
            # memory, forged reports and records, floods, garbage)
            bad = hostile_mod.batch(targets) + hostile_mod.cheaters(60)
            watched = [home / ".ssh", home / ".cache" / "nev", secret_dir, store, cdir]
            before = {p: digest(p) for p in watched}
            sources = [GOOD] + [s for _, s, _ in bad] + [RIGHT[1]]
            say(f"sandbox: {len(sources)} candidates ({len(bad)} hostile) ...")
            result = candidates.probe(
                ws, "block_width", sources, cdir, t / "probe", timeout_ms=3000
            )
            for (name, _, words), v in zip(bad, result.verdicts[1:-1], strict=True):
                said = v.run_error or v.error or v.status
                line = f"hostile {name:<16} {v.status:<13} {said.splitlines()[0] if said else ''}"
                (report.ok if v.status != "passed" and words in said else report.bad)(line)
            for v in (result.verdicts[0], result.verdicts[-1]):
                (report.ok if v.status == "passed" else report.bad)(
                    f"good    {v.label:<16} {v.status:<13} {v.cases_passed}/{v.cases_run}"
                )
            after = {p: digest(p) for p in watched}
            for p in watched:
                (report.ok if before[p] == after[p] else report.bad)(f"unchanged: {p}")
            for p in (Path(targets.copy_to), marker):
                (report.bad if p.exists() else report.ok)(f"not created: {p}")
            (report.bad if lst.accepted else report.ok)(
                "no connection reached the loopback listener"
            )
        finally:
            lst.close()
            secret.unlink(missing_ok=True)
            secret_dir.rmdir()
            Path(home / ".nev-sandbox-stolen").unlink(missing_ok=True)
