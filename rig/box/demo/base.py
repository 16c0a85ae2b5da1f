"""What every step of `nev box demo` uses (`rig/box/demo/steps.py` has the steps): the demo's
options and state, running `nev` with the demo's settings and each command's output in its
step's log, the demo's own folders, the dashboard a kept box leaves running, and waiting for a
step that runs beside others."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lanes.base import procgroup
from lanes.base.gitrun import Repo
from lanes.base.mask import mask
from lanes.base.ui import info
from rig.box import Box
from rig.box.demo.bank import FUNCTION
from rig.box.demo.commands import StepFailed, run_stamped
from rig.box.demo.report import PASSED, Results, StepResult
from rig.box.plan import PROJECT
from rig.box.state import BoxInfo


@dataclass
class Options:
    keep: bool = False
    cases: int = 200
    box: Box | None = None            # default: NEV_BOX_NAME/NEV_BOX_NET, else demo / 198.18.77
    say: Callable[[str], None] = info
    stdout: Callable[[str], None] = print


@dataclass
class DemoBase:
    """The demo's state and the helpers every step uses."""

    opts: Options
    box: Box
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    t0: float = field(default_factory=time.monotonic)
    steps: list[StepResult] = field(default_factory=list)
    results: Results = field(default_factory=lambda: Results(function=FUNCTION))
    info: BoxInfo | None = None
    env: dict[str, str] = field(default_factory=dict)
    work: Path = Path()
    home: Path = Path()
    logs: Path = Path()
    primary: Path = Path()
    track: Path = Path()
    repo_url: str = ""
    dev_repo_url: str = ""
    job: str = ""
    running: dict[int, threading.Thread] = field(default_factory=dict)   # steps running beside others
    say_lock: threading.Lock = field(default_factory=threading.Lock)
    installed: threading.Event = field(default_factory=threading.Event)   # step 4 installed nev on lane 0
    box_up: threading.Event = field(default_factory=threading.Event)      # step 1's `box up` has ended

    # ---- running nev ----

    def nev(self, *args: str, step: str, timeout: float = 900, ok: tuple[int, ...] = (0,),
            cwd: Path | None = None, relay: bool = False) -> subprocess.CompletedProcess:
        """Run `nev ARGS` (this checkout) with the demo's settings; output kept in the step's log,
        each progress line (stderr) with the seconds since the command started: the profile.
        `relay`: each progress line is said as it comes too (`box up`: minutes when cold)."""
        argv = [sys.executable, "-m", "rig.cli", *args]
        cp, stamped = run_stamped(argv, cwd or PROJECT, self.env, timeout,
                                  on_line=self.relay(step) if relay else None)
        self.log(step, f"$ nev {' '.join(args)}\n{cp.stdout}{stamped}"
                       f"[exit {cp.returncode} after {stamped.seconds:.1f} s]\n")
        if cp.returncode not in ok:
            last = (cp.stderr.strip().splitlines() or cp.stdout.strip().splitlines() or ["(no output)"])[-1]
            raise StepFailed(f"`nev {' '.join(args[:3])} ...` exited {cp.returncode}: {last} "
                             f"(whole output: {self.log_path(step)})")
        return cp

    def relay(self, step: str) -> Callable[[str], None]:
        """Say a running command's progress line under the demo's clock, led by its step."""
        def say(line: str) -> None:
            if line.strip():
                with self.say_lock:
                    self.opts.say(f"[{time.monotonic() - self.t0:6.1f} s]   {step}: {mask(line.strip())}")
        return say

    def log_path(self, step: str) -> Path:
        return self.logs / f"{step}.log"

    def prepare(self) -> None:
        """The demo's own folders (work under the box's folder, which `box down` removes; notes and
        logs under ~/.local/share/nev/demo/<box>, outside any git worktree) and its settings."""
        self.home = Path(os.path.expanduser("~/.local/share/nev/demo")) / self.box.name
        if self.home.exists():    # the demo's own notes and logs of an earlier run
            self.stop_earlier_dashboard()
            shutil.rmtree(self.home)
        self.logs = self.home / "logs"
        self.logs.mkdir(parents=True)
        self.work = self.box.dir / "demo" / self.tag
        self.env = {**os.environ, "PYTHONPATH": str(PROJECT), "NEV_BOX_NAME": self.box.name,
                    "NEV_BOX_NET": self.box.net, "NEV_BOX_DIR": str(self.box.dir.parent)}
        self.env.pop("NEV_ON_LANE", None)

    def log(self, step: str, text: str) -> None:
        p = self.log_path(step)
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("a") as f:
            f.write(mask(text))

    def git(self, path: Path, *args: str) -> str:
        return Repo(path, env={"GIT_ASKPASS": str(self.binfo.forge_askpass)}).out(*args)

    @property
    def binfo(self) -> BoxInfo:
        assert self.info is not None, "the box is not up"
        return self.info

    def dashboard_pid_file(self) -> Path:
        return self.home / "dashboard.pid"

    def _start_dashboard(self) -> tuple[str, int]:
        """`nev rig dashboard` on a free port of 127.0.0.1, left running for the kept box; its pid in
        dashboard.pid beside the logs (the next demo on this box stops it)."""
        log = self.logs / "dashboard.log"
        argv = [sys.executable, "-m", "rig.cli", "rig", "dashboard", "--port", "0"]
        with log.open("wb") as out:
            p = subprocess.Popen(argv, cwd=PROJECT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        self.dashboard_pid_file().write_text(f"{p.pid}\n")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            m = re.search(r"dashboard: (http://127\.0\.0\.1:\d+/)", log.read_text(errors="replace"))
            if m:
                return m.group(1), p.pid
            if p.poll() is not None:
                raise StepFailed(f"nev rig dashboard exited {p.returncode}; see {log}")
            time.sleep(0.2)
        procgroup.stop(p.pid, leader=p)
        raise StepFailed(f"nev rig dashboard did not serve in 120 s; see {log}")

    def stop_earlier_dashboard(self) -> None:
        """The dashboard an earlier `--keep` demo on this box left running (by its recorded pid)."""
        try:
            pid = int(self.dashboard_pid_file().read_text().strip())
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            return
        if "rig dashboard" in cmd:
            procgroup.stop(pid)

    def join_step(self, number: int) -> None:
        """Wait for a step that runs beside the others (none: nothing to wait for)."""
        th = self.running.pop(number, None)
        if th is not None:
            th.join()

    def wait_step(self, number: int) -> None:
        """Inside a step: wait for step `number` (running beside it); it must have passed."""
        self.join_step(number)
        done = next((s for s in self.steps if s.number == number), None)
        if done is None or done.status != PASSED:
            raise StepFailed(f"step {number} did not pass; this step needs it")
