"""Writers on a lane: a harness started detached in a copy, its record, its status, its commits sent back.

| the copy's last writer | `nev lane writer start` | a gate of the copy |
|---|---|---|
| running | refused | refused (it would check the copy out under the writer) |
| ended; its branch holds commits the new start's commit lacks | refused, naming them | runs |
| ended with nothing unfetched, or none | started | runs |

The harness runs in its own session under a wrapper (`sh`) that, when the harness ends, removes
the copy's `.env` and writes the exit status into the record: the `.env` lives as long as the
writer. The writer commits on `nev-writer/<branch>@<copy>` in the mirror (`writer_ref`: `<copy>` the
first 8 hex digits of the copy name's sha256), a name apart from the forge's branches, so the
mirror's fetch (`+refs/heads/*`) never meets a branch checked out in a copy, and apart from
another copy's writer on the same branch name (two clones on `main` on one lane).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from lanes.agent import layout
from lanes.agent.copy import remove_env
from lanes.agent.errors import Refused
from lanes.agent.git import git
from lanes.agent.messages import (
    HarnessCheckout,
    NoWriter,
    WriterEnded,
    WriterFacts,
    WriterFetchedRequest,
    WriterFetchedResult,
    WriterFetchRequest,
    WriterFetchResult,
    WriterRow,
    WriterSpec,
    WriterState,
    WriterStatusRequest,
    WriterStatusResult,
    WriterStopRequest,
    WriterStopResult,
    send,
)
from lanes.agent.output import MASK_SOURCE, env_secrets, mask_bytes, secret_values
from lanes.agent.procs import alive, start_ticks, stop_tree
from lanes.agent.wire import Kind, ProtocolError, Wire

BRANCH_PREFIX = "refs/heads/nev-writer/"


def writer_ref(name: str, branch: str) -> str:
    """The mirror's branch the writer of copy `name` commits on for the worktree's `branch`: one
    per copy (a copy name may hold characters a ref may not, so its digest stands for it)."""
    import hashlib

    return f"{BRANCH_PREFIX}{branch}@{hashlib.sha256(name.encode()).hexdigest()[:8]}"

PI_TRACKS_HOME = ".local/share/pi-tracks"
STOP_WAIT = 5.0     # seconds a stop waits for the wrapper to end the harness and clean up
STOPPED_EXIT = 143  # the exit recorded for a writer whose wrapper a stop had to kill (128 + SIGTERM)
LOG_TAIL = 20
# The harness's parent, a python3 program of its own (the agent exits once the harness started):
# reads the secrets to mask (a JSON list) from its stdin, so they are in no argv and no
# environment; runs the harness with its output piped, writes each line to the log masked
# (`output.MASK_SOURCE`, the gate log's masking); when the harness ends (a stop's SIGTERM reaches
# both: the wrapper outlives it) removes the copy's `.env` and writes the exit status
# (atomically) into the record. Argv: the exit file, the `.env`, the log, `--`, the harness's argv.
WRAPPER = MASK_SOURCE + r"""
import json, os, signal, subprocess, sys
x, e, log = sys.argv[1:4]
argv = sys.argv[5:]
secrets = secret_bytes(json.loads(sys.stdin.read() or "[]"))
sys.stdin.close()
signal.signal(signal.SIGTERM, lambda n, f: None)
with open(log, "ab", buffering=0) as out:
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as err:
        out.write(mask_bytes(("cannot start the harness: %s\n" % err).encode(), secrets))
        code = 127
    else:
        for line in p.stdout:
            out.write(mask_bytes(line, secrets))
        code = p.wait()
        code = code if code >= 0 else 128 - code
try:
    os.unlink(e)
except OSError:
    pass
with open(x + ".tmp", "w") as f:
    f.write("%d\n" % code)
os.replace(x + ".tmp", x)
"""


def read_state(root: layout.Root, name: str) -> WriterState | None:
    """The record of the copy's last writer; None when there is none (or none readable)."""
    try:
        with open(root.writer(name, layout.WRITER_STATE)) as f:
            return WriterState.from_wire(json.load(f))
    except (OSError, ValueError, RecursionError, MemoryError, ProtocolError):
        return None


