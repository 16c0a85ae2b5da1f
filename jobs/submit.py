"""`nev job submit MANIFEST`: push job/<name> to the forge, start the job workflow on the lane, print the run id.

- job/<name> is HEAD of the repository here (`--repo`), which must contain the manifest's base.
  The manifest itself is not part of the job's tree (it would be part of what lands): it goes
  to the lane as `~/dagu/manifests/<name>.<digest>.yaml`, never replaced by a later submission.
- A stale result/<name> of an earlier submission is deleted from the forge first.
- The declared aliases (NEV_FOLKNET_FILE) go to the lane as `~/dagu/declared/<digest>.json`,
  never replaced either.
- The lane runs the same nev as this box, and every step of the workflow is that nev (the NEV
  parameter, `~/.local/bin/nev`): `nev lane install` (`lanes.selfinstall`, a no-op when the
  sources are unchanged) puts it there. The link is resolved when each step starts; the run
  step pins its stages to its own install (`rig/cli.py`, NEV_INSTALL). No copy of nev's sources goes to the lane. Dagu steps get an allowlisted
  environment only, so the lane's own PATH and toolchain settings (what an SSH session there
  gets: sshd's SetEnv, the lane's profile) are read now and handed to the run step as
  parameters (LANE_PATH, with `~/.local/bin` first, and LANE_RUSTUP_HOME / LANE_CARGO_HOME).
- job/<name> is pushed at the forge URL this box reaches (NEV_FORGE_URL, its forward), and the
  workflow's FORGE parameter is the URL the lane reaches (NEV_LANE_GIT_URL), `lanes/forge.py`.
- The forge token goes over SSH stdin into `~/dagu/home/forge-token` (mode 600); no secret
  is a run parameter.
- The job gets its own gateway key (`jobs/jobkeys.py`), allowed only the aliases its manifest
  names: its digest goes into the gateway's keys file (NEV_GATEWAY_KEYS_FILE), the key over SSH
  stdin into `~/dagu/home/job-keys/<name>.key` (mode 600), which the run step hands to the
  stages as NEV_MODEL_KEY_FILE. Without NEV_GATEWAY_KEYS_FILE the job uses the lane's own key.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import posixpath
import shlex
from collections.abc import Mapping
from pathlib import Path

from dagu.layout import Layout
from dagu.service import LaneDagu
from jobs import jobkeys, records
from jobs import manifest as manifest_mod
from jobs.manifest import Manifest
from lanes import dotenv, selfinstall
from lanes import forge as forge_mod
from lanes.base import settings
from lanes.base.errors import ConfigError, NevError
from lanes.base.gitrun import Repo
from lanes.base.ui import info

WORKFLOW = "job"
NEV_ROOT = Path(__file__).resolve().parents[1]


def workflow_file() -> Path:
    return NEV_ROOT / "dagu" / "workflows" / f"{WORKFLOW}.yaml"


def job_tip(repo: Repo, m: Manifest) -> str:
    """HEAD, which must contain the manifest's base."""
    head = repo.rev("HEAD")
    if not repo.ok("merge-base", "--is-ancestor", m.base, head):
        raise NevError(f"{m.path}: base {m.base[:12]} is not in the history of HEAD ({head[:12]}); "
                       "set base to a commit HEAD contains")
    return head


def _push_once(ld: LaneDagu, folder: str, name: str, data: bytes) -> str:
    """`data` on the lane under `~/dagu/FOLDER/`, named from its content: never replaced."""
    dest = posixpath.join(ld.layout.root, folder, name.format(digest=hashlib.sha256(data).hexdigest()[:12]))
    ld.conn.run(f"mkdir -p {shlex.quote(posixpath.dirname(dest))}", check=True)
    ld.conn.write_file(dest, data, 0o644)
    return dest


def push_manifest(ld: LaneDagu, m: Manifest) -> str:
    """The manifest on the lane, under a name from its content: a later submission never replaces it."""
    return _push_once(ld, "manifests", f"{m.name}.{{digest}}.yaml", m.path.read_bytes())


def push_declared(ld: LaneDagu, declared: Path | None) -> str:
    """The submitting checkout's declared aliases on the lane ("" when there are none)."""
    if declared is None:
        return ""
    try:
        data = declared.read_bytes()
    except OSError as e:
        raise NevError(f"{declared}: cannot read the declared aliases ({e.strerror}); set NEV_FOLKNET_FILE") from None
    return _push_once(ld, "declared", "folknet.{digest}.json", data)


