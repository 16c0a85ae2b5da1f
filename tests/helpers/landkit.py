"""Real temporary repositories for the landing scenarios, and the invariant checked after each.

A `Kit` is a primary checkout on `main` (tracks.json, specs/, handoff.md with a roster,
src/, bench/) whose gate is a small shell script outside the repository, steered by files
in a control folder: its exit code, a sleep, and how many times it moves main (by a real
commit in the primary checkout) while it runs. The script logs every tip it gated and
whether it passed, so the invariant can say "main is its old value or exactly a gated tip".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GATE_SH = r"""#!/bin/sh
ctl="$1"
head=$(git rev-parse HEAD)
echo "$head start $$" >> "$ctl/gate.log"
echo $$ > "$ctl/gate.pid"
if [ -f "$ctl/move-main" ]; then
  n=$(cat "$ctl/move-main")
  if [ "$n" -gt 0 ]; then
    echo $((n - 1)) > "$ctl/move-main"
    (cd "$ctl/../primary" && echo "move $n" >> moved.txt && git add moved.txt && git commit -qm "moved $n" \
      && echo "$(git rev-parse HEAD) moved" >> "$ctl/gate.log")
  fi
fi
if [ -f "$ctl/sleep" ]; then sleep "$(cat "$ctl/sleep")" & echo $! > "$ctl/child.pid"; wait $!; fi
rc=0
[ -f "$ctl/rc" ] && rc=$(cat "$ctl/rc")
[ "$rc" = 0 ] && echo "$head pass" >> "$ctl/gate.log"
echo "$head end" >> "$ctl/gate.log"
exit "$rc"
"""

ROSTER = "# Handoff\n\n## Roster\n\n- alpha: floats, in progress\n- beta: tables\n- `gamma`: idle\n\n## Notes\n\nnothing yet\n"


def git(cwd: Path, *args: str, check: bool = True) -> str:
    cp = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, env=git_env())
    if check and cp.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {cp.stderr}")
    return cp.stdout.strip()


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEV_", "GENERA_", "GIT_"))}
    env.update({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1", "HOME": os.environ.get("HOME", "/root")})
    return env


@dataclass
class Run:
    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class Kit:
    base: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def primary(self) -> Path:
        return self.base / "primary"

    @property
    def ctl(self) -> Path:
        return self.base / "ctl"

    # -- the gate's processes, as this machine numbers them ---------------
    # The gate runs in the sandbox's own PID namespace, so the pids it writes (gate.pid,
    # child.pid) are the namespace's; these find the same processes in this machine's /proc.
    def _procs(self) -> list[tuple[int, int, list[str]]]:
        out = []
        for e in Path("/proc").iterdir():
            if not e.name.isdigit():
                continue
            try:
                argv = (e / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
                ppid = int((e / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out.append((int(e.name), ppid, argv))
        return out

    def gate_processes(self) -> list[int]:
        """This machine's pids of anything running the gate script or working in the kit's folders."""
        base = str(self.base.resolve())
        found = []
        for pid, _, argv in self._procs():
            if pid == os.getpid():
                continue
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                cwd = ""
            if argv[-2:] == [f"{self.ctl}/gate.sh", str(self.ctl)] or (argv[:1] == ["sleep"] and cwd.startswith(base)):
                found.append(pid)
        return found

    def _one(self, pick) -> int:
        # a child just forked still runs the gate's argv until it execs: look again a moment later
        deadline = time.monotonic() + 10
        while True:
            procs = self._procs()
            found = pick(procs)
            if len(found) == 1 or time.monotonic() > deadline:
                assert len(found) == 1, found
                return found[0]
            time.sleep(0.05)

    def gate_host_pid(self) -> int:
        gate = [f"{self.ctl}/gate.sh", str(self.ctl)]

        def pick(procs):
            mine = {pid for pid, _, argv in procs if argv[-2:] == gate}
            return [pid for pid, ppid, argv in procs if pid in mine and ppid not in mine]
        return self._one(pick)

    def gate_child_host_pid(self) -> int:
        gate = self.gate_host_pid()
        return self._one(lambda procs: [pid for pid, ppid, argv in procs if ppid == gate and argv[:1] == ["sleep"]])

    # -- building -------------------------------------------------------
    @classmethod
    def create(cls, base: Path, tracks: dict | None = None) -> Kit:
        k = cls(base)
        k.ctl.mkdir(parents=True)
        (k.ctl / "gate.sh").write_text(GATE_SH)
        git(base, "init", "-q", "-b", "main", str(k.primary))
        git(k.primary, "config", "core.hooksPath", "/dev/null")
        k.write("tracks.json", json.dumps(tracks or k.tracks()))
        k.write("handoff.md", ROSTER)
        k.write("src/a.txt", "a\n")
        k.write("src/gen/f.floor.json", '{"cases_passed": 3}\n')
        k.write("bench/x.sh", "echo x\n")
        k.write("scripts/setup", "echo setup\n")
        k.write("README.md", "readme\n")
        k.spec("alpha", ["src/**", "docs/*.md"])
        k.spec("beta", ["lib/**"])
        git(k.primary, "add", "-A")
        git(k.primary, "commit", "-qm", "base")
        return k

    def tracks(self, **over: object) -> dict:
        t: dict = {"verify": f"sh {self.ctl}/gate.sh {self.ctl}", "landChecks": [],
                   "protected": ["scripts/setup", ".ci/"],
                   "specWatch": {"pollEnv": {"NEV_LANE_STRICT": "1"}, "landScript": "nev land --approved"}}
        t.update(over)
        return t

    def write(self, rel: str, text: str, root: Path | None = None) -> None:
        p = (root or self.primary) / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def spec(self, name: str, touches: list[str]) -> None:
        body = "---\ntouches:\n" + "".join(f"  - {json.dumps(t)}\n" for t in touches) + "---\n# " + name + "\n"
        self.write(f"specs/{name}.md", body)

    def commit_main(self, files: dict[str, str | None], msg: str = "main change") -> str:
        for rel, text in files.items():
            if text is None:
                git(self.primary, "rm", "-q", rel)
            else:
                self.write(rel, text)
                git(self.primary, "add", rel)
        git(self.primary, "commit", "-qm", msg)
        return self.rev("main")

    def track(self, name: str, files: dict[str, str | None] | None = None,
              renames: dict[str, str] | None = None, msg: str = "track work") -> Path:
        """A track worktree on branch `name` from main, with one commit of `files`."""
        wt = self.base / f"wt-{name}"
        if not wt.exists():
            git(self.primary, "worktree", "add", "-q", "-b", name, str(wt), "main")
        for old, new in (renames or {}).items():
            (wt / new).parent.mkdir(parents=True, exist_ok=True)
            git(wt, "mv", old, new)
        for rel, text in (files or {"src/new.txt": f"{name} work\n"}).items():
            if text is None:
                git(wt, "rm", "-q", rel)
            else:
                self.write(rel, text, root=wt)
                git(wt, "add", "-f", rel)
        git(wt, "commit", "-qm", msg)
        return wt

    # -- reading --------------------------------------------------------
    def rev(self, ref: str) -> str:
        return git(self.primary, "rev-parse", "--verify", "--quiet", ref + "^{commit}", check=False)

    def spec_sha(self, name: str) -> str:
        return git(self.primary, "rev-parse", f"main:specs/{name}.md")

    def show(self, ref: str, path: str) -> str | None:
        cp = subprocess.run(["git", "-C", str(self.primary), "show", f"{ref}:{path}"], capture_output=True, text=True)
        return cp.stdout if cp.returncode == 0 else None

    def refs(self) -> str:
        return git(self.primary, "for-each-ref", "--format=%(refname) %(objectname)")

    def gate_log(self) -> list[str]:
        p = self.ctl / "gate.log"
        return p.read_text().splitlines() if p.exists() else []

    def gated_passed(self) -> set[str]:
        return {ln.split()[0] for ln in self.gate_log() if ln.endswith(" pass")}

    def moved(self) -> set[str]:
        return {ln.split()[0] for ln in self.gate_log() if ln.endswith(" moved")}

    def gates_started(self) -> int:
        return sum(1 for ln in self.gate_log() if " start " in ln)

    def land_worktrees(self) -> list[str]:
        return [ln for ln in git(self.primary, "worktree", "list", "--porcelain").splitlines()
                if ln.startswith("worktree ") and "/nev/land-wt/" in ln]

    def common(self) -> Path:
        return self.primary / ".git"

    # -- steering the gate ------------------------------------------------
    def gate(self, rc: int | None = None, sleep: float | None = None, move_main: int | None = None) -> None:
        for name, v in (("rc", rc), ("sleep", sleep), ("move-main", move_main)):
            if v is not None:
                (self.ctl / name).write_text(str(v))

    # -- running nev ----------------------------------------------------
    def env(self, **over: str) -> dict[str, str]:
        env = git_env()
        # NEV_ON_LANE=1: the gate runs in place, as on a lane (verify is lane-only otherwise, and these
        # tests are about the landing, not where it gates); a test of the lane rules sets it to "".
        env.update({"PYTHONPATH": str(ROOT), "NEV_LANES_FILE": str(self.base / "no-lanes.json"),
                    "NEV_STATE_DIR": str(self.base / "state"), "NEV_LAND_LOCK_WAIT": "60", "NEV_ON_LANE": "1",
                    # the gate runs in the sandbox: its control folder (and the primary it moves
                    # main in, for the race tests) are the harness's, written by the gate script
                    "NEV_SANDBOX_WRITE": str(self.base),
                    "NEV_SANDBOX_ENV": "GIT_AUTHOR_NAME,GIT_AUTHOR_EMAIL,GIT_COMMITTER_NAME,GIT_COMMITTER_EMAIL,"
                                       "GIT_CONFIG_NOSYSTEM"})
        env.update(self.extra_env)
        env.update(over)
        return env

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "rig.cli", "land", *args]

    def nev(self, *args: str, timeout: float = 60, **env: str) -> Run:
        # Output goes to files, not pipes: a gate left running by a killed lander keeps its
        # copy of the lander's stderr open, and a pipe would make us wait for it.
        return finish(self.start(*args, **env), timeout)

    def start(self, *args: str, **env: str) -> subprocess.Popen:
        n = len(list(self.base.glob("out-*")))
        out, err = self.base / f"out-{n}.txt", self.base / f"err-{n}.txt"
        with open(out, "w") as fo, open(err, "w") as fe:
            p = subprocess.Popen(self.argv(*args), cwd=self.primary, stdout=fo, stderr=fe,
                                 text=True, env=self.env(**env))
        p.outfiles = (out, err)  # type: ignore[attr-defined]
        return p

    def land(self, name: str, *extra: str, tip: str | None = None, spec_sha: str | None = None, **env: str) -> Run:
        return self.nev(name, spec_sha or self.spec_sha(name), tip or self.rev(name), *extra, **env)


def finish(p: subprocess.Popen, timeout: float = 60) -> Run:
    p.wait(timeout=timeout)
    out, err = p.outfiles  # type: ignore[attr-defined]
    return Run(p.returncode, out.read_text(), err.read_text())


def wait_for(cond, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def pid_dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] == "Z"
    except OSError:
        return True


def check_invariant(k: Kit, old_main: str, track: str, track_tip: str, landed: bool | None = None) -> None:
    """After every scenario: main is its old value (or a commit the scenario itself made on it)
    or exactly a tip the gate passed, never anything else; no work is lost (the branch still
    exists at its tip unless it landed, and a landed track's files are on main)."""
    main = k.rev("main")
    allowed = {old_main} | k.moved()
    assert main in allowed or main in k.gated_passed(), f"main {main} is neither old nor a gated tip"
    moved_to_gated = main not in allowed
    if landed is not None:
        assert moved_to_gated == landed, f"landed={moved_to_gated}, expected {landed}"
    branch = k.rev(f"refs/heads/{track}")
    if moved_to_gated:
        # The track's own files are on main.
        for rel in git(k.primary, "diff", "--name-only", "--diff-filter=AM",
                       git(k.primary, "merge-base", old_main, track_tip), track_tip).splitlines():
            if rel != "handoff.md":
                assert k.show("main", rel) == k.show(track_tip, rel), f"{rel} of the track is not on main"
        # Exactly one parent chain: never a merge commit.
        assert git(k.primary, "rev-list", "--merges", f"{old_main}..main") == ""
    else:
        assert branch == track_tip, f"branch {track} is {branch!r}, expected its tip {track_tip}"
    # No gate is left running: neither the gate's shell nor its child (found by what they run
    # and where: the pids they write are the sandbox's PID namespace's).
    wait_for(lambda: not k.gate_processes(), 10, "every gate process to end")


def sigterm(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGTERM)
