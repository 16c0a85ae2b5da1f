"""`nev job ...` and `nev land`: parse arguments and dispatch to the jobs modules."""

from __future__ import annotations

import click

from lanes.base.laneopt import Default, lane_option


@click.group("job")
def job() -> None:
    """Submit, run, check and land jobs (Dagu workflow runs on a lane)."""


@job.command("submit")
@click.argument("manifest", type=click.Path(dir_okay=False))
@lane_option(Default.DAGU)
@click.option("--repo", type=click.Path(file_okay=False), help="The checkout whose HEAD is the job (default: here).")
@click.option("--dry-run", is_flag=True,
              help="Print the branch, forge, lane and steps it would use; push nothing, connect to "
                   "no lane, change nothing.")
def submit(manifest: str, lane_index: int | None, repo: str | None, dry_run: bool) -> int:
    """Push job/<name> to the forge and start its workflow run on the lane; prints the run id."""
    from pathlib import Path

    from jobs import submit as submit_mod

    if dry_run:
        for line in submit_mod.plan(Path(manifest), lane_index, Path(repo) if repo else None):
            click.echo(line)
        return 0
    return submit_mod.submit(Path(manifest), lane_index, Path(repo) if repo else None)


@job.command("run")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option("--workdir", type=click.Path(file_okay=False), help="The job's checkout (default: here).")
@click.option("--state", type=click.Path(file_okay=False), help="State folder, outside the checkout "
              "(default NEV_JOB_STATE, else NEV_STATE_DIR/jobs/<name>).")
@click.option("--inventory", type=click.Path(dir_okay=False), help="The lane's snapshot (default NEV_INVENTORY).")
@click.option("--declared", type=click.Path(dir_okay=False), help="Declared aliases (default NEV_FOLKNET_FILE, "
              "relative to the checkout).")
def run(manifest: str, workdir: str | None, state: str | None, inventory: str | None, declared: str | None) -> int:
    """Run a job's stages with durable state (on the lane, inside Dagu).

    Exit 0 passed, 1 a stage failed, 3 inventory not ready (resend), 8 stopped,
    9 requirements unmet, 10 inventory refusal that never clears.
    """
    from pathlib import Path

    from jobs import runner

    return runner.run(Path(manifest), Path(workdir) if workdir else None, Path(state) if state else None,
                      Path(inventory) if inventory else None, Path(declared) if declared else None)


