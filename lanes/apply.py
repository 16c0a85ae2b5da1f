"""The lane side of a gate: the one program the dev box sends with every payload.

Stdlib only, run with the lane's own `python3` (so a lane never runs a different version than
the dev box that sent it). It talks to the dev box over the SSH channel's stdin/stdout in
frames (`kind` byte, 4-byte big-endian length, data):

  dev -> lane   J  a JSON request (hello, payload, bundle, stop, abort); a payload or bundle
                   request is followed by its members as raw bytes of the announced sizes
  lane -> dev   H  hello answer (mirror tips, last fetch age, free disk, copies when short)
                M  one line for the person (waiting for a lock, stray directory moved, ...)
                O/E the command's stdout / stderr, as it comes
                N  the bundle's prerequisites are missing even after a fetch: send another
                Q/P/q  a pulled folder: header, tar data, end
                R  the result (exit status, or the refusal), always last

What it does on the lane: one bare mirror `<root>/.git-mirror` and one git worktree per track at
`<root>/<name>`; a lock per copy (a second gate of the same worktree waits and says so); a stray
non-worktree directory at the copy's path is moved aside, never deleted; fetches the forge only
when the bundle cannot supply the commit or the last fetch is older than the maximum age, with
the credential fed through the environment to a credential helper (never in any argv); checks
out the exact commit, applies the diff and the untracked files (refusing any path that escapes
the copy); links the NAS folders; installs `.env` for this run only with the lane's model URL;
runs the command in its own process group with NEV_ON_LANE=1; tees the output to the share;
removes the three `.env` files on every exit unless NEV_LANE_KEEP_ENV=1.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import queue
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time

try:  # sent next to this module by the dev box; importable from the package in tests
    import nev_dotenv as dotenv  # type: ignore[import-not-found]
    import nev_links as links  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - exercised when run from the source tree
    from lanes import dotenv, links

MIRROR = ".git-mirror"
LAST_FETCH = "nev-last-fetch"
FRAME = struct.Struct(">cI")
CHUNK = 256 * 1024
STOP_GRACE = 1.0
# The one git credential helper of nev (the dev box's forge commands and the job steps import it
# from here): it answers from NEV_GIT_USER / NEV_GIT_PASSWORD in git's environment, so the token
# is in no argv, no URL and no git config file.
CREDENTIAL_HELPER = ("!f() { test \"$1\" = get || exit 0; echo \"username=${NEV_GIT_USER:-nev}\"; "
                     "echo \"password=${NEV_GIT_PASSWORD}\"; }; f")


class Refused(Exception):
    """The payload or the lane state is refused; one line says why."""


class Stopped(Exception):
    pass


# -- framing -------------------------------------------------------------------------------

class Wire:
    def __init__(self, rfile: io.BufferedReader, wfile: io.BufferedWriter) -> None:
        self.r = rfile
        self.w = wfile
        self.lock = threading.Lock()
        self.broken = False

    def send(self, kind: bytes, data: bytes = b"") -> None:
        if self.broken:
            return
        with self.lock:
            try:
                for i in range(0, max(len(data), 1), CHUNK * 4):
                    part = data[i:i + CHUNK * 4]
                    self.w.write(FRAME.pack(kind, len(part)) + part)
                self.w.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.broken = True

    def send_json(self, kind: bytes, obj: object) -> None:
        self.send(kind, json.dumps(obj).encode())

    def read_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            got = self.r.read(n - len(buf))
            if not got:
                raise EOFError
            buf += got
        return bytes(buf)

    def read_frame(self) -> tuple[bytes, bytes]:
        kind, n = FRAME.unpack(self.read_exact(FRAME.size))
        return kind, self.read_exact(n)

    def read_json(self) -> dict:
        kind, data = self.read_frame()
        if kind != b"J":
            raise Refused(f"protocol error: expected a request, got frame {kind!r}")
        return json.loads(data)

    def copy_to(self, path: str, n: int) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            left = n
            while left:
                got = self.r.read(min(left, CHUNK))
                if not got:
                    raise EOFError
                f.write(got)
                left -= len(got)


# -- masking (the share is readable by the whole subnet) ------------------------------------

_URL_CRED = re.compile(rb"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]+(?::[^/\s@]*)?@")


class Masker:
    def __init__(self, secrets: list[str]) -> None:
        self.secrets = sorted({s.encode() for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def __call__(self, data: bytes) -> bytes:
        for s in self.secrets:
            data = data.replace(s, b"***")
        return _URL_CRED.sub(rb"\1***@", data)


# -- paths ---------------------------------------------------------------------------------

def inside(root: str, path: str) -> bool:
    root = os.path.realpath(root)
    p = os.path.realpath(path)
    return p == root or p.startswith(root + os.sep)


def check_rel(rel: str, what: str) -> None:
    """A relative path inside the copy: no absolute path, no `..`, no NUL."""
    if not rel or "\0" in rel or rel.startswith("/") or rel.startswith("\\"):
        raise Refused(f"{what}: path {rel!r} escapes the worktree; nothing was applied")
    parts = rel.split("/")
    if any(p == ".." for p in parts) or parts[0] == ".git" or ".git" in parts:
        raise Refused(f"{what}: path {rel!r} escapes the worktree; nothing was applied")


def check_under(copy: str, rel: str, what: str) -> None:
    """Writing `rel` must not go through a symlink that leaves the copy."""
    check_rel(rel, what)
    parent = os.path.dirname(os.path.join(copy, rel))
    if not inside(copy, parent):
        raise Refused(f"{what}: path {rel!r} goes through a symlink out of the worktree; nothing was applied")


def link_target_ok(rel: str, target: str) -> bool:
    if target.startswith("/"):
        return False
    depth = len(rel.split("/")) - 1
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True


_DIFF_PATH = re.compile(r"^(?:rename from|rename to|copy from|copy to) (.*)$")


def _unquote(p: str) -> str:
    if p.startswith('"') and p.endswith('"'):
        raw = p[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        return raw.encode("latin-1").decode("utf-8", "surrogateescape")
    return p


def diff_paths(diff: bytes) -> tuple[list[str], list[tuple[str, str]]]:
    """Every path a git diff touches, and (path, target) of each symlink it creates."""
    paths: list[str] = []
    symlinks: list[tuple[str, str]] = []
    cur_b: str | None = None
    new_link = False
    in_link_hunk = False
    for raw in diff.split(b"\n"):
        line = raw.decode("utf-8", "surrogateescape")
        if line.startswith("diff --git "):
            cur_b, new_link, in_link_hunk = None, False, False
            continue
        if line.startswith("--- ") or line.startswith("+++ "):
            p = _unquote(line[4:].rstrip("\t"))
            if p != "/dev/null":
                if not (p.startswith("a/") or p.startswith("b/")):
                    raise Refused(f"diff: path {p!r} escapes the worktree; nothing was applied")
                paths.append(p[2:])
                if line.startswith("+++ "):
                    cur_b = p[2:]
            continue
        m = _DIFF_PATH.match(line)
        if m:
            paths.append(_unquote(m.group(1)))
            continue
        if line.startswith("new file mode 120000") or line.startswith("new mode 120000") or (
                line.startswith("index ") and line.endswith(" 120000")):
            new_link = True
            continue
        if new_link and line.startswith("@@"):
            in_link_hunk = True
            continue
        if in_link_hunk and line.startswith("+") and cur_b is not None:
            symlinks.append((cur_b, line[1:]))
            in_link_hunk = False
    return paths, symlinks


def check_diff(copy: str, diff: bytes) -> None:
    paths, symlinks = diff_paths(diff)
    for p in paths:
        check_under(copy, p, "diff")
    for p, target in symlinks:
        if not link_target_ok(p, target):
            raise Refused(f"diff: symlink {p!r} points out of the worktree ({target!r}); nothing was applied")


def check_tar(copy: str, tf: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members = tf.getmembers()
    for m in members:
        check_under(copy, m.name, "untracked files")
        if m.issym() and not link_target_ok(m.name, m.linkname):
            raise Refused(f"untracked files: symlink {m.name!r} points out of the worktree "
                          f"({m.linkname!r}); nothing was applied")
        if not (m.isfile() or m.issym() or m.isdir()):
            raise Refused(f"untracked files: {m.name!r} is not a file, directory or symlink; nothing was applied")
    return members


def extract(copy: str, tar_path: str) -> int:
    with tarfile.open(tar_path, "r:*") as tf:
        members = check_tar(copy, tf)
        for m in members:
            dest = os.path.join(copy, m.name)
            if os.path.islink(dest) or (os.path.exists(dest) and not os.path.isdir(dest)):
                os.unlink(dest)
            if m.isdir():
                os.makedirs(dest, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if not inside(copy, os.path.dirname(dest)):  # re-check after earlier members
                raise Refused(f"untracked files: {m.name!r} goes through a symlink out of the worktree")
            if m.issym():
                os.symlink(m.linkname, dest)
            else:
                src = tf.extractfile(m)
                assert src is not None
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as f:
                    shutil.copyfileobj(src, f, CHUNK)
                os.chmod(dest, m.mode & 0o7777)
        return len(members)


# -- git -----------------------------------------------------------------------------------

def git_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1"})
    env.setdefault("GIT_AUTHOR_NAME", "nev")
    env.setdefault("GIT_AUTHOR_EMAIL", "nev@lane")
    env.setdefault("GIT_COMMITTER_NAME", "nev")
    env.setdefault("GIT_COMMITTER_EMAIL", "nev@lane")
    if extra:
        env.update(extra)
    return env


def git(args: list[str], cwd: str | None = None, check: bool = True, env: dict | None = None,
        input: bytes | None = None) -> subprocess.CompletedProcess:
    cp = subprocess.run(["git", *args], cwd=cwd, env=git_env(env), input=input,
                        capture_output=True)
    if check and cp.returncode != 0:
        err = cp.stderr.decode(errors="replace").strip().splitlines()
        raise Refused(f"git {args[0]} failed: {err[-1] if err else 'exit ' + str(cp.returncode)}")
    return cp


def git_out(args: list[str], cwd: str | None = None) -> str:
    return git(args, cwd=cwd).stdout.decode(errors="replace").strip()


def credential_env(user: str | None, password: str | None) -> dict[str, str]:
    """Git config through the environment: other credential helpers off, then CREDENTIAL_HELPER
    answering `user`/`password` from NEV_GIT_* variables (without a password: helpers off only)."""
    env = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "credential.helper", "GIT_CONFIG_VALUE_0": "",
           "GIT_CONFIG_KEY_1": "credential.helper", "GIT_CONFIG_VALUE_1": CREDENTIAL_HELPER}
    if password:
        env["NEV_GIT_USER"] = user or "nev"
        env["NEV_GIT_PASSWORD"] = password
    else:
        env["GIT_CONFIG_COUNT"] = "1"
    return env


# -- the lane ------------------------------------------------------------------------------

class Lane:
    def __init__(self, wire: Wire, req: dict) -> None:
        self.wire = wire
        self.name: str = req["name"]
        if not links.safe_part(self.name) or self.name.startswith("."):
            raise Refused(f"worktree name {self.name!r} cannot be a lane copy's name")
        self.root: str = req["root"]
        self.shared: str = req.get("shared") or "/srv/lane-shared"
        self.mirror = os.path.join(self.root, MIRROR)
        self.copy = os.path.join(self.root, self.name)
        self.payload = os.path.join(self.root, ".payload-" + self.name)
        self.git_url: str | None = req.get("git_url")
        self.max_age = float(req.get("fetch_max_age", 600))
        self.min_free_gb = float(req.get("min_free_gb", 20))
        self.fetched = False
        self.cred: dict | None = None
        self.stop = threading.Event()
        self.stop_signal = "TERM"
        self.child: subprocess.Popen | None = None
        self.child_lock = threading.Lock()
        self.lock_fd: int | None = None
        self.bundles: queue.Queue[int] = queue.Queue()

    def say(self, text: str) -> None:
        self.wire.send(b"M", text.encode())

    # locking: one gate per copy at a time
    def lock(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        path = os.path.join(self.root, ".lock-" + self.name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            except OSError:
                holder = "unknown"
            self.say(f"another gate of {self.name} is running on this lane ({holder}); waiting for it to finish")
            t0 = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.say(f"the other gate of {self.name} finished after {time.monotonic() - t0:.1f} s; going on")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}\n".encode(), 0)
        self.lock_fd = fd

    def hello(self) -> dict:
        tips: list[str] = []
        mirror = os.path.isdir(self.mirror)
        age = None
        if mirror:
            out = git(["for-each-ref", "--format=%(objectname)"], cwd=self.mirror, check=False).stdout
            tips = sorted(set(out.decode().split()))
            age = self.fetch_age()
        st = os.statvfs(self.root)
        free_gb = st.f_bavail * st.f_frsize / 1e9
        ans = {"pid": os.getpid(), "mirror": mirror, "tips": tips, "fetch_age": age,
               "free_gb": round(free_gb, 2), "guest": socket.gethostname(), "python": sys.version.split()[0]}
        if free_gb < self.min_free_gb:
            ans["copies"] = copy_sizes(self.root)
        return ans

    def fetch_age(self) -> float | None:
        try:
            return max(0.0, time.time() - os.stat(os.path.join(self.mirror, LAST_FETCH)).st_mtime)
        except OSError:
            return None

    # mirror
    def ensure_mirror(self) -> None:
        if not os.path.isdir(self.mirror):
            git(["init", "-q", "--bare", self.mirror])
            git(["config", "gc.auto", "0"], cwd=self.mirror)

    def fetch(self, why: str) -> bool:
        if self.fetched or not self.git_url:
            return False
        self.fetched = True
        self.say(f"fetching the mirror from the forge ({why})")
        t0 = time.monotonic()
        with _mirror_lock(self.mirror):
            cp = self.run_tool(["git", "fetch", "-q", "--no-tags", self.git_url,
                                "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                               cwd=self.mirror, env=git_env(credential_env((self.cred or {}).get("user"),
                                                                            (self.cred or {}).get("password"))))
        if cp[0] != 0:
            err = cp[1].decode(errors="replace").strip().splitlines()
            self.say("forge fetch failed: " + (Masker([self.cred.get("password", "")] if self.cred else [])(
                (err[-1] if err else f"exit {cp[0]}").encode()).decode()))
            return False
        with open(os.path.join(self.mirror, LAST_FETCH), "w") as f:
            f.write(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
        self.say(f"fetched in {time.monotonic() - t0:.1f} s")
        return True

    def has_commit(self, commit: str) -> bool:
        return git(["cat-file", "-e", commit + "^{commit}"], cwd=self.mirror, check=False).returncode == 0

    def take_bundle(self, path: str, commit: str) -> bool:
        """Unbundle into refs/nev/<name>; False when its prerequisites are missing."""
        if git(["bundle", "verify", "-q", path], cwd=self.mirror, check=False).returncode != 0:
            return False
        with _mirror_lock(self.mirror):
            git(["fetch", "-q", "--no-tags", path, f"+HEAD:refs/nev/{self.name}"], cwd=self.mirror)
        return self.has_commit(commit)

    def supply(self, req: dict) -> None:
        """Make sure the mirror holds the commit: bundle, fetch, or ask for another bundle."""
        commit = req["commit"]
        self.ensure_mirror()
        age = self.fetch_age()
        if self.git_url and (age is None or age > self.max_age):
            self.fetch("never fetched" if age is None else f"last fetch {age:.0f} s ago")
        bundle = os.path.join(self.payload, "bundle")
        have_bundle = req["sizes"].get("bundle", 0) > 0
        for attempt in range(3):
            if have_bundle and self.take_bundle(bundle, commit):
                return
            if not have_bundle and self.has_commit(commit):
                git(["update-ref", f"refs/nev/{self.name}", commit], cwd=self.mirror)
                return
            if self.fetch("the bundle cannot supply the commit"):
                continue
            if attempt == 2:
                break
            tips = git(["for-each-ref", "--format=%(objectname)"], cwd=self.mirror).stdout.decode().split()
            self.wire.send_json(b"N", {"tips": sorted(set(tips))})
            while True:
                if self.stop.is_set():
                    raise Stopped()
                try:
                    size = self.bundles.get(timeout=0.2)
                    break
                except queue.Empty:
                    continue
            have_bundle = size > 0
        raise Refused(f"the lane cannot get commit {commit[:12]}: not in the bundle, the mirror or the forge")

    # the copy
    def registered(self) -> set[str]:
        out = git(["worktree", "list", "--porcelain"], cwd=self.mirror).stdout.decode(errors="surrogateescape")
        return {os.path.realpath(line[9:]) for line in out.splitlines() if line.startswith("worktree ")}

    def prepare_copy(self, commit: str) -> None:
        with _mirror_lock(self.mirror):
            if not os.path.isdir(self.copy):
                git(["worktree", "prune"], cwd=self.mirror)
            known = os.path.realpath(self.copy) in self.registered() and os.path.exists(
                os.path.join(self.copy, ".git"))
            if os.path.lexists(self.copy) and not known:
                aside = os.path.join(self.root, f".stray-{self.name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
                os.rename(self.copy, aside)
                self.say(f"{self.copy} was not a worktree of the lane's mirror; moved it aside to {aside} (nothing deleted)")
            if not known:
                git(["worktree", "add", "-q", "--detach", "--force", self.copy, commit], cwd=self.mirror)
                return
        git(["checkout", "-q", "--detach", "--force", commit], cwd=self.copy)
        git(["clean", "-q", "-fd"], cwd=self.copy)

    def apply_diff(self) -> None:
        path = os.path.join(self.payload, "diff")
        if os.path.getsize(path) == 0:
            return
        with open(path, "rb") as f:
            check_diff(self.copy, f.read())
        git(["apply", "--binary", "--whitespace=nowarn", path], cwd=self.copy)

    def make_links(self) -> None:
        if not os.path.isdir(self.shared):
            return
        copy = self.copy
        texts: list[str] = []
        cp = git(["grep", "-h", "-o", "-I", "-E", r"corpus/[A-Za-z0-9_.-]*ground-truth"], cwd=copy, check=False)
        if cp.returncode == 0:
            texts.append(cp.stdout.decode(errors="replace"))
        plan = links.plan(self.name, links.read_pins(copy), links.ground_truth_names(texts),
                          os.path.isdir(os.path.join(copy, "oracle")), os.path.isdir(os.path.join(copy, "webgpu-cts")))
        for line in links.apply_links(copy, self.shared, plan):
            self.say("linked " + line)

    def env_files(self) -> list[str]:
        return [os.path.join(self.copy, ".env"), os.path.join(self.copy, ".env.nev-rewrite"),
                os.path.join(self.payload, ".env")]

    def install_env(self, model_url: str | None) -> None:
        src = os.path.join(self.payload, ".env")
        if not os.path.exists(src):
            return
        with open(src, "rb") as f:
            text = swap_model_url(f.read(), model_url)
        tmp = os.path.join(self.copy, ".env.nev-rewrite")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.replace(tmp, os.path.join(self.copy, ".env"))

    def remove_env(self) -> None:
        for p in self.env_files():
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    # processes
    def run_tool(self, argv: list[str], cwd: str, env: dict) -> tuple[int, bytes]:
        """A helper process (fetch) that an interrupt stops too."""
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
        with self.child_lock:
            self.child = p
        try:
            _, err = p.communicate()
        finally:
            with self.child_lock:
                self.child = None
        if self.stop.is_set():
            raise Stopped()
        return p.returncode, err

    def kill_child(self) -> None:
        with self.child_lock:
            p = self.child
        if p is None or p.poll() is not None:
            return
        stop_tree(p.pid, signal.SIGINT if self.stop_signal == "INT" else signal.SIGTERM,
                  self.copy, _start_ticks(p.pid))

    def watch_stdin(self) -> None:
        """After the payload: a stop request or a closed connection stops the command."""
        while True:
            try:
                kind, data = self.wire.read_frame()
            except (EOFError, OSError, struct.error):
                self.stop_signal = "TERM"
                break
            if kind != b"J":
                continue
            req = json.loads(data)
            if req.get("op") == "stop":
                self.stop_signal = req.get("signal", "TERM")
                break
            if req.get("op") == "bundle":
                try:
                    self.wire.copy_to(os.path.join(self.payload, "bundle"), int(req["size"]))
                except (EOFError, OSError):
                    self.stop_signal = "TERM"
                    break
                self.bundles.put(int(req["size"]))
        self.stop.set()
        self.kill_child()

    def run_command(self, req: dict, log_path: str | None, masker: Masker) -> int:
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
        env.update({"NEV_ON_LANE": "1", "NEV_LANE_SHARED": self.shared})
        # Non-login SSH commands read no profile: put the lane's own nev (installed by
        # `nev lane install`) on PATH the way a login shell would.
        local_bin = os.path.join(os.path.expanduser("~"), ".local", "bin")
        if os.path.isdir(local_bin) and local_bin not in env.get("PATH", "").split(os.pathsep):
            env["PATH"] = local_bin + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        if os.path.isdir(self.shared):
            env.setdefault("NEV_LEDGER", os.path.join(self.shared, links.ledger_path(self.name)))
        log = None
        if log_path:
            try:
                os.makedirs(os.path.dirname(log_path), exist_ok=True)
                log = open(log_path, "ab")
            except OSError as e:
                self.say(f"cannot write the gate log {log_path}: {e}")
        try:
            p = subprocess.Popen(req["command"], cwd=self.copy, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except FileNotFoundError:
            self.wire.send(b"E", f"nev-lane: command not found: {req['command'][0]}\n".encode())
            return 127
        except PermissionError:
            self.wire.send(b"E", f"nev-lane: command not executable: {req['command'][0]}\n".encode())
            return 126
        with self.child_lock:
            self.child = p
        if self.stop.is_set():
            self.kill_child()
        log_lock = threading.Lock()
        pending = {b"O": b"", b"E": b""}

        def pump(stream: io.BufferedReader, kind: bytes) -> None:
            fd = stream.fileno()
            while True:
                data = os.read(fd, CHUNK)
                if not data:
                    break
                self.wire.send(kind, data)
                if log is not None:
                    with log_lock:
                        buf = pending[kind] + data
                        head, sep, tail = buf.rpartition(b"\n")
                        if sep:
                            log.write(masker(head + sep))
                            log.flush()
                        pending[kind] = tail

        threads = [threading.Thread(target=pump, args=(p.stdout, b"O"), daemon=True),
                   threading.Thread(target=pump, args=(p.stderr, b"E"), daemon=True)]
        for t in threads:
            t.start()
        status = p.wait()
        for t in threads:
            t.join(timeout=2)
        with self.child_lock:
            self.child = None
        if log is not None:
            for rest in pending.values():
                if rest:
                    log.write(masker(rest))
            log.close()
        return 128 - status if status < 0 else status

    def pull(self, dirs: list[str]) -> None:
        for d in dirs:
            check_rel(d.rstrip("/"), "--pull")
            src = os.path.join(self.copy, d)
            if not os.path.isdir(src) or not inside(self.copy, src):
                self.say(f"--pull {d}: no such folder in the lane copy; nothing pulled for it")
                continue
            self.wire.send_json(b"Q", {"dir": d})
            out = _FrameWriter(self.wire)
            with tarfile.open(fileobj=out, mode="w|gz", format=tarfile.PAX_FORMAT) as tf:
                tf.add(src, arcname=".")
            out.flush_all()
            self.wire.send(b"q")


class _FrameWriter(io.RawIOBase):
    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        self.buf += b
        if len(self.buf) >= CHUNK:
            self.flush_all()
        return len(b)

    def flush_all(self) -> None:
        if self.buf:
            self.wire.send(b"P", bytes(self.buf))
            self.buf.clear()


class _mirror_lock:
    """Serialises ref updates in the shared mirror across gates of different copies."""

    def __init__(self, mirror: str) -> None:
        self.path = mirror.rstrip("/") + ".lock"

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def swap_model_url(text: bytes, model_url: str | None) -> bytes:
    """The .env with its NEV_MODEL_URL (or GENERA_MODEL_URL) line pointing at the lane's gateway."""
    if not model_url:
        return text
    lines = text.split(b"\n")
    for i, line in enumerate(lines):
        s = line.lstrip()
        if s.startswith(b"export "):
            s = s[7:].lstrip()
        if s.startswith(b"NEV_MODEL_URL=") or s.startswith(b"GENERA_MODEL_URL="):
            lines[i] = line[: len(line) - len(s)] + s.split(b"=", 1)[0] + b"=" + model_url.encode()
    return b"\n".join(lines)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def escaped(copy: str, since: int) -> set[int]:
    """Our processes that left the command's tree (setsid, double fork) but still work in the
    copy: same user, started after the command, current directory inside the copy."""
    out: set[int] = set()
    me = os.getpid()
    real = os.path.realpath(copy)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                continue
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        started = _start_ticks(int(entry))
        if started is not None and started >= since and (cwd == real or cwd.startswith(real + os.sep)):
            out.add(int(entry))
    return out


