"""`nev job run`: a job's stages with durable state (the job workflow's run step, on the lane).

On every start and resume: the requirements check (exit 9), then the inventory check
(3: a not-run result committed locally, not published; 10: a failed result), then every
stage not yet passed, in order. A passed stage is never rerun; a stage a kill cut short
is rerun from its start (the worktree is reset to the commit it started from, and what
is left of its processes is ended). Each passed stage's changes are committed; the last
commit is the result (see `jobs.result`).

Exit codes (docs/exit-codes.md): 0 passed, 1 a stage failed, 3 inventory not ready
(resend), 8 stopped (signal or the wall-clock limit), 9 requirements unmet, 10 inventory
refusal that never clears by itself.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import folknet
from bench import readiness as inv
from bench.gateway import url_from_settings
from jobs import jobkeys, preflight, result, verify_jail, writer
from jobs import manifest as manifest_mod
from jobs.manifest import Manifest, Stage
from jobs.stagelog import MaskedLog, stage_secrets
from jobs.state import Event, JobState, Status, file_hash
from lanes.base import procgroup, settings
from lanes.base.errors import ConfigError, NevError
from lanes.base.exitcodes import Exit
from lanes.base.gitrun import GitError, Repo
from lanes.base.mask import mask
from lanes.base.ui import info

HEARTBEAT_S = 5.0
_PR_SET_PDEATHSIG = 1


def default_state_dir(name: str, environ: Mapping[str, str] | None = None) -> Path:
    explicit = settings.get(settings.JOB_STATE, environ)
    if explicit:
        return Path(explicit).expanduser()
    base = settings.path(settings.STATE_DIR, environ)
    return base / "jobs" / name


def needs_of(m: Manifest) -> inv.Needs:
    out = [inv.Need(x.alias, x.provider, None) for x in m.models]
    for s in m.stages:
        out += [inv.Need(x.alias, x.provider, s.name) for x in s.models]
        out += [inv.Need("", p, s.name) for p in s.providers]
    return inv.Needs(models=out, key=m.key)


def _die_with_parent() -> None:  # runs in the child before exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def with_lane_gateway(env: Mapping[str, str]) -> dict[str, str]:
    """A stage's environment whose NEV_MODEL_URL (which a harness may read) is, on a lane, the
    lane's own gateway URL (`bench.gateway.url_from_settings`: ~/.lane-model-env), never a
    development box's value the run's environment carried; absent when the lane has none (the
    requirements check has said so). Off a lane, `env` as it is."""
    out = dict(env)
    if not settings.get(settings.ON_LANE, env):
        return out
    out.pop("NEV_MODEL_URL", None)
    out.pop("GENERA_MODEL_URL", None)
    try:
        out["NEV_MODEL_URL"] = url_from_settings(env)
    except ConfigError:
        pass
    return out


class _Stop:
    signum: int | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.signum = signum


class Runner:
    def __init__(self, m: Manifest, workdir: Path, js: JobState, inventory: Path | None,
                 declared: Path | None, environ: Mapping[str, str], run_id: str | None) -> None:
        self.m = m
        self.workdir = workdir
        self.js = js
        self.inventory = inventory
        self.declared = declared
        self.environ = dict(environ)
        self.run_id = run_id
        self.repo = Repo(workdir)
        self.stop = _Stop()
        self.logs = js.folder / "logs"

    # -- results ---------------------------------------------------------------------------
    def _finish(self, outcome: Status, code: int, reasons: list[str]) -> int:
        try:
            first = next((e.time for e in self.js.events if e.event is Event.STAGE_STARTED), None)
            commit = result.commit(self.repo, self.m.name, outcome, code, self.run_id, reasons,
                                   self.m.spec_name, first)
            self.js.record(Event.RESULT_COMMITTED, outcome=outcome, exit=code, commit=commit)
        except GitError as e:
            info(f"job {self.m.name}: could not commit the {outcome} result: {e}")
        self.js.record(Event.JOB_ENDED, outcome=outcome, exit=code)
        info(f"job {self.m.name}: {outcome} (exit {code})")
        return code

    # -- the checks ------------------------------------------------------------------------
    def _preflight(self) -> list[preflight.Unmet]:
        facts = preflight.gather(self.m, self.workdir, self.js.used_s(), self.environ)
        unmet = preflight.evaluate(facts)
        if self.m.has_writer():
            why = writer.refusal(self.workdir, self.environ)
            if why:
                unmet.append(preflight.Unmet("writer-undeclared", why))
        reasons = [u.to_json() for u in unmet]
        self.js.record(Event.PREFLIGHT_FAILED if unmet else Event.PREFLIGHT_PASSED, reasons=reasons,
                       inputs={"manifest": self.m.digest})
        for u in unmet:
            info(f"requirements: unmet: {u.message}")
        return unmet

    def _inventory(self) -> tuple[int, list[inv.Reason]]:
        if not self.m.needs_inventory():
            self.js.record(Event.INVENTORY_SKIPPED, exit=0, reasons=[])
            return 0, []
        live = self.inventory or settings.get_path(settings.INVENTORY, self.environ)
        copy = self.js.folder / "inventory.json"
        try:
            if live is None:
                raise FileNotFoundError
            shutil.copyfile(live, copy)
        except OSError:  # missing or unreadable: checked as a missing snapshot, never an old copy
            copy.unlink(missing_ok=True)
        self.environ["JOB_INVENTORY"] = str(copy)
        self.environ["JOB_INVENTORY_LIVE"] = str(live)
        declared = self._declared_path()
        snap = inv.read_snapshot(copy)
        reasons = inv.check(needs_of(self.m), inv.Snapshot(str(live), snap.data, snap.problem),
                            folknet.load(declared), dt.datetime.now(dt.UTC),
                            float(settings.get_int(settings.INVENTORY_MAX_AGE, self.environ)))
        code = inv.exit_code(reasons)
        event = {0: Event.INVENTORY_PASSED, 3: Event.INVENTORY_TRANSIENT,
                 10: Event.INVENTORY_PERMANENT}[code]
        self.js.record(event, exit=code, reasons=[r.to_json() for r in reasons],
                       inputs={"snapshot": file_hash(copy), "declared": file_hash(declared)})
        for r in reasons:
            info(f"inventory: {'refused' if r.permanent else 'not ready'}: {r.message}")
        return code, reasons

    def _declared_path(self) -> Path:
        """The declared aliases of this job: the file submit sent, else NEV_FOLKNET_FILE in the job's tree."""
        declared = self.declared or settings.path(settings.FOLKNET_FILE, self.environ)
        return declared if declared.is_absolute() else self.workdir / declared

    # -- stages ----------------------------------------------------------------------------
    def _recover(self) -> None:
        """A stage the last attempt left running was killed: end what is left of it. After the
        lane restarted (another boot) nothing of it is left, and its group id may now be another
        process's (the new Dagu's, this runner's): nothing is signalled."""
        boot = procgroup.boot_id()
        for name, s in list(self.js.state.stages.items()):
            if s.status is Status.RUNNING:
                same_boot = s.boot is None or s.boot == boot
                if s.pgid and same_boot and procgroup.alive(s.pgid):
                    procgroup.stop(s.pgid)
                self.js.record(Event.STAGE_INTERRUPTED, stage=name, same_boot=same_boot)
                info(f"stage {name}: cut short by the last run"
                     f"{'' if same_boot else ' (the lane has restarted since)'}; it reruns from its start")

    def _passed(self, st: Stage) -> bool:
        s = self.js.state.stages.get(st.name)
        return bool(s and s.status is Status.PASSED and s.digest == st.digest())

    def _reset_to(self, commit: str | None) -> None:
        if commit and self.repo.rev("HEAD") != commit or not self.repo.is_clean():
            if commit:
                self.repo.git("reset", "-q", "--hard", commit)
            self.repo.git("clean", "-q", "-fd")

    def _argv(self, st: Stage) -> tuple[list[str], dict[str, str]]:
        if st.kind == "writer":
            la = writer.prepare(st, self.workdir, self.js.folder, self.environ)
            return la.argv, la.env
        command = st.command
        if command is None:  # a verify stage without a command: tracks.json's verify
            from jobs import tracks as tracks_file

            command = tracks_file.load(self.workdir / "tracks.json").verify
        return ["bash", "-c", command], {}

    def _stage_secrets(self, env: Mapping[str, str]) -> list[str]:
        """What a stage's log masks: its secret-named variables and the key and token files it
        can read (the forge token, the lane's gateway key, this job's own key)."""
        model_key = settings.get(settings.MODEL_KEY_FILE, env)
        job_key = jobkeys.lane_key_path(str(Path(model_key).expanduser().parent), self.m.name) if model_key else None
        return stage_secrets(env, [settings.get(settings.FORGE_TOKEN_FILE, env), model_key, job_key])

    def _start(self, st: Stage, argv: list[str], env: dict[str, str], log: Any) -> subprocess.Popen:
        """A stage's process, its output to one pipe. A verify runs the track's own code: in the
        sandbox (jobs/verify_jail.py), its ground truth built first (said in the stage's log)."""
        if st.kind == "verify":
            def say(line: str) -> None:
                log.write((mask(line) + "\n").encode())
                log.flush()

            return verify_jail.popen(argv, self.workdir, env, say, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return subprocess.Popen(argv, cwd=self.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)

    def _run_stage(self, st: Stage) -> int:
        prev = self.js.state.stages.get(st.name)
        if prev and prev.status in (Status.INTERRUPTED, Status.STOPPED, Status.FAILED, Status.RUNNING):
            self._reset_to(prev.head_at_start)
        self.logs.mkdir(parents=True, exist_ok=True)
        log_path = self.logs / f"{st.name}.log"
        head = self.repo.rev("HEAD")
        try:
            argv, extra = self._argv(st)
        except NevError as e:
            self.js.record(Event.STAGE_STARTED, stage=st.name, log=str(log_path),
                           inputs={"stage": st.digest(), "manifest": self.m.digest, "head": head})
            log_path.write_text(mask(str(e)) + "\n", encoding="utf-8")
            self.js.record(Event.STAGE_FAILED, stage=st.name, exit=1, reason=mask(str(e)))
            info(f"stage {st.name}: refused: {e}")
            return 1
        env = {**self.environ, **extra, "JOB_NAME": self.m.name, "JOB_STAGE": st.name,
               "JOB_STATE": str(self.js.folder), "JOB_WORKDIR": str(self.workdir), "JOB_LOGS": str(self.logs),
               # a batch files its ledger lines under the job, and reads the aliases the
               # inventory check read (the job's copy of the declared file)
               "NEV_LEDGER_NAME": self.m.name,
               settings.UNATTENDED.name: "1"}     # no person: `nev land --reviewed-by` refuses here
        # the job's budget: each batch stage counts what the job's ledger lines already spent
        if self.m.budget_tokens is not None:
            env["NEV_BUDGET_TOKENS"] = str(self.m.budget_tokens)
        if self.m.budget_gpu_s is not None:
            env["NEV_BUDGET_GPU_S"] = str(self.m.budget_gpu_s)
        declared = self._declared_path()
        if declared.is_file():
            env["NEV_FOLKNET_FILE"] = str(declared)
        if self.run_id:
            env["NEV_JOB_RUN_ID"] = self.run_id
        env = with_lane_gateway(env)
        left = self.m.limit_s - self.js.used_s()
        with log_path.open("ab") as log:
            log.write(f"== stage {st.name} ({st.kind}) run {prev.runs + 1 if prev else 1}\n"
                      .encode())
            log.flush()
            proc = self._start(st, argv, env, log)
            assert proc.stdout is not None
            out = MaskedLog(log, self._stage_secrets(env))     # the log on the lane holds no secret
            out.start(proc.stdout)
            self.js.record(Event.STAGE_STARTED, stage=st.name, log=str(log_path), pgid=proc.pid, boot=procgroup.boot_id(),
                           inputs={"stage": st.digest(), "manifest": self.m.digest, "head": head,
                                   "inventory": self.js.state.inventory.snapshot if self.js.state.inventory else None})
            info(f"stage {st.name} ({st.kind}): started")
            t0 = time.monotonic()
            last_beat = 0.0
            why_stopped: str | None = None
            while True:
                try:
                    code = proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if now - last_beat >= HEARTBEAT_S:
                    self.js.heartbeat()
                    last_beat = now
                if self.stop.signum is not None:
                    why_stopped = f"signal {self.stop.signum}"
                elif now - t0 > left:
                    why_stopped = f"the wall-clock limit of {self.m.limit_s:.0f} s across resumes"
                if why_stopped:
                    procgroup.stop(proc.pid, leader=proc)
                    code = proc.wait()
                    break
            out.finish()
        self.js.heartbeat()
        if why_stopped:
            self.js.record(Event.STAGE_STOPPED, stage=st.name, exit=code, reason=why_stopped)
            info(f"stage {st.name}: stopped by {why_stopped}")
            return Exit.STOPPED
        if code != 0:
            self.js.record(Event.STAGE_FAILED, stage=st.name, exit=code)
            if code == Exit.BUDGET:
                info(f"stage {st.name}: the job's budget bound (exit {code}); log {log_path}")
                return Exit.BUDGET
            info(f"stage {st.name}: failed (exit {code}); log {log_path}")
            return Exit.FAILED
        if not self.repo.is_clean():
            self.repo.git("add", "-A")
            self.repo.git("commit", "-q", "--no-verify", "-m", f"job {self.m.name}: stage {st.name} ({st.kind})")
        new_head = self.repo.rev("HEAD")
        changed = self.repo.out("diff", "--name-only", head, new_head).splitlines() if new_head != head else []
        self.js.record(Event.STAGE_PASSED, stage=st.name, commit=new_head,
                       outputs=[str(log_path), *changed])
        info(f"stage {st.name}: passed ({time.monotonic() - t0:.1f} s)")
        return 0

    def run(self) -> int:
        old = {s: signal.signal(s, self.stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self._run()
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _run(self) -> int:
        st = self.js.state
        if st.status is Status.PASSED and st.manifest == self.m.digest:
            r = result.read(self.repo)
            if r is not None and r.outcome == Status.PASSED:
                info(f"job {self.m.name}: passed before (result {r.commit[:12]}); nothing to run")
                return 0
        try:
            head: str | None = self.repo.try_rev("HEAD")
        except GitError:
            head = None
        self.js.record(Event.RUN_STARTED, job=self.m.name, run_id=self.run_id, stages=[s.name for s in self.m.stages],
                       inputs={"manifest": self.m.digest, "base": self.m.base, "head": head})
        self._recover()
        unmet = self._preflight()
        if unmet:
            return self._finish(Status.FAILED, Exit.UNMET, [u.message for u in unmet])
        if head is None:
            raise NevError(f"{self.workdir}: not a git checkout with a commit; clone the job branch first")
        result.strip(self.repo)
        try:
            return self._checked_stages()
        except (NevError, OSError) as e:
            # A job that cannot go on (a bad declared file, a broken checkout) ends with a failed
            # result, so the poller records it instead of resending it.
            info(f"job {self.m.name}: {e}")
            return self._finish(Status.FAILED, Exit.FAILED, [str(e)])

    def _checked_stages(self) -> int:
        code, reasons = self._inventory()
        if code == Exit.UNAVAILABLE:
            return self._finish(Status.NOT_RUN, code, [r.message for r in reasons])
        if code == Exit.REFUSED:
            return self._finish(Status.FAILED, code, [r.message for r in reasons])
        for stage in self.m.stages:
            if self._passed(stage):
                info(f"stage {stage.name}: passed before; not rerun")
                continue
            if self.stop.signum is not None:
                return self._finish(Status.STOPPED, Exit.STOPPED, [f"stopped by signal {self.stop.signum}"])
            code = self._run_stage(stage)
            if code == Exit.STOPPED:
                return self._finish(Status.STOPPED, code, [f"stage {stage.name} stopped"])
            if code == Exit.BUDGET:
                return self._finish(Status.FAILED, code, [f"stage {stage.name}: the job's budget bound (exit {code})"])
            if code != 0:
                return self._finish(Status.FAILED, code, [f"stage {stage.name} failed (exit {code})"])
        return self._finish(Status.PASSED, Exit.OK, [])


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def run(manifest_path: Path, workdir: Path | None = None, state_dir: Path | None = None,
        inventory: Path | None = None, declared: Path | None = None,
        environ: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    m = manifest_mod.load(manifest_path)
    wd = (workdir or Path.cwd()).resolve()
    sd = (state_dir or default_state_dir(m.name, env)).resolve()
    if _inside(sd, wd):
        raise NevError(f"{sd}: the job's state folder is inside its worktree {wd}; give --state outside it")
    js = JobState.open(sd)
    try:
        return Runner(m, wd, js, inventory, declared, env, settings.get(settings.JOB_RUN_ID, env)).run()
    finally:
        js.close()


def check_preflight(manifest_path: Path, workdir: Path | None, state_dir: Path | None,
                    environ: Mapping[str, str] | None = None) -> int:
    """`nev job check preflight`: 0 or 9, every unmet reason on stderr (and in state.json when --state)."""
    env = dict(os.environ if environ is None else environ)
    m = manifest_mod.load(manifest_path)
    wd = (workdir or Path.cwd()).resolve()
    used = 0.0
    js: JobState | None = None
    if state_dir is not None:
        js = JobState.open(state_dir)
        used = js.used_s()
    try:
        unmet = preflight.evaluate(preflight.gather(m, wd, used, env))
        if m.has_writer():
            why = writer.refusal(wd, env)
            if why:
                unmet.append(preflight.Unmet("writer-undeclared", why))
        for u in unmet:
            info(f"requirements: unmet: {u.message}")
        if js is not None:
            js.record(Event.PREFLIGHT_FAILED if unmet else Event.PREFLIGHT_PASSED, reasons=[u.to_json() for u in unmet],
                      inputs={"manifest": m.digest}, by="check")
        if not unmet:
            info(f"requirements: every requirement of {m.name} is met")
        return Exit.UNMET if unmet else Exit.OK
    finally:
        if js is not None:
            js.close()
