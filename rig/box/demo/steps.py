"""`nev box demo`: the whole mission end to end on the rig-in-a-box, through the public commands
of every part. Each step prints one progress line with its time and passes or fails; after a
failure the later steps do not run, except the last (keep the box or bring it down). The exit
status is 0 only when every step ran and passed.

The steps run `nev` itself (`python -m rig.cli`, this very checkout) with the box's settings, so
what the demo shows is what a person typing the commands gets.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lanes.base import settings
from lanes.base.errors import NevError
from lanes.base.mask import mask
from rig.box import Box
from rig.box.demo.bank import ENGINE, FUNCTION, demo_bank
from rig.box.demo.base import DemoBase, Options
from rig.box.demo.commands import Beside, StepFailed
from rig.box.demo.receiver import Receiver
from rig.box.demo.report import (
    FAILED,
    PASSED,
    StepResult,
    exit_code,
    results_text,
    summary_table,
)
from rig.box.forge import create_repo
from rig.box.poolctl import pool_control

OTHER = "block_width"                # the example engine's other generated function
DEMO_BOX_NAME = "demo"
DEMO_BOX_NET = "198.18.77"
SNAPSHOT_LABEL = "demo-start"
RESULT_LOOK_S = 1.0      # step 6: how often the forge is asked for the job's result branch
FULL_POLL_S = 20.0       # step 6: a whole `nev job poll` at least this often while waiting
CHECK_MARK = "== nev floors check"   # step 7: where the scores end and the floors check begins

ENGINE_IN_REPO = settings.value(settings.ENGINE_DIR, {})   # where nev looks for the engine: the default
GENERATED = f"{ENGINE_IN_REPO}/crates/layout/src/generated"

# The engine repository's gate (read from main by `nev land`): the floors, scored on a lane, on
# corpora of the demo's size (the scoring step builds each with NEV_CORPUS_CASES seeds: the same
# count as the demo's own builds finds them in the corpus store instead of rendering others).
def verify(cases: int) -> str:
    return f"NEV_CORPUS_CASES={cases} nev floors check"


TRACKS = {
    "verify": verify(200),
    "landChecks": [],
    "protected": [],
    # No writer runs in the demo, so its tracks.json declares no harness (a declaration is the
    # user's; no committed file names one: tests/test_job_writer.py).
    "specWatch": {"pollEnv": {"NEV_LANE_STRICT": "1"}, "landScript": "nev land --approved"},
}

# The track's spec: floor files are protected (raised only after landing), so not in touches.
SPEC = """---
touches:
  - crates_bridge/engine/crates/layout/src/generated/{fn}.rs
  - crates_bridge/engine/crates/layout/src/generated/{fn}.provenance.json
---
# {fn}: CSS 2.1 section 10.3.7, absolutely positioned, non-replaced elements