@job.command("step", hidden=True, add_help_option=False,
             context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def step(args: tuple[str, ...]) -> int:
    """One step of the job workflow on a lane (prepare, run, publish, archive, cleanup)."""
    from jobs import lane_main

    return lane_main.main(list(args))


@job.group("check")
def check() -> None:
    """The checks a job makes before its first stage."""


@check.command("preflight")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option("--workdir", type=click.Path(file_okay=False))
@click.option("--state", type=click.Path(file_okay=False))
def preflight(manifest: str, workdir: str | None, state: str | None) -> int:
    """Requirements check: exit 0 when every requirement is met, 9 otherwise."""
    from pathlib import Path

    from jobs import runner

    return runner.check_preflight(Path(manifest), Path(workdir) if workdir else None,
                                  Path(state) if state else None)


@check.command("inventory")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.argument("snapshot", type=click.Path(dir_okay=False))
@click.option("--declared", type=click.Path(dir_okay=False), help="Declared aliases (default NEV_FOLKNET_FILE).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome and reasons as JSON on stdout.")
def inventory(manifest: str, snapshot: str, declared: str | None, as_json: bool) -> int:
    """Inventory check: exit 0 ready, 3 not ready yet, 10 never clears by itself.

    Every reason is printed on stderr, one per line.
    """
    from pathlib import Path

    from jobs import check_inventory

    return check_inventory.run(Path(manifest), Path(snapshot), Path(declared) if declared else None, as_json)


@job.command("poll")
@click.option("--repo", type=click.Path(file_okay=False), help="The primary checkout (default: here).")
@click.option("--install", "install_", is_flag=True, help="Install the tick (crontab line, or --dagu-home).")
@click.option("--uninstall", is_flag=True, help="Remove the tick.")
@click.option("--dagu-home", type=click.Path(file_okay=False),
              help="With --install/--uninstall: a scheduled workflow in this Dagu home instead of crontab.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {\"jobs\": [{job, action, why}], \"exit\": N}, each job's "
                   "action this tick (the lines go to stderr as always).")
def poll(repo: str | None, install_: bool, uninstall: bool, dagu_home: str | None,
         as_json: bool) -> int:
    """The tick: land approved tracks, then read result/* on the forge, land passed jobs, resend 3
    and 7, record 9 and 10; once a day, prune the share's archives (NEV_ARCHIVE_KEEP_DAYS)."""
    from pathlib import Path

    from jobs import tick

    if install_ and uninstall:
        raise click.UsageError("give --install or --uninstall, not both")
    if install_ or uninstall:
        if as_json:
            raise click.UsageError("--json goes with a tick, not with --install or --uninstall")
        return tick.install(Path(repo) if repo else None, Path(dagu_home) if dagu_home else None,
                            on=install_)
    if not as_json:
        return tick.tick(Path(repo) if repo else None)
    from lanes.base.ui import emit_json

    seen: list[dict[str, str]] = []
    rc = tick.tick(Path(repo) if repo else None, seen=seen)
    emit_json({"jobs": seen, "exit": rc})
    return rc


@job.command("revoke")
@click.argument("name")
def revoke(name: str) -> int:
    """Revoke job NAME's own gateway key now and delete its key file on the job's lane (the tick
    does both when the job ends); for a job given up or cleaned up by hand. Needs
    NEV_GATEWAY_KEYS_FILE."""
    from jobs import jobkeys, records
    from jobs.manifest import NAME_RE
    from lanes.base.errors import NevError

    if not NAME_RE.match(name):
        raise click.UsageError(f"{name!r} is not a job name ([a-z0-9][a-z0-9._-]*, at most 60)")
    jobkeys.revoke(name)
    click.echo(f"job {name}: its gateway key is revoked")
    rec = records.read().jobs.get(name)
    try:
        jobkeys.drop_key_file(name, rec.lane if rec else None)
    except NevError as e:
        raise NevError(f"job {name}: its gateway key is revoked, but its key file on the lane is not deleted yet "
                       f"({e.message}); the key no longer works; run `nev job revoke {name}` again once the lane "
                       "answers", e.exit_code) from None
    click.echo(f"job {name}: its key file on the lane is deleted")
    return 0


@job.command("status")
@click.argument("name", required=False)
@click.option("--state", type=click.Path(file_okay=False), help="Read this state folder.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: the jobs (or job NAME) with their records.")
@click.option("--follow", is_flag=True, help="With NAME: follow a job in flight on its lane "
              "(its stages, its running stage's log) until it ends.")
def status(name: str | None, state: str | None, as_json: bool, follow: bool) -> int:
    """Each job's stage states, from its state file or its recorded result; with NAME, a job in
    flight also as its lane holds it (or `lane unreachable: ...`).

    \b
    --follow: its stages and its running stage's log from the lane, new lines within about a
    second, until the job ends. Exit codes with --follow: the job's own (0 passed, 1 a stage
    failed, 3 not run, 8 stopped, 9, 10, 12: see `nev job run`); 3 also when the lane does not
    answer or the runner is gone (no sign of it for 120 s); 130 on Ctrl-C (the job runs on). A
    job not in flight: its status once, exit 0. See docs/jobs.md.
    """
    from pathlib import Path

    from jobs import status as status_mod

    return status_mod.show(name, Path(state) if state else None, as_json, follow=follow)


@click.command("land")
@click.argument("args", nargs=-1, metavar="SPEC_NAME SPEC_SHA BRANCH_TIP | approve SPEC_NAME")
@click.option("--check", is_flag=True, help="Run every condition, stop before the merge; changes no ref.")
@click.option("--approved", is_flag=True, help="Land every approved track in turn (what the tick runs).")
@click.option("--spec-sha", help="With approve: the spec sha you reviewed (default: main's now).")
@click.option("--tip", help="With approve: the branch tip you reviewed (default: the branch's now).")
@click.option("--reviewed-by", "reviewed_by", metavar="NAME",
              help="A person's landing, from a terminal only: the protected paths the diff "
                   "touches (bench/, tracks.json, specs/, floor files...) land on NAME's review; "
                   "the tag and the rig's change log name NAME. Refused by the tick and in job "
                   "stages.")
@click.option("--repo", type=click.Path(file_okay=False, exists=True), default=".", show_default=True,
              help="The repository (its primary checkout).")
def land(args: tuple[str, ...], check: bool, approved: bool, spec_sha: str | None, tip: str | None,
         reviewed_by: str | None, repo: str) -> int:
    """Land an approved track by a guarded fast-forward of main.

    \b
    nev land SPEC_NAME SPEC_SHA BRANCH_TIP [--check]
    nev land SPEC_NAME SPEC_SHA BRANCH_TIP --reviewed-by NAME   (a person, at a terminal)
    nev land approve SPEC_NAME [--spec-sha SHA] [--tip SHA]
    nev land --approved

    0 landed (or --check passed), 1 not landed (reason on one line; also --reviewed-by with no
    terminal, or under the tick or a job stage: nothing done; also a usage error, as 2 is the
    reference rig's rebase conflict), 2 rebase conflict outside handoff.md (files named), 3 the
    gate found no build lane. See docs/landing.md.
    """
    from lanes.base.errors import NevError, UsageError
    from lanes.base.exitcodes import Exit

    try:
        return _land(args, check, approved, spec_sha, tip, reviewed_by, repo)
    except UsageError as e:
        raise NevError(e.message, Exit.FAILED) from None      # 2 is a rebase conflict here


def _land(args: tuple[str, ...], check: bool, approved: bool, spec_sha: str | None, tip: str | None,
          reviewed_by: str | None, repo: str) -> int:
    from pathlib import Path

    from jobs import approvals
    from jobs import land as landing

    where = Path(repo)
    if approved:
        if args or check or reviewed_by is not None:
            raise click.UsageError("--approved takes no arguments, no --check and no --reviewed-by")
        from jobs import tick

        return tick.land_approved(where)
    if args[:1] == ("approve",):
        if len(args) != 2 or check or reviewed_by is not None:
            raise click.UsageError("usage: nev land approve SPEC_NAME [--spec-sha SHA] [--tip SHA]")
        return approvals.approve(where, args[1], spec_sha=spec_sha, tip=tip)
    if len(args) != 3:
        raise click.UsageError("usage: nev land SPEC_NAME SPEC_SHA BRANCH_TIP [--check] "
                               "(or: nev land approve SPEC_NAME, nev land --approved)")
    if spec_sha or tip:
        raise click.UsageError("--spec-sha and --tip go with approve")
    return landing.land(where, args[0], args[1], args[2], check=check, reviewed_by=reviewed_by)


# `nev lane writer`, added to the `lane` group by the entry point (rig/cli.py): the lane path is
# lanes', the declared harness (tracks.json) is ours.
@click.group("writer")
def writer() -> None:
    """Writers on a lane: start one in a worktree's lane copy, fetch its commits back, stop it, list them."""


@writer.command("start")
@click.argument("worktree", type=click.Path(file_okay=False, exists=True))
@lane_option(Default.REQUIRED)
@click.option("--model", required=True, help="The model the harness is given (--model).")
@click.option("--brief", type=click.Path(dir_okay=False, exists=True), required=True,
              help="The brief; it goes to ~/.cache/lane-writer-briefs/ on the lane, outside the copy.")
def writer_start(worktree: str, lane_index: int, model: str, brief: str) -> int:
    """Sync WORKTREE to the lane copy, check out its branch and start the declared harness there.

    The harness is tracks.json's specWatch.lanes.tool (else TRACKS_TOOL; refused with neither),
    started by specWatch.lanes.launch (default $PI_TRACKS_HOME/bin/writer-exec.sh) as
    `LAUNCH --tool T --model M --brief-file F`, detached; the copy's .env lives as long as it.
    Refused while a writer runs in that copy, or over a dead writer's commits never fetched.
    First the lane's harness checkout ($PI_TRACKS_HOME) is updated, fast-forward only; refused
    (exit 1, nothing started) when it has local changes or cannot fast-forward. A writer that
    ends within NEV_WRITER_SETTLE_S (2 s) fails the start: exit 1, its log's last lines shown.
    """
    import os
    from pathlib import Path

    from jobs.writer import lane_harness
    from lanes import writer as lw
    from lanes.base.exitcodes import Exit
    from lanes.base.gitrun import Repo
    from lanes.base.mask import mask

    top = Repo(Path(worktree)).toplevel_or_self()
    tool, launch = lane_harness(top, os.environ)
    try:
        rec = lw.start(Path(worktree), lane_index=lane_index, model=model, brief=Path(brief),
                       harness=lw.Harness(tool, launch))
    except lw.EndedAtOnce as e:
        click.echo(f"nev: {mask(e.message)}", err=True)
        if e.harness is not None:
            click.echo(f"  {lw.harness_line(e.harness)}", err=True)
        click.echo("  its log's last lines:" if e.tail else "  its log is empty", err=True)
        for line in e.tail.splitlines():
            click.echo(f"    {line}", err=True)
        return int(Exit.FAILED)
    st = rec.state
    if rec.harness is not None:
        click.echo(f"{rec.lane.label}: {lw.harness_line(rec.harness)}")
    branch = st.ref[len("refs/heads/"):]
    click.echo(f"{rec.lane.label}: writer started in {Path(top).name} on {branch} "
               f"(pid {st.pid}, {tool}, {model}); output: {st.log}")
    return 0


@writer.command("fetch")
@click.argument("worktree", type=click.Path(file_okay=False, exists=True))
@lane_option(Default.WRITER)
def writer_fetch(worktree: str, lane_index: int | None) -> int:
    """Bring the writer's commits into WORKTREE's branch, fast-forward only.

    Anything else (the branches diverged, another branch checked out) is refused with the
    commits named; the lane's tip is kept at refs/nev/writer/NAME.
    """
    from pathlib import Path

    from lanes import writer as lw

    out = lw.fetch(Path(worktree), lane_index)
    still = " (the writer is still running)" if out.running else ""
    if out.action is lw.Fetch.FAST_FORWARD:
        click.echo(f"{out.lane.label}: fast-forwarded to {out.tip[:12]}, "
                   f"{len(out.commits)} commit(s){still}:")
        for c in reversed(out.commits):
            click.echo(f"  {c}")
    else:
        click.echo(f"{out.lane.label}: nothing to fetch; {out.tip[:12]} is here already{still}")
    return 0


@writer.command("stop")
@click.argument("worktree", type=click.Path(file_okay=False, exists=True))
@lane_option(Default.WRITER)
def writer_stop(worktree: str, lane_index: int | None) -> int:
    """Stop the writer of WORKTREE's lane copy: its process group ends (SIGTERM, then SIGKILL),
    the copy's .env is removed, its commits stay for `nev lane writer fetch`. Prints the last
    lines of its log (masked).
    """
    from pathlib import Path

    from lanes import writer as lw

    stopped = lw.stop(Path(worktree), lane_index)
    out = stopped.writer
    how = f"stopped (it was running as pid {out.pid})" if out.was_running else \
        f"was not running ({lw.state_word(out)})"
    click.echo(f"{stopped.lane.label}: the writer of {out.name} {how}; .env removed: "
               f"{len(out.env_removed)} file(s)")
    if out.unfetched:
        click.echo(f"  {len(out.unfetched)} commit(s) kept for `nev lane writer fetch`:")
        for c in out.unfetched:
            click.echo(f"    {c}")
    if out.log_tail:
        click.echo("  its log's last lines:")
        for line in out.log_tail.splitlines():
            click.echo(f"    {line}")
    return 0


@writer.command("status")
@lane_option(Default.EVERY)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def writer_status(lane_index: int | None, as_json: bool) -> int:
    """Writers per lane: running, or exited with its code, and the commits not fetched yet."""
    from lanes import writer as lw
    from lanes.base.ui import emit_json

    rows = lw.status(lane_index)
    if as_json:
        emit_json([r.to_json() for r in rows])
        return 0
    for r in rows:
        label = r.lane.label
        if r.error is not None:
            click.echo(f"{label}: does not answer ({r.error})")
            continue
        if not r.writers:
            click.echo(f"{label}: no writers")
        for w in r.writers:
            click.echo(f"{label}: {w.name}  {lw.state_word(w)}  branch {w.branch}  "
                       f"model {w.model}  unfetched: {len(w.unfetched)}")
            for c in w.unfetched:
                click.echo(f"    {c}")
    return 0


@click.group("sandbox")
def sandbox_group() -> None:
    """The sandbox for model-written code (docs/sandbox.md): check a host, run a verify in it."""


@sandbox_group.command("check")
@click.option("--hostile", is_flag=True, help="Also compile and score a batch of hostile candidates against "
              "this host's real targets (home, ~/.ssh, caches, the share's store, loopback, a rig address).")
def sandbox_check(hostile: bool) -> int:
    """Say whether this host can build the sandbox and whether it holds (one line per check).

    Exits 0 when everything holds, 13 when the sandbox cannot be built here (what is missing is
    named), 1 when a check failed.
    """
    from bench import sandbox_check as sc
    from lanes.base.exitcodes import Exit
    from lanes.base.ui import info

    report = sc.Report()
    sc.basic(report)
    if hostile and not report.failed:
        sc.hostile(report, info)
    for line in report.lines:
        click.echo(line)
    if report.failed:
        from lanes.base import sandbox

        return Exit.NO_SANDBOX if sandbox.missing() else Exit.FAILED
    return 0


@sandbox_group.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--workdir", type=click.Path(file_okay=False, exists=True, path_type=None), default=".",
              show_default=True, help="The copy the command verifies (the one folder it may write).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def sandbox_exec(workdir: str, command: tuple[str, ...]) -> int:
    """Run COMMAND as a verify of model-written code: in the sandbox, in WORKDIR, its ground truth
    built first (what the landing's gate and `nev lane run --sandbox` run on a lane).

    Exits with the command's status; 13 when the sandbox cannot be built here (nothing ran).
    """
    import os
    import subprocess
    import sys
    from pathlib import Path

    from jobs import verify_jail
    from lanes.base import sandbox
    from lanes.base.ui import info

    sandbox.check()
    proc = verify_jail.popen(list(command), Path(workdir), dict(os.environ), info,
                             stdin=subprocess.DEVNULL, stdout=sys.stdout.fileno(), stderr=sys.stderr.fileno())
    try:
        return proc.wait()
    except BaseException:
        from lanes.base import procgroup

        procgroup.stop(proc.pid, grace=3.0, leader=proc)
        raise