LANE_ENV_NAMES = ("HOME", "PATH", "RUSTUP_HOME", "CARGO_HOME")
LANE_ENV_PROBE = "; ".join(f'printf "%s=%s\\n" {n} "${n}"' for n in LANE_ENV_NAMES)


def parse_lane_env(text: str) -> dict[str, str]:
    """NAME=value lines of LANE_ENV_PROBE's output (pure); unset names are empty."""
    got = dotenv.parse(text)
    return {n: got.get(n, "") for n in LANE_ENV_NAMES}


def step_path(lane_env: Mapping[str, str]) -> str:
    """The PATH of the job's steps (pure): the lane's installed nev first, then the lane's own PATH."""
    home = lane_env.get("HOME", "")
    parts = [posixpath.join(home, ".local/bin")] if home else []
    for d in (lane_env.get("PATH") or "").split(":"):
        if d and d not in parts:
            parts.append(d)
    return ":".join(parts)


def params(m: Manifest, manifest: str, lane_forge_url: str, lane_home: str, layout: Layout, share: str,
           declared: str, environ: Mapping[str, str], lane_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The job workflow's run parameters (pure): nothing secret, and only addresses as the lane
    reaches them (FORGE: the lanes' forge URL; MODEL_URL: NEV_LANE_MODEL_URL, which the lane's own
    ~/.lane-model-env overrides there)."""
    le = dict(lane_env or {"HOME": lane_home})
    # The lane's own snapshot: the default path, under the lane user's home (NEV_INVENTORY here
    # names this box's file).
    inv = settings.value(settings.INVENTORY, {})
    if inv.startswith("~/"):
        inv = posixpath.join(lane_home, inv[2:])
    return {
        "JOB": m.name, "MANIFEST": manifest, "FORGE": lane_forge_url,
        "MIRROR": layout.job_mirror, "WORK": layout.jobs_work,
        "SHARE": share, "NEV": posixpath.join(lane_home, selfinstall.LINK), "INVENTORY": inv,
        "MODEL_URL": settings.get(settings.LANE_MODEL_URL, environ) or "",
        "NPM_CACHE": posixpath.join(share, "npm-cache"),
        "DECLARED": declared,
        "LANE_PATH": step_path(le),
        "LANE_RUSTUP_HOME": le.get("RUSTUP_HOME", ""),
        "LANE_CARGO_HOME": le.get("CARGO_HOME", ""),
    }


def push_forge_token(ld: LaneDagu, forge: forge_mod.Forge) -> None:
    """The forge token into the lane's `~/dagu/home/forge-token` (mode 600), over SSH stdin."""
    if not forge.cred.token:
        return
    token = forge.cred.token.encode()
    path = posixpath.join(ld.layout.home, "forge-token")
    have = ld.conn.run(f"sha256sum < {shlex.quote(path)} 2>/dev/null").out.split()
    if have and have[0] == hashlib.sha256(token).hexdigest():
        return
    ld.conn.write_file(path, token, 0o600)


def push_job_key(ld: LaneDagu, job: str, key: str) -> str:
    """The job's own gateway key into `~/dagu/home/job-keys/<job>.key` (mode 600), over SSH stdin."""
    path = jobkeys.lane_key_path(ld.layout.home, job)
    ld.conn.run(f"mkdir -p -m 700 {shlex.quote(posixpath.dirname(path))}", check=True)
    ld.conn.write_file(path, key.encode() + b"\n", 0o600)
    return path


def plan(manifest_path: Path, lane_flag: int | None = None, repo_path: Path | None = None,
         environ: Mapping[str, str] | None = None) -> list[str]:
    """What `submit` would do (`nev job submit --dry-run`): the manifest, the checkout and the
    settings are read, and the same refusals come first; nothing is pushed, no lane reached."""
    from dagu import service

    env = dict(os.environ if environ is None else environ)
    m = manifest_mod.load(manifest_path)
    repo = Repo(Repo(repo_path or Path.cwd()).toplevel())
    tip = job_tip(repo, m)
    forge = forge_mod.from_settings(env, repo)
    lane_forge = forge.for_lanes()
    if not forge.url:
        raise ConfigError("no forge URL: set NEV_FORGE_URL or NEV_LANE_GIT_URL")
    lane = service.pick_lane(lane_flag)
    declared = settings.get_path(settings.FOLKNET_FILE, env)
    lines = [f"would push job/{m.name} ({tip[:12]}) to {forge_mod.split_credentials(forge.url or '')[0]}, "
             f"after deleting result/{m.name} there",
             f"would start workflow {WORKFLOW} on {lane.label} ({lane.ssh}, Dagu), the lanes fetching from "
             f"{forge_mod.split_credentials(lane_forge)[0]}; before it, on the lane:",
             "  the forge token into ~/dagu/home/forge-token (mode 600), if it differs"]
    if jobkeys.where(env):
        lines.append(f"  a gateway key of the job's own into ~/dagu/home/job-keys/{m.name}.key, "
                     f"allowed {', '.join(jobkeys.aliases(m)) or 'no alias'}")
    if settings.get_flag(settings.JOB_INSTALL_NEV, env):
        lines.append("  nev installed (`nev lane install`), if its sources changed")
    if declared and declared.is_file():
        lines.append(f"  the declared aliases {declared} under ~/dagu/declared/")
    lines += [f"  the manifest under ~/dagu/manifests/{m.name}.<digest>.yaml",
              f"  the workflow {WORKFLOW}.yaml into Dagu's dags folder, if it differs"]
    return lines


def submit(manifest_path: Path, lane_flag: int | None = None, repo_path: Path | None = None,
           environ: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    m = manifest_mod.load(manifest_path)
    with records.submitting(m.name, env):    # one submission of a name at a time
        repo = Repo(Repo(repo_path or Path.cwd()).toplevel())
        tip = job_tip(repo, m)
        forge = forge_mod.from_settings(env, repo)
        lane_forge = forge.for_lanes()  # refused before anything is pushed
        forge.delete(repo, f"result/{m.name}")
        forge.push(repo, f"+{tip}:refs/heads/job/{m.name}")
        info(f"pushed job/{m.name} ({tip[:12]}) to the forge")
        from dagu import runs, service

        with records.locked(env) as recs:
            own = recs.jobs[m.name].key_sha256 if m.name in recs.jobs else None
        key = jobkeys.mint(m, env, over=own) if jobkeys.where(env) else None
        try:
            with service.opened(lane_flag) as ld:
                push_forge_token(ld, forge)
                if key is not None:
                    push_job_key(ld, m.name, key)
                    allowed = ", ".join(jobkeys.aliases(m)) or "no alias"
                    info(f"job {m.name}: its own gateway key, allowed {allowed}")
                if settings.get_flag(settings.JOB_INSTALL_NEV, env):
                    _changed, line = selfinstall.install(ld.conn, selfinstall.default_cache())
                    info(f"nev on {ld.lane.label}: {line}")
                declared = settings.get_path(settings.FOLKNET_FILE, env)
                decl = push_declared(ld, declared if declared and declared.is_file() else None)
                wf = runs.load_workflow(str(workflow_file()))
                ld.write_if_changed(f"{ld.layout.dags}/{wf.name}.yaml", wf.text)
                lane_env = parse_lane_env(ld.conn.run(LANE_ENV_PROBE).out)
                p = params(m, push_manifest(ld, m), lane_forge, lane_env["HOME"], ld.layout,
                           ld.lane.shared_dir, decl, env, lane_env)
                with ld.api() as api:
                    ld.answering(api, settings.get_float(settings.DAGU_ANSWER_WAIT, env), info)
                    sent = dt.datetime.now(dt.UTC)   # the job's queue wait starts here (rig/queues.py)
                    run_id, queued = runs.submit(api, wf, p)
                lane_label = ld.lane.label
        except BaseException:
            # a key minted for a run that never started is revoked: it holds the job's name on
            # the gateway (another box's submission of that name is refused while it is live)
            if key is not None:
                try:
                    jobkeys.revoke(m.name, env, sha256=jobkeys.digest(key))
                except NevError as e:
                    info(f"job {m.name}: its key was not revoked ({e}); it expires by itself")
            raise
        with records.locked(env) as recs:
            rec = recs.job(m.name)
            rec.spec, rec.manifest, rec.tip, rec.run_id = m.spec_name, str(manifest_path), tip, run_id
            rec.lane, rec.lane_label, rec.status = lane_flag, lane_label, records.JobStatus.SUBMITTED
            rec.submitted_at = sent.isoformat(timespec="milliseconds")
            rec.params, rec.result = p, None
            rec.key_sha256 = jobkeys.digest(key) if key is not None else None
            rec.sends += 1
    info(f"job {m.name}: run {run_id} {'enqueued' if queued else 'started'} on {lane_label}")
    print(run_id)
    return 0