Generate `{fn}` (crates_bridge/engine/crates/layout/src/generated/{fn}.rs) by a best-of-N batch through the
gateway, verified against the three-browser corpus `corpus/{fn}`. The example engine's version
misses the rule for negative free space with both margins auto (margin-left 0 in ltr); a
version that passes more cases of the corpus replaces it and its floor is raised after landing.
"""


def rendered_corpora(output: str) -> list[str]:
    """The corpora a `nev oracle build` output says were rendered (not found or copied)."""
    return [Path(f).name for f in re.findall(r"^(\S+): \d+ agreed of \d+ generated", output, re.M)]


@dataclass
class Demo(DemoBase):
    """The steps and their driver."""

    def corpus_builds(self) -> str:
        """The shell command that builds the demo function's corpus and the engine's other one
        (scoring reads every corpus `generated_score_check --list-caches` names), with one start
        of the browsers. Only step 4 renders them: every later copy finds them in the corpus store
        on the share and copies them."""
        return f"nev oracle build {FUNCTION} {OTHER} --cases {self.opts.cases}"

    def copied_only(self, cp: subprocess.CompletedProcess[str], step: str) -> None:
        """The demo renders each corpus once (step 4): a later build that rendered one fails the step."""
        again = rendered_corpora(cp.stdout + cp.stderr)
        if again:
            raise StepFailed(f"{', '.join(again)} rendered again instead of copied from the corpus store "
                             f"on the share (whole output: {self.log_path(step)})")

    # ---- the steps ----

    def step1_box(self) -> str:
        self.nev("box", "up", step="1-box", relay=True)    # a cold box up: its progress, not minutes of silence
        self.info = self.box.info()
        self.work.mkdir(parents=True, exist_ok=True)
        self._settings()
        self.box_up.set()      # steps 2 and 3 need only this: they start beside the rest of step 1
        hosts = self.binfo.hosts
        # Every host advertises its role (a service of the box) and lane0's collector gathers
        # them, as on the rig; the dev box reads the result over SSH through the jump host.
        deadline = time.monotonic() + 120
        while True:
            cp = self.nev("rig", "status", "--lane", "0", "--ansible", step="1-box", ok=(0, 1))
            groups = json.loads(cp.stdout) if cp.returncode == 0 and cp.stdout.strip() else {}
            roles = {h: role for role, g in groups.items() if role not in ("_meta", "all", "down")
                     for h in (g.get("hosts") or [])}
            down = set((groups.get("down") or {}).get("hosts") or [])
            if set(hosts) <= set(roles) and not down & set(hosts):
                break
            if time.monotonic() > deadline:
                raise StepFailed(f"lane0's collector saw {len(set(roles) - down)} of {len(hosts)} hosts up "
                                 f"({', '.join(sorted(set(roles) - down)) or 'none'}); see {self.log_path('1-box')}")
            time.sleep(2)
        wrong = sorted(h for h in hosts if roles[h] != hosts[h]["role"])
        if wrong:
            raise StepFailed(f"hosts advertised with the wrong role: {', '.join(wrong)}")
        # lane0's own probe (a service of the lane, `nev rig services`) marks the aliases: nothing
        # here probes or copies a snapshot
        while True:
            cp = self.nev("rig", "status", "--lane", "0", "--json", step="1-box", ok=(0, 1))
            aliases = json.loads(cp.stdout).get("aliases", []) if cp.returncode == 0 else []
            if aliases and all(a["status"] == "ready" for a in aliases):
                break
            if time.monotonic() > deadline:
                raise StepFailed("lane0's probe has not marked every alias ready: "
                                 f"{', '.join(a['alias'] + ' ' + a['status'] for a in aliases) or 'none'}")
            time.sleep(2)
        self._lane_snapshot_home()
        st = self.nev("rig", "status", "--lane", "0", step="1-box")
        self.results.rig_status = st.stdout.strip()
        ready = sum(1 for line in st.stdout.splitlines() if " ready " in f" {line} ")
        return f"{len(hosts)} hosts advertised, collected on lane0 ({len(set(roles.values()))} roles), {ready} aliases ready"

    def _lane_snapshot_home(self) -> None:
        """lane0's snapshot (collected and probed there), kept in the work folder as a record."""
        lane = self.binfo.lanes[0]
        cp = subprocess.run(["ssh", "-F", str(self.binfo.ssh_config), f"lane@{lane.addr}",
                             "cat .local/share/nev/inventory.json"], capture_output=True, timeout=60)
        if cp.returncode != 0:
            raise StepFailed(f"reading lane0's snapshot failed: {cp.stderr.decode(errors='replace').strip()}")
        (self.work / "inventory.json").write_bytes(cp.stdout)

    def _settings(self) -> None:
        bi = self.binfo
        self.env = {**self.env, **bi.env, "NEV_INVENTORY": str(self.work / "inventory.json"),
                    "NEV_RIG_NOTES": str(self.home / "rig-notes")}
        self.env.setdefault("NEV_DAGU_BINARY", "/opt/nev/dagu-1.30.2/dagu")

    def reset_pools(self) -> None:
        """The stand-in pools back to their own bank (the box may be shared)."""
        for pool in self.binfo.pools if self.info else ():
            try:
                pool_control(self.binfo, pool, reset=True)
            except (OSError, NevError):
                pass

    def step2_snapshot(self) -> str:
        cp = self.nev("rig", "snapshot", SNAPSHOT_LABEL, step="2-snapshot")
        last = (cp.stdout.strip() or cp.stderr.strip()).splitlines()[-1:]
        return last[0].split(":")[0] if last else SNAPSHOT_LABEL

    def step3_repo(self) -> str:
        bi = self.binfo
        name = f"demo-engine-{self.tag}.git"
        self.repo_url = create_repo(bi, name)               # the rig address: what the lanes fetch
        self.dev_repo_url = bi.dev_url(self.repo_url)         # the dev box reaches it through its forward
        seed = self.work / "seed"
        shutil.copytree(ENGINE, seed / ENGINE_IN_REPO, ignore=shutil.ignore_patterns("target", "corpus"))
        (seed / ".gitignore").write_text("target/\ncorpus/\n.env\n")
        tracks = json.loads(json.dumps(TRACKS))
        tracks["verify"] = verify(self.opts.cases)
        tracks["specWatch"]["pollEnv"]["NEV_CORPUS_CASES"] = str(self.opts.cases)
        (seed / "tracks.json").write_text(json.dumps(tracks, indent=2) + "\n")
        self.git(seed.parent, "init", "-q", "-b", "main", str(seed))
        self.git(seed, "add", "-A")
        self.git(seed, "commit", "-q", "-m", "engine: the example workspace (crates_bridge/engine)")
        self.git(seed, "push", "-q", self.dev_repo_url, "main")
        shutil.rmtree(seed)
        # the demo's lanes file: the box's lanes, fetching from this repository
        lanes = json.loads(bi.lanes_file.read_text())
        lanes["git_url"] = self.repo_url
        lf = self.work / "lane.local.json"
        lf.write_text(json.dumps(lanes, indent=1))
        # a new dict, never one updated in place: the snapshot (step 2) runs beside this step
        self.env = {**self.env, "NEV_LANES_FILE": str(lf), "NEV_LANE_GIT_URL": self.repo_url,
                    "NEV_FORGE_URL": self.dev_repo_url}
        # primary checkout on the dev box; the spec on main; the track worktree beside it
        self.primary = self.work / f"engine-{self.tag}"
        self.git(self.work, "clone", "-q", self.dev_repo_url, str(self.primary))
        spec = self.primary / "specs" / f"{FUNCTION}.md"
        spec.parent.mkdir(parents=True)
        spec.write_text(SPEC.format(fn=FUNCTION))
        self.git(self.primary, "add", "specs")
        self.git(self.primary, "commit", "-q", "-m", f"specs: {FUNCTION} (touches its generated files only)")
        self.git(self.primary, "push", "-q", "origin", "main")
        # named like its spec: the lane copy the corpus is built in is the one `nev land` gates in
        self.track = self.work / FUNCTION
        self.git(self.primary, "worktree", "add", "-q", "-b", FUNCTION, str(self.track), "main")
        self.results.main_on_forge = self._forge_main()
        return f"{name}: main {self.results.main_on_forge[:12]} with specs/{FUNCTION}.md; track worktree {self.track.name}"

    def _forge_main(self) -> str:
        out = self.git(self.work, "ls-remote", self.dev_repo_url, "refs/heads/main")
        return out.split()[0] if out else ""

    def step4_corpus(self) -> str:
        try:
            self.nev("lane", "install", "--lane", "0", step="4-corpus")
        finally:
            self.installed.set()    # step 5's submit, beside this step, installs too: one at a time
        cp = self.nev("lane", "on", "--lane-only", "--lane", "0", "--pull", f"corpus/{FUNCTION}",
                      "--pull", f"corpus/{OTHER}", str(self.track), "sh", "-c", self.corpus_builds(),
                      step="4-corpus")
        man = self.track / "corpus" / FUNCTION / "manifest.json"
        if not man.exists():
            raise StepFailed(f"the corpus did not come back from the lane: no {man}")
        m = json.loads(man.read_text())
        agreed = next((ln for ln in (cp.stdout + cp.stderr).splitlines() if "agreed of" in ln), "")
        return agreed.strip() or f"corpus/{FUNCTION}: {m.get('cases')} agreed cases"

    # Steps 5 and 6: the batch and the verify gate are stages of a Dagu job on the lane, and
    # `nev job poll` lands its result.

    def bank(self) -> Path:
        """The stand-in pools' bank for the demo's function: only wrong answers at the sampling
        tier, a right one at the capacity tier, so the batch must escalate."""
        path = self.work / "bank.json"
        path.write_text(json.dumps(demo_bank(), indent=1))
        return path

    def step5_job(self) -> str:
        self.nev("dagu", "up", "--lane", "0", step="5-job")
        # the snapshot records the rig as it was before the demo changes anything: the pools get
        # the demo's bank only after it (it ran beside steps 3 and 4 until now)
        self.wait_step(2)
        bank = self.bank()
        for pool in self.binfo.pools:
            pool_control(self.binfo, pool, bank=str(bank))
        return self._submit_job(f"nev batch run {FUNCTION} --models qwen3.8-27b-fast:4:4 --max-batches 3 "
                                "--escalate-after 1 --seed 15")

    def _submit_job(self, batch: str) -> str:
        """The batch and the verify gate as stages of a job: a Dagu run on the lane."""
        import yaml

        # the job's inventory check reads the lane's own snapshot, kept fresh by its services
        self.job = f"{FUNCTION.replace('_', '-')}-{self.tag}"
        floor = f"{GENERATED}/{FUNCTION}.floor.json"
        # the job's checkout on the lane gets its own corpora; the floor file the batch writes is
        # put back (floor files are protected: floors rise on main after the landing)
        builds = self.corpus_builds()
        manifest = {
            "name": self.job, "base": self.git(self.track, "rev-parse", "HEAD"), "spec": f"specs/{FUNCTION}.md",
            "key": "batch", "limit": "30m",
            "stages": [{"name": "gen", "kind": "batch",
                        "command": f"{builds} && {batch} && git checkout -- {floor}",
                        "models": ["qwen3.8-27b-fast", "deepseek-v4.1-flash"]},
                       {"name": "verify", "kind": "verify", "command": verify(self.opts.cases)}]}
        mf = self.track / "jobs" / f"{FUNCTION}.yaml"
        mf.parent.mkdir(exist_ok=True)
        mf.write_text(yaml.safe_dump(manifest, sort_keys=False))
        self.installed.wait(timeout=900)     # step 4's `nev lane install` (submit's would be a no-op)
        cp = self.nev("job", "submit", str(mf), "--lane", "0", step="5-job", cwd=self.track)
        run_id = (cp.stdout.strip().splitlines() or ["?"])[-1]
        return f"job {self.job} submitted as Dagu run {run_id} (batch then verify on the lane)"

    def step6_land(self) -> str:
        # the job carries the track now (job/<name> on the forge): the poll sets the branch named
        # like the spec to the job's result, so the local track branch and worktree make way (here,
        # not at submit: step 4 pulled the corpora into the worktree while the job was submitted)
        self.git(self.primary, "worktree", "remove", "--force", str(self.track))
        self.git(self.primary, "branch", "-D", FUNCTION)
        # the floors step after the landing scores main's checkout on the lane: its lane copy needs
        # the corpora too (copied from the corpus store on the share, not rendered again; the job
        # runs on the lane meanwhile)
        builds = self.corpus_builds()
        self.copied_only(self.nev("lane", "on", "--lane-only", "--lane", "0", str(self.primary), "sh", "-c", builds,
                                  step="6-land"), "6-land")
        before = self.git(self.primary, "rev-parse", "main")
        # the landing's announcement goes to a chat receiver in Discord's form (docs/notify.md)
        chat = Receiver()
        try:
            self.env["NEV_RIG_FILE"] = str(self._rig_file_with(chat.url))
            polled = self._poll_job()
        finally:
            self.env["NEV_RIG_FILE"] = str(self.binfo.rig_file or "")
            chat.close()
        r = self.results
        said = [ln.split("land: announcement: ", 1)[1] for ln in polled.splitlines()
                if "land: announcement: " in ln]
        r.announcement = "\n".join(said) or None
        body, problems = chat.landed()
        if body is None or problems:
            raise StepFailed(f"the landing's announcement reached the chat receiver "
                             f"{'with ' + '; '.join(problems) if body else 'not at all'}; "
                             f"see {self.log_path('6-land')}")
        embed = body["embeds"][0]
        r.posted = (f"{embed['title']!r}, {len(embed.get('fields') or [])} field(s), "
                    f"{len(json.dumps(body))} bytes, within Discord's limits")
        after = self.git(self.primary, "rev-parse", "main")
        # the landed commit: the one the landing tagged spec/<name>/<spec sha> (the floors commit,
        # when floors rose, comes after it on main)
        tags = self.git(self.primary, "for-each-ref", "--format=%(refname)", f"refs/tags/spec/{FUNCTION}/")
        landed = self.git(self.primary, "rev-parse", tags.split()[-1] + "^{commit}") if tags else ""
        if after == before or not landed:
            raise StepFailed(f"main did not land the track (main {after[:12]}, tag {tags or 'none'}); "
                             f"see {self.log_path('6-land')}")
        r.landed_commit, r.main_after = landed, after
        r.floors_commit = after if after != landed else None
        # the landed track has no worktree now: its lane copies go. The landing swept them on every
        # lane (its lines in the poll's output); only when it said nothing of lane 0 is it run here
        said = [ln for ln in polled.splitlines() if re.match(r"lane 0 \(\S+\): freed .* in total$", ln)]
        if said:
            swept = f"{said[-1]} (the landing's sweep)"
        else:
            sw = self.nev("lane", "sweep", "--lane", "0", "--track", FUNCTION, "--repo", str(self.primary),
                          step="6-land")
            swept = (sw.stdout.strip().splitlines() or sw.stderr.strip().splitlines() or ["swept"])[-1]
        return (f"main {before[:12]} -> {landed[:12]} (guarded fast-forward)"
                + (f", floors raised in {after[:12]}" if r.floors_commit else ", no floor raised")
                + f"; {swept}")

    def _rig_file_with(self, url: str) -> Path:
        """The box's rig file with a `notify` to the chat receiver in Discord's form, beside it."""
        path = self.binfo.rig_file
        if path is None:
            raise StepFailed("the box names no rig file; bring it up again (`nev box up`)")
        data = json.loads(path.read_text())
        data["notify"] = {"webhook": url, "rig": f"box {self.box.name}", "format": "discord"}
        out = path.with_name("rig.demo-chat.json")
        out.write_text(json.dumps(data, indent=2) + "\n")
        return out

    def _result_published(self) -> bool:
        """Whether the job's result branch is on the forge (one ls-remote through the forward)."""
        try:
            return bool(self.git(self.work, "ls-remote", self.dev_repo_url, f"refs/heads/result/{self.job}"))
        except NevError:
            return False

    def _poll_job(self) -> str:
        """`nev job poll` until the job's status is final. The poll (a few seconds: the forge, the
        lane's Dagu over SSH, the land tick) runs when the job's result is on the forge (looked at
        every second: one ls-remote), and every FULL_POLL_S anyway (a run that ends without a
        result is resent or recorded by the poll alone)."""
        deadline = time.monotonic() + 900
        status: dict = {}
        polled = ""
        next_poll = time.monotonic() + FULL_POLL_S
        while time.monotonic() < deadline:
            if not self._result_published() and time.monotonic() < next_poll:
                time.sleep(RESULT_LOOK_S)
                continue
            poll = self.nev("job", "poll", "--repo", str(self.primary), step="6-land", ok=(0, 1, 3))
            polled = poll.stdout + poll.stderr
            cp = self.nev("job", "status", self.job, "--json", step="6-land", ok=(0, 1))
            rows = json.loads(cp.stdout[cp.stdout.find("["):] if "[" in cp.stdout else "[]")
            status = next((r for r in rows if r.get("job") == self.job), {})
            if status.get("status") in ("landed", "failed", "not-landed"):
                break
            next_poll = time.monotonic() + FULL_POLL_S
        if status.get("status") != "landed":
            raise StepFailed(f"job {self.job} ended {status.get('status') or 'unfinished after 15 min'}: "
                             f"{status.get('why') or ''}".rstrip(": "))
        run_id = status.get("run_id") or ""
        logs = self.binfo.nas / "archive" / "job-logs" / self.job / run_id
        self.results.job_log = str(logs / "archive.txt") if (logs / "archive.txt").exists() else str(logs)
        return polled

    def step7_results(self) -> str:
        r = self.results
        r.main_on_forge = self._forge_main()
        # the rig's status and the job's ledger lines do not need the lane: asked meanwhile
        status = Beside(lambda: self.nev("rig", "status", "--lane", "0", step="7-results"))
        ledger = Beside(lambda: self.nev("ledger", "--worktree", self.job, step="7-results", ok=(0, 1)))
        # score and floor of the function as main has it, scored on the lane over the corpus: in
        # the primary checkout (main, after the landing) whose lane copy the landing's floors step
        # scored in, so its corpora (copied in step 6) and its build are there; the corpora
        # come home with the scores. `nev floors check` runs in the same session (its exit is the
        # session's once the scores were printed, after the mark)
        pulls = [a for fn in (FUNCTION, OTHER) for a in ("--pull", f"corpus/{fn}")]
        cp = self.nev("lane", "on", "--lane-only", "--lane", "0", *pulls, str(self.primary), "sh", "-c",
                      f"export NEV_CORPUS_CASES={self.opts.cases}; {self.corpus_builds()} && nev scores --json && "
                      f"{{ echo {CHECK_MARK}; nev floors check; }}", step="7-results", ok=(0, 1))
        self.copied_only(cp, "7-results")
        scored, marked, checked = cp.stdout.partition(CHECK_MARK + "\n")
        if not marked:
            raise StepFailed(f"scoring on the lane exited {cp.returncode} (whole output: {self.log_path('7-results')})")
        rows = json.loads(scored[scored.find("["):] if "[" in scored else "[]")
        row = next((x for x in rows if x.get("function") == FUNCTION), None)
        if row is None or row.get("error"):
            raise StepFailed(f"{FUNCTION} could not be scored: {row.get('error') if row else 'no row'}")
        r.score = f"{row['cases_passed']}/{row['cases_run']}"
        fl = row.get("floor") or {}
        r.floor = f"{fl.get('cases_passed', 0)}/{fl.get('cases_run', 0)}" if isinstance(fl, dict) else str(fl)
        line = next((ln for ln in checked.splitlines() if ln.startswith(FUNCTION + " ")), "")
        r.floors_check = " ".join(line.split()) or f"exit {cp.returncode}"
        if cp.returncode != 0 or row.get("status") not in ("ok", "better"):
            raise StepFailed(f"{FUNCTION} does not hold its floor: {r.floors_check}")
        r.rig_status = status.result().stdout.strip()
        # the ledger line of the batch that made main's version (named in its provenance): a
        # batch run by a job is filed under the job's name
        prov = json.loads(self.git(self.primary, "show", f"main:{GENERATED}/{FUNCTION}.provenance.json"))
        bid = (prov.get("batch") or {}).get("id") or "-"
        led = ledger.result()
        rows = [" ".join(ln.split()) for ln in led.stdout.splitlines() if bid in ln]
        if rows:
            r.ledger_line = rows[-1]
        return f"{FUNCTION} {r.score} at floor {r.floor}"

    def step8_end(self) -> str:
        if not self.opts.keep:
            self.nev("box", "down", step="8-end")
            return f"box {self.box.name} is down"
        url, pid = self._start_dashboard()
        self.results.dashboard_url = url
        return (f"box {self.box.name} left up (--keep); dashboard {url} (pid {pid}: `kill {pid}` stops it); "
                f"eval \"$(NEV_BOX_NAME={self.box.name} nev box env)\"")

    # ---- the driver ----

    def run(self) -> int:
        # (number, name, the step, the steps it starts after (or the moment the box is up), whether
        # later steps start beside it)
        plan: list[tuple[int, str, Callable[[], str], tuple[int | threading.Event, ...], bool]] = [
            (1, "box up, advertise, collect, probe, status", self.step1_box, (), True),
            (2, f"snapshot {SNAPSHOT_LABEL}", self.step2_snapshot, (self.box_up,), True),
            (3, "engine repo, primary checkout, track + spec", self.step3_repo, (self.box_up,), False),
            (4, f"oracle corpus/{FUNCTION} on a lane", self.step4_corpus, (3,), True),
            (5, "Dagu + job: best-of-N batch, verify gate", self.step5_job, (1, 3), False),
            (6, "poll, land, raise floors, sweep", self.step6_land, (2, 4, 5), False),
            (7, "results", self.step7_results, (6,), False),
            (8, "keep or box down", self.step8_end, (1, 2, 3, 4, 5, 6, 7), False),
        ]
        self.opts.say(f"nev box demo on box {self.box.name} (net {self.box.net}.0/24), function {FUNCTION}")
        self.prepare()
        try:
            for number, name, fn, after, beside in plan:
                res = StepResult(number, name)
                self.steps.append(res)
                for n in after:
                    if isinstance(n, threading.Event):
                        n.wait()
                    else:
                        self.join_step(n)
                if number != 8 and any(s.status == FAILED for s in self.steps):
                    res.note = "an earlier step failed"     # the end (keep or box down) always runs
                    self.opts.say(res.line(time.monotonic() - self.t0))
                elif beside:
                    th = threading.Thread(target=self._run_step, args=(res, fn), daemon=True,
                                          name=f"demo-step-{number}")
                    self.running[number] = th
                    th.start()
                else:
                    self._run_step(res, fn)
        finally:
            for n in list(self.running):
                self.join_step(n)
            self.reset_pools()
        self.opts.stdout("")
        self.opts.stdout(summary_table(self.steps, wall=time.monotonic() - self.t0))
        self.opts.stdout("")
        self.opts.stdout(results_text(self.results))
        self.opts.stdout(f"work: {self.work}" + ("" if self.work.exists() else " (removed with the box)"))
        self.opts.stdout(f"logs: {self.logs}")
        return exit_code(self.steps)

    def _run_step(self, res: StepResult, fn: Callable[[], str]) -> None:
        """One step to its end: its outcome and time in `res`, its progress line said."""
        t = time.monotonic()
        try:
            res.note = fn()
            res.status = PASSED
        except (NevError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
            res.status, res.note = FAILED, mask(str(e))
        finally:
            if res.number == 6:      # the job's batch draws from the banks until it lands
                self.reset_pools()
            if res.number == 1:      # also when the box did not come up (its status is set now)
                self.box_up.set()
            res.seconds = time.monotonic() - t
            with self.say_lock:
                self.opts.say(res.line(time.monotonic() - self.t0))



def run(opts: Options) -> int:
    box = opts.box or Box.from_settings(default_name=DEMO_BOX_NAME, default_net=DEMO_BOX_NET)
    return Demo(opts, box).run()