def running(state: WriterState) -> bool:
    """The writer's wrapper is still there: its pid alive and started when the record says
    (a pid used again by another process is not the writer)."""
    return state.pid > 0 and alive(state.pid) and start_ticks(state.pid) == state.ticks


def exit_status(root: layout.Root, name: str) -> int | None:
    try:
        with open(root.writer(name, layout.WRITER_EXIT)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def commits(mirror: str, since: str | None, ref: str) -> list[str]:
    """`sha subject` of each commit of `ref` that `since` lacks (newest first); none when `ref` is gone."""
    if git(["rev-parse", "-q", "--verify", ref + "^{commit}"], cwd=mirror, check=False).returncode != 0:
        return []
    revs = [ref] + ([f"^{since}"] if since else [])
    cp = git(["log", "--format=%h %s", *revs, "--"], cwd=mirror, check=False)
    return cp.stdout.decode(errors="replace").splitlines() if cp.returncode == 0 else []


def refuse_if_running(root: layout.Root, name: str) -> None:
    state = read_state(root, name)
    if state is not None and running(state):
        raise Refused(f"a writer is running in the lane copy of {name} (pid {state.pid} since "
                      f"{state.started}, branch {state.branch}); nothing changed")


def refuse_unfetched(root: layout.Root, name: str, commit: str) -> None:
    """Refused when the copy's last writer left commits that `commit` (the new start's) lacks."""
    state = read_state(root, name)
    if state is None:
        return
    left = commits(root.mirror, commit, state.ref)
    if left:
        raise Refused(f"the last writer of {name} on this lane left {len(left)} commit(s) never fetched: "
                      f"{'; '.join(left)}; run `nev lane writer fetch` first (nothing started)")


def _program(argv0: str, cwd: str, path: str) -> str | None:
    if "/" in argv0:
        p = os.path.join(cwd, argv0)
        return p if os.path.isfile(p) and os.access(p, os.X_OK) else None
    return shutil.which(argv0, path=path)


def _write_json(path: str, obj: object) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def brief_folder(home: str, name: str) -> str:
    """The copy `name`'s writer briefs, outside every copy (so the writer never commits one): the
    one folder of the briefs its jail reads (`lanes.base.gatejail.writer_jail_args`)."""
    return os.path.join(layout.home_file(home, layout.WRITER_BRIEFS), name)


def harness_home(env: dict[str, str]) -> str:
    """The harness checkout on the lane: PI_TRACKS_HOME, else ~/.local/share/pi-tracks."""
    return env.get("PI_TRACKS_HOME") or os.path.join(os.path.expanduser("~"), PI_TRACKS_HOME)


def _git_line(cp: subprocess.CompletedProcess[bytes]) -> str:
    err = mask_bytes(cp.stderr, []).decode(errors="replace").strip().splitlines()
    return err[-1] if err else f"exit {cp.returncode}"


def update_harness(path: str) -> HarnessCheckout:
    """The harness checkout brought up to its upstream, fast-forward only, before a start (the
    seed's launch pulls it first). Refused, nothing changed, when it has local changes to tracked
    files, commits its upstream lacks, no upstream, or the fetch fails. No checkout there: nothing
    to update (the writer command check follows)."""
    if not os.path.isdir(path) or git(["rev-parse", "--is-inside-work-tree"], cwd=path,
                                        check=False).returncode != 0:
        return HarnessCheckout(path=path)
    where = f"the harness checkout {path}"
    head = git(["rev-parse", "HEAD"], cwd=path).stdout.decode().strip()
    dirty = git(["status", "--porcelain", "--untracked-files=no"], cwd=path).stdout.decode().splitlines()
    if dirty:
        files = ", ".join(line[3:] for line in dirty[:5]) + (" ..." if len(dirty) > 5 else "")
        raise Refused(f"{where} has local changes ({files}); commit or discard them there "
                      "(it is updated fast-forward only); nothing started")
    up = git(["rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{u}"], cwd=path, check=False)
    if up.returncode != 0:
        raise Refused(f"{where} is on no branch with an upstream to update from; "
                      "check out its branch there; nothing started")
    upstream = up.stdout.decode().strip()
    cp = git(["fetch", "-q"], cwd=path, check=False)
    if cp.returncode != 0:
        raise Refused(f"{where}: git fetch failed: {_git_line(cp)}; nothing started")
    tip = git(["rev-parse", "@{u}"], cwd=path).stdout.decode().strip()
    if tip == head:
        return HarnessCheckout(path=path, before=head, after=head)
    if git(["merge-base", "--is-ancestor", head, tip], cwd=path, check=False).returncode != 0:
        ahead = git(["rev-list", "--count", f"{tip}..{head}"], cwd=path).stdout.decode().strip()
        raise Refused(f"{where} cannot fast-forward to {upstream} ({tip[:12]}): it has {ahead} "
                      "commit(s) its upstream lacks; push or drop them there; nothing started")
    cp = git(["merge", "--ff-only", "-q", tip], cwd=path, check=False)
    if cp.returncode != 0:
        raise Refused(f"{where} cannot fast-forward to {upstream}: {_git_line(cp)}; nothing started")
    return HarnessCheckout(path=path, before=head, after=tip)


def settle(state: WriterState, seconds: float) -> bool:
    """Whether the writer still runs after `seconds` (the wait ends as soon as its wrapper does).
    A wrapper that ended is reaped: it is this agent's child."""
    deadline = time.monotonic() + seconds
    while running(state):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.02)
    try:
        os.waitpid(state.pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return False


def ended_at_once(root: layout.Root, name: str, state: WriterState) -> WriterEnded:
    """A writer that ended within the settle time: its exit status and its log's last lines
    (masked as written)."""
    return WriterEnded(exit=exit_status(root, name), log=state.log, log_tail=_tail(state.log))


def launch(root: layout.Root, name: str, spec: WriterSpec, commit: str, env: dict[str, str],
           secrets: list[str] | None = None, jail: list[str] | None = None) -> WriterState:
    """Check out the writer's branch in the copy (local changes kept) and start the harness
    detached in its jail (`jail`: bubblewrap's options, made on the development box by the one
    builder, `lanes.base.gatejail.writer_jail_args`): `<launch> --tool T --model M --brief-file
    F`, the brief under WRITER_BRIEFS/<name>/. Its record. Its log masks `secrets`, the copy's `.env` secret-named values and `env`'s."""
    copy = root.copy(name)
    branch = spec.branch
    ref = writer_ref(name, branch)
    home = os.path.expanduser("~")
    env = dict(env)
    env["PI_TRACKS_HOME"] = harness_home(env)
    env.update({"NEV_WRITER_TOOL": spec.tool, "NEV_WRITER_MODEL": spec.model})
    words = [w.replace("$PI_TRACKS_HOME", env["PI_TRACKS_HOME"]) for w in shlex.split(spec.launch)]
    if not words or _program(words[0], copy, env.get("PATH", "")) is None:
        raise Refused(f"the writer command {words[0] if words else '(empty)'!r} is not found on the lane "
                      "(tracks.json specWatch.lanes.launch); nothing started")
    git(["checkout", "-q", "-B", ref[len("refs/heads/"):]], cwd=copy)
    bwrap = shutil.which("bwrap")
    if bwrap is None or not jail:
        raise Refused("bubblewrap is not installed on this lane and a writer runs only in its sandbox "
                      "(docs/sandbox.md; nev lane provision names what is missing); nothing started"
                      if bwrap is None else "the writer's start carries no jail; nothing started")
    briefs = brief_folder(home, name)
    os.makedirs(briefs, mode=0o700, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    brief = os.path.join(briefs, f"{stamp}.md")
    fd = os.open(brief, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(spec.brief)
    argv = [bwrap, *jail, "--", *words, "--tool", spec.tool, "--model", spec.model,
            "--brief-file", brief]
    record = root.writer(name)
    shutil.rmtree(record, ignore_errors=True)
    os.makedirs(record, mode=0o700)
    log = root.writer(name, layout.WRITER_LOG)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    env_file = os.path.join(copy, layout.ENV)
    masked = [*(secrets or []), *env_secrets(env_file), *secret_values(env)]
    try:
        p = subprocess.Popen([sys.executable, "-c", WRAPPER, root.writer(name, layout.WRITER_EXIT),
                              env_file, log, "--", *argv],
                             cwd=copy, env=env, stdin=subprocess.PIPE, stdout=out, stderr=out,
                             start_new_session=True)
    finally:
        os.close(out)
    assert p.stdin is not None
    p.stdin.write(json.dumps(masked).encode())
    p.stdin.close()
    state = WriterState(pid=p.pid, ticks=start_ticks(p.pid), started=_now(), branch=branch, ref=ref,
                        base=commit, tool=spec.tool, model=spec.model, brief=brief, log=log)
    _write_json(root.writer(name, layout.WRITER_STATE), state.to_wire())
    return state


def describe(root: layout.Root, name: str, state: WriterState) -> WriterRow:
    """One writer as `nev lane writer status` shows it."""
    try:
        with open(root.writer(name, layout.WRITER_FETCHED)) as f:
            since = f.read().strip() or state.base
    except OSError:
        since = state.base
    is_running = running(state)
    return WriterRow(name=name, branch=state.branch, ref=state.ref, tool=state.tool,
                     model=state.model, pid=state.pid, started=state.started, running=is_running,
                     exit=None if is_running else exit_status(root, name), log=state.log,
                     stopped=state.stopped, unfetched=commits(root.mirror, since, state.ref))


def _row(info: WriterRow) -> dict:  # type: ignore[type-arg]
    """A row's fields, to build a larger answer from (its fields and their types as the row's)."""
    return {f.name: getattr(info, f.name) for f in dataclasses.fields(WriterRow)}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def status(req: WriterStatusRequest) -> WriterStatusResult:
    """`nev lane writer status`: every writer under the root."""
    root = layout.Root(req.root)
    if not os.path.isdir(root.path):
        return WriterStatusResult([])
    out = []
    for name in root.writer_names(os.listdir(root.path)):
        state = read_state(root, name)
        if state is not None:
            out.append(describe(root, name, state))
    return WriterStatusResult(out)


def fetch(wire: Wire, req: WriterFetchRequest) -> int:
    """`nev lane writer fetch`: a bundle of the writer's branch without what the development box
    has (`have`, those of them the mirror knows), as WRITER_BUNDLE frames; the RESULT last."""
    root, name = layout.Root(req.root), req.name
    if not layout.copy_name_ok(name):
        raise Refused(f"{name!r} cannot be a lane copy's name")
    state = read_state(root, name)
    if state is None:
        send(wire, Kind.RESULT, NoWriter())
        return 0
    info = describe(root, name, state)
    ref = info.ref
    tip = git(["rev-parse", "-q", "--verify", ref + "^{commit}"], cwd=root.mirror, check=False).stdout.decode().strip()
    if not tip:
        raise Refused(f"the writer's branch {ref} is not in the lane's mirror")
    have = [h for h in req.have
            if git(["cat-file", "-e", f"{h}^{{commit}}"], cwd=root.mirror, check=False).returncode == 0]
    size = 0
    if tip not in have:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bundle")
            cp = git(["bundle", "create", "-q", path, ref, *(f"^{h}" for h in have)], cwd=root.mirror, check=False)
            if cp.returncode == 0:
                with open(path, "rb") as f:
                    data = f.read()
                size = len(data)
                wire.send(Kind.WRITER_BUNDLE, data)
            elif b"empty bundle" not in cp.stderr:
                raise Refused(f"git bundle create failed: {cp.stderr.decode(errors='replace').strip()}")
    send(wire, Kind.RESULT, WriterFetchResult(**_row(info), tip=tip, bundle=size))
    return 0


def fetched(req: WriterFetchedRequest) -> WriterFetchedResult:
    """After the development box fast-forwarded to `tip`: recorded, so status counts from there."""
    root, name, tip = layout.Root(req.root), req.name, req.tip
    if not layout.copy_name_ok(name) or read_state(root, name) is None:
        raise Refused(f"no writer of {name!r} on this lane")
    git(["cat-file", "-e", f"{tip}^{{commit}}"], cwd=root.mirror)
    with open(root.writer(name, layout.WRITER_FETCHED), "w") as f:
        f.write(tip + "\n")
    return WriterFetchedResult(tip)


def _tail(path: str, lines: int = LOG_TAIL) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    return b"\n".join(data.splitlines()[-lines:]).decode(errors="replace")


def stop(req: WriterStopRequest) -> WriterStopResult | NoWriter:
    """`nev lane writer stop`: the writer's process tree ended (SIGTERM, which its wrapper outlives
    to clean up; SIGKILL after STOP_WAIT), the copy's `.env` files removed, its commits kept for
    `nev lane writer fetch`. Its status row, with the log's last lines."""
    root, name = layout.Root(req.root), req.name
    if not layout.copy_name_ok(name):
        raise Refused(f"{name!r} cannot be a lane copy's name")
    state = read_state(root, name)
    if state is None:
        return NoWriter()
    was = running(state)
    had_env = [p for p in root.env_files(name) if os.path.lexists(p)]
    if was:
        pid = state.pid
        stop_tree(pid, signal.SIGTERM, root.copy(name), state.ticks)
        deadline = time.monotonic() + STOP_WAIT
        while running(state) and time.monotonic() < deadline:
            time.sleep(0.05)
        if running(state):
            stop_tree(pid, signal.SIGKILL, root.copy(name), state.ticks)
    remove_env(root, name)     # those the wrapper did not remove (it was killed, or had ended)
    removed = [p for p in had_env if not os.path.lexists(p)]
    if was and exit_status(root, name) is None:   # the wrapper was killed before it wrote one
        _write_json_text(root.writer(name, layout.WRITER_EXIT), f"{STOPPED_EXIT}\n")
    if was:
        state = dataclasses.replace(state, stopped=_now())
        _write_json(root.writer(name, layout.WRITER_STATE), state.to_wire())
    log_tail = _tail(state.log or root.writer(name, layout.WRITER_LOG))
    return WriterStopResult(**_row(describe(root, name, state)), was_running=was, env_removed=removed,
                            log_tail=log_tail)


def _write_json_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def sweep_facts(root: layout.Root, name: str) -> WriterFacts:
    """What `nev lane sweep` decides a writer record on (`lanes.sweep.decide_writers`)."""
    state = read_state(root, name)
    d = describe(root, name, state) if state is not None else None
    return WriterFacts(name=name, record=state is not None, copy=os.path.isdir(root.copy(name)),
                       running=d is not None and d.running,
                       unfetched=tuple(d.unfetched) if d else ())


def remove_record(root: layout.Root, name: str) -> None:
    """Remove the writer record of `name`, checked again first: never while its writer runs or
    with commits not fetched (Refused: kept)."""
    if not layout.copy_name_ok(name):
        raise Refused(f"{name!r} cannot be a lane copy's name; kept")
    folder = root.writer(name)
    if os.path.islink(folder) or not os.path.isdir(folder):
        raise Refused(f"{folder} is a link or no folder; kept")
    facts = sweep_facts(root, name)
    if not facts.record:
        raise Refused("no readable record (state.json); kept")
    if facts.running:
        raise Refused("its writer is running; kept")
    if facts.unfetched:
        raise Refused(f"{len(facts.unfetched)} commit(s) never fetched; kept")
    shutil.rmtree(folder)