def stop_tree(pid: int, sig: int, copy: str | None = None, since: int | None = None) -> None:
    """Signal the command's process group, every descendant and every process of this run that
    escaped the tree (see `escaped`), then KILL what is left after STOP_GRACE."""

    def victims_now() -> set[int]:
        v = {pid, *descendants(pid)}
        if copy is not None and since is not None:
            v |= escaped(copy, since)
        return v

    victims = victims_now()
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for v in victims:
        try:
            os.kill(v, sig)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline:
        if not [v for v in victims if _alive(v)]:
            return
        time.sleep(0.05)
    victims |= victims_now()
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for v in victims:
        try:
            os.kill(v, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def copy_sizes(root: str) -> list[dict]:
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.startswith(".") or not os.path.isdir(path) or os.path.islink(path):
            continue
        cp = subprocess.run(["du", "-sk", path], capture_output=True)
        kb = int(cp.stdout.split()[0]) if cp.returncode == 0 and cp.stdout else 0
        out.append({"name": name, "kb": kb})
    return sorted(out, key=lambda c: -c["kb"])


def lane_model_url() -> str | None:
    """The gateway as this lane reaches it, for the run's `.env`: NEV_LANE_MODEL_URL in the lane
    program's environment (the lane's own sshd session), else `~/.lane-model-env`."""
    url = os.environ.get("NEV_LANE_MODEL_URL") or os.environ.get("GENERA_LANE_MODEL_URL")
    if url:
        return url
    return dotenv.first(dotenv.read(os.path.expanduser("~/.lane-model-env")),
                        "NEV_LANE_MODEL_URL", "GENERA_LANE_MODEL_URL")


def env_secrets(path: str) -> list[str]:
    """Values of secret-named variables in a .env file, to mask them in the gate log."""
    secret = re.compile(r"(?i)KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL")
    return [v for k, v in dotenv.read(path).items() if v and secret.search(k)]


# -- entry points ----------------------------------------------------------------------------

def status(req: dict) -> dict:
    """`nev lane list`: free disk, copies present, gates running (locks held)."""
    root = req["root"]
    ans: dict = {"guest": socket.gethostname(), "root": root, "copies": [], "running": []}
    if not os.path.isdir(root):
        ans["free_gb"] = None
        return ans
    st = os.statvfs(root)
    ans["free_gb"] = round(st.f_bavail * st.f_frsize / 1e9, 2)
    mirror = os.path.join(root, MIRROR)
    if os.path.isdir(mirror):
        out = git(["worktree", "list", "--porcelain"], cwd=mirror, check=False).stdout.decode(errors="replace")
        for line in out.splitlines():
            if line.startswith("worktree ") and os.path.realpath(line[9:]) != os.path.realpath(mirror):
                ans["copies"].append(os.path.basename(line[9:]))
    for name in sorted(os.listdir(root)):
        if name.startswith(".lock-"):
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                ans["running"].append(name[6:])
            finally:
                os.close(fd)
    return ans


def cleanup(req: dict) -> dict:
    """The dev box's second call after a dropped connection: stop the run, remove the .env files.

    Only touches the copy when no other gate holds its lock (the one that does removes its own).
    """
    root, name = req["root"], req["name"]
    pid = req.get("pid")
    if pid:
        try:
            os.kill(int(pid), signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    path = os.path.join(root, ".lock-" + name)
    ans: dict = {"removed": [], "busy": False}
    if not os.path.exists(path):
        return ans
    fd = os.open(path, os.O_RDWR)
    try:
        deadline = time.monotonic() + float(req.get("wait", 5))
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    ans["busy"] = True
                    return ans
                time.sleep(0.05)
        if not req.get("keep_env"):
            for p in (os.path.join(root, name, ".env"), os.path.join(root, name, ".env.nev-rewrite"),
                      os.path.join(root, ".payload-" + name, ".env")):
                if os.path.lexists(p):
                    os.unlink(p)
                    ans["removed"].append(p)
            shutil.rmtree(os.path.join(root, ".payload-" + name), ignore_errors=True)
        return ans
    finally:
        os.close(fd)


def gate(wire: Wire, first: dict) -> int:
    lane = Lane(wire, first)
    result: dict = {"status": None}

    def on_signal(signum: int, frame: object) -> None:
        if lane.lock_fd is None:  # still waiting for another gate's lock: nothing to undo
            os._exit(130 if signum == signal.SIGINT else 143)
        lane.stop_signal = "INT" if signum == signal.SIGINT else "TERM"
        lane.stop.set()
        lane.kill_child()

    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_signal)
    keep_env = False
    try:
        lane.lock()
        wire.send_json(b"H", lane.hello())
        req = wire.read_json()
        if req.get("op") != "payload":
            result["aborted"] = True
            return 0
        keep_env = bool(req.get("keep_env"))
        lane.cred = req.get("cred")
        os.makedirs(lane.payload, mode=0o700, exist_ok=True)
        os.chmod(lane.payload, 0o700)
        for member in ("bundle", "diff", "untracked", ".env"):
            size = int(req["sizes"].get(member, 0))
            path = os.path.join(lane.payload, member)
            if member == ".env" and size == 0:
                continue
            wire.copy_to(path, size)
        threading.Thread(target=lane.watch_stdin, daemon=True).start()
        t0 = time.monotonic()
        lane.supply(req)
        if lane.stop.is_set():
            raise Stopped()
        lane.prepare_copy(req["commit"])
        lane.apply_diff()
        if req["sizes"].get("untracked", 0):
            extract(lane.copy, os.path.join(lane.payload, "untracked"))
        lane.make_links()
        lane.install_env(lane_model_url())
        result["prepare_s"] = round(time.monotonic() - t0, 3)
        if lane.stop.is_set():
            raise Stopped()
        secrets = env_secrets(os.path.join(lane.payload, ".env"))
        if lane.cred and lane.cred.get("password"):
            secrets.append(lane.cred["password"])
        log_path = None
        if os.path.isdir(lane.shared):
            log_path = os.path.join(lane.shared, links.gate_log_path(
                lane.name, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()), socket.gethostname(), req["commit"]))
            result["log"] = log_path
        status_ = lane.run_command(req, log_path, Masker(secrets))
        if lane.stop.is_set():
            result["stopped"] = lane.stop_signal
        result["status"] = status_
        if not lane.stop.is_set():
            lane.pull(list(req.get("pull") or []))
        return status_
    except Stopped:
        result["stopped"] = lane.stop_signal
        return 130 if lane.stop_signal == "INT" else 143
    except Refused as e:
        result["refused"] = str(e)
        return 1
    except EOFError:
        result["refused"] = "the connection closed before the payload arrived"
        return 1
    finally:
        if not keep_env:
            lane.remove_env()
        result["env_removed"] = not any(os.path.lexists(p) for p in lane.env_files())
        try:
            import resource

            result["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            result["command_maxrss_kb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss or None
        except (ImportError, OSError):
            pass
        shutil.rmtree(os.path.join(lane.payload), ignore_errors=True) if not keep_env else None
        wire.send_json(b"R", result)
        if lane.lock_fd is not None:
            os.close(lane.lock_fd)


def main() -> None:
    wire = Wire(sys.stdin.buffer, sys.stdout.buffer)  # type: ignore[arg-type]
    try:
        first = wire.read_json()
        op = first.get("op")
        if op == "status":
            wire.send_json(b"R", status(first))
            code = 0
        elif op == "cleanup":
            wire.send_json(b"R", cleanup(first))
            code = 0
        elif op == "hello":
            code = gate(wire, first)
        else:
            wire.send_json(b"R", {"refused": f"unknown request {op!r}"})
            code = 1
    except Refused as e:
        wire.send_json(b"R", {"refused": str(e)})
        code = 1
    except EOFError:
        code = 1
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
