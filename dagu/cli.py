"""`nev dagu ...`: parses arguments and dispatches to the dagu modules."""

from __future__ import annotations

import sys
import time

import click

from lanes.base import settings
from lanes.base.exitcodes import Exit
from lanes.base.laneopt import Default, lane_option
from lanes.base.ui import emit_json, info


@click.group("dagu")
def dagu() -> None:
    """Dagu on a lane: install, start, stop, run and watch workflows.

    Lane: --lane N, else NEV_DAGU_LANE, else NEV_LANE_SSH, else lane 0 of the lanes file.
    """


def _lane_opt(f):  # type: ignore[no-untyped-def]
    return lane_option(Default.DAGU)(f)


def _out(line: str) -> None:
    click.echo(line)


@dagu.command("up")
@_lane_opt
@click.option("--distributed", is_flag=True,
              help="Coordinator on the chosen lane, a worker on every lane, mTLS, data on the NAS.")
@click.option("--dry-run", is_flag=True,
              help="Print the lane(s) and the steps it would take; connect to none, change nothing.")
def up(lane_index: int | None, distributed: bool, dry_run: bool) -> int:
    """Install the pinned Dagu on the lane, configure, start and check it.

    The binary comes from NEV_DAGU_BINARY (a file here or a path on the lane) or the NAS
    share; its sha256 must match the pin. The gateway key (NEV_MODEL_KEY_FILE) goes over
    SSH stdin into ~/dagu/home/model-key (mode 600).
    """
    if dry_run:
        from dagu import service

        for line in service.up_plan(lane_index, distributed):
            click.echo(line)
        return 0
    if distributed:
        from dagu import distributed as dist

        rep = dist.up(lane_index)
    else:
        from dagu import service

        with service.opened(lane_index) as ld:
            rep = service.up(ld)
    for c in rep.changes:
        info(f"changed: {c}")
    for u in rep.unchanged:
        info(f"unchanged: {u}")
    return 0


@dagu.command("start")
@_lane_opt
def start(lane_index: int | None) -> int:
    """Start Dagu on the lane (and its worker, in distributed mode)."""
    from dagu import distributed as dist
    from dagu import service

    with service.opened(lane_index) as ld:
        if not dist.has_server(ld) and not dist.has_worker(ld):
            raise service.DaguServiceError(f"Dagu is not set up on {ld.lane.label}; run `nev dagu up` first")
        if dist.has_server(ld):
            started = ld.start()
            info(f"Dagu on {ld.lane.label}: {'started' if started else 'already running'}, healthy")
        if dist.start_worker_if_configured(ld):
            info(f"Dagu worker on {ld.lane.label}: started")
    return 0


@dagu.command("stop")
@_lane_opt
def stop(lane_index: int | None) -> int:
    """Stop Dagu on the lane (and its worker, in distributed mode)."""
    from dagu import distributed as dist
    from dagu import service

    with service.opened(lane_index) as ld:
        if dist.stop_worker(ld):
            info(f"Dagu worker on {ld.lane.label}: stopped")
        if dist.has_server(ld) or not dist.has_worker(ld):
            was = ld.stop()
            info(f"Dagu on {ld.lane.label}: {'stopped' if was else 'was not running'}")
    return 0


@dagu.command("status")
@_lane_opt
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(lane_index: int | None, as_json: bool) -> int:
    """Is Dagu running and healthy on the lane (exit 0 yes, 1 no)."""
    from dagu import distributed as dist
    from dagu import service

    with service.opened(lane_index) as ld:
        st = ld.status()
        worker = dist.has_worker(ld)
        if worker:
            st["worker_pid"] = dist.worker_pid(ld)
        server = dist.has_server(ld) or not worker
    if as_json:
        emit_json(st)
    else:
        if server:
            state = "healthy" if st["healthy"] else ("running, not healthy" if st["pid"] else "not running")
            click.echo(f"lane {st['lane']}: Dagu {state}"
                       + (f" (pid {st['pid']}, port {st['port']})" if st["pid"] else ""))
        if worker:
            wp = st["worker_pid"]
            click.echo(f"lane {st['lane']}: worker {'running (supervisor pid ' + str(wp) + ')' if wp else 'not running'}")
    ok = (st["healthy"] or not server) and (not worker or st.get("worker_pid") is not None)
    return 0 if ok else 1


@dagu.command("autostart")
@click.argument("state", type=click.Choice(["on", "off"]), required=False)
@click.option("--install", "install_", is_flag=True, help="The same as `on`: add the line.")
@click.option("--uninstall", is_flag=True, help="The same as `off`: remove the line.")
@_lane_opt
def autostart(state: str | None, install_: bool, uninstall: bool, lane_index: int | None) -> int:
    """Add (on, --install) or remove (off, --uninstall) the lane user's @reboot crontab line.

    --install/--uninstall is the spelling of every command that adds a crontab line (see
    docs/troubleshooting.md, "Crontab lines").
    """
    from dagu import service

    given = [s for s, on in (("on", state == "on" or install_),
                             ("off", state == "off" or uninstall)) if on]
    if len(given) != 1 or (state is not None and (install_ or uninstall)):
        raise click.UsageError("give one of on, off, --install, --uninstall")
    state = given[0]
    with service.opened(lane_index) as ld:
        changed = ld.autostart(state == "on")
    info(f"autostart {state}: {'changed' if changed else 'unchanged'}")
    return 0


@dagu.command("tunnel")
@_lane_opt
@click.option("--port", "local_port", type=int, default=0, help="Local port (default: any free one).")
def tunnel(lane_index: int | None, local_port: int) -> int:
    """Hold a port forward open to the web UI and API (Ctrl-C ends it).

    The password is not printed: it is in ~/dagu/home/config.yaml on the lane (user nev).
    """
    from dagu import service

    with service.opened(lane_index) as ld, ld.conn.forward("127.0.0.1", ld.port, local_port) as fwd:
        click.echo(f"{fwd.url}/  (API {fwd.url}/api/v2, user nev; Ctrl-C to close)")
        sys.stdout.flush()
        while True:
            time.sleep(1)
            ld.conn.transport  # noqa: B018 - raises when the SSH connection dropped


@dagu.command("run")
@click.argument("workflow")
@click.option("--param", multiple=True, metavar="K=V", help="A run parameter (never a secret).")
@_lane_opt
@click.option("--detach", is_flag=True, help="Print the run id and return without following.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: the run at the end (id, status, times, steps); with --detach, "
                   "its id.")
def run(workflow: str, param: tuple[str, ...], lane_index: int | None, detach: bool,
        as_json: bool) -> int:
    """Start (or enqueue) WORKFLOW and follow it to the end or NEV_DAGU_WAIT.

    WORKFLOW is a YAML file here or the name of a shipped one (dagu/workflows/). One with a
    top-level `queue:` key is enqueued. Exit 0 when the run succeeded, 1 otherwise.
    """
    from dagu import runs, service
    from lanes.base.ui import emit_json

    params = runs.parse_params(param)  # refuses secret names before anything is sent
    wf = runs.load_workflow(workflow)
    wait = settings.get_float(settings.DAGU_WAIT)
    poll = settings.get_float(settings.DAGU_POLL)
    with service.opened(lane_index) as ld:
        ld.write_if_changed(f"{ld.layout.dags}/{wf.name}.yaml", wf.text)
        with ld.api() as api:
            run_id, queued = runs.submit(api, wf, params, say=info)
            if not as_json:
                click.echo(f"{run_id}")
            info(f"run {run_id} of {wf.name}: {'enqueued' if queued else 'started'} on {ld.lane.label}")
            if detach:
                if as_json:
                    emit_json({"run_id": run_id, "workflow": wf.name, "queued": queued})
                return 0
            st = runs.follow(api, wf.name, run_id, wait, poll, info)
    if as_json:
        emit_json(runs.run_json(st))
    if not st.done:
        info(f"run {run_id} is still {st.status} after {wait:.0f} s (NEV_DAGU_WAIT); "
             f"follow it with `nev dagu watch {run_id}`")
        return Exit.FAILED
    return runs.run_exit_code(st)


@dagu.command("stop-run")
@click.argument("run_id")
@_lane_opt
def stop_run(run_id: str, lane_index: int | None) -> int:
    """Stop a run."""
    from dagu import service

    with service.opened(lane_index) as ld, ld.api() as api:
        st = api.find_run(run_id)
        if st.done:
            info(f"run {run_id} of {st.name} already ended: {st.status}")
            return 0
        api.stop(st.name, run_id)
        info(f"run {run_id} of {st.name}: stop sent")
    return 0


@dagu.command("watch")
@click.argument("run_id")
@click.option("--once", is_flag=True, help="Read the status once instead of following.")
@click.option("--step", help="With --once: print the step's exit code (0, N, or - for a signal).")
@_lane_opt
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: the run (id, status, times, steps); with --step, that step.")
def watch(run_id: str, once: bool, step: str | None, lane_index: int | None, as_json: bool) -> int:
    """Follow a run; with --once --step print the step's exit code and exit with it (- exits 1)."""
    from dagu import runs, service
    from lanes.base.ui import emit_json

    if step and not once:
        raise click.UsageError("--step goes with --once")
    with service.opened(lane_index) as ld, ld.api() as api:
        if step:
            code, s = runs.watch_once_step(api, run_id, step)
            if as_json:
                emit_json({"run_id": run_id, "step": s.name, "status": s.status, "exit": code})
            else:
                click.echo(code)
            return int(code) if code.isdigit() else Exit.FAILED
        st = api.find_run(run_id)
        if once:
            if as_json:
                emit_json(runs.run_json(st))
            else:
                click.echo(f"run {run_id} of {st.name}: {st.status}")
                for s in st.steps:
                    click.echo(runs.describe_step(s))
            return runs.run_exit_code(st) if st.done else 0
        st = runs.follow(api, st.name, run_id, settings.get_float(settings.DAGU_WAIT),
                         settings.get_float(settings.DAGU_POLL), info)
    if as_json:
        emit_json(runs.run_json(st))
    return runs.run_exit_code(st) if st.done else Exit.FAILED


@dagu.command("clean-jobs")
@click.argument("name")
@_lane_opt
def clean_jobs(name: str, lane_index: int | None) -> int:
    """Remove a job's folder (~/dagu/jobs-work/NAME) on the lane."""
    from dagu import maintenance, service

    with service.opened(lane_index) as ld:
        removed = maintenance.clean_job(ld, name)
    info(f"jobs-work/{name}: {'removed' if removed else 'not there'}")
    return 0


@dagu.command("prune-mirror")
@_lane_opt
def prune_mirror(lane_index: int | None) -> int:
    """Remove job/* and result/* branches the forge no longer has from the lane mirror and the job
    mirror (other refs untouched); the forge is asked from the lane, as a gate's fetch reaches it."""
    from dagu import maintenance, service

    with service.opened(lane_index) as ld:
        pruned = maintenance.prune_mirror(ld)
    for ref in pruned:
        click.echo(f"pruned {ref}")
    info(f"prune-mirror: {len(pruned)} ref(s) removed")
    return 0


@dagu.command("queue")
@click.option("--max", "max_", type=int, required=True, help="Runs at once in the global queue.")
@_lane_opt
def queue(max_: int, lane_index: int | None) -> int:
    """Write the global queue's concurrency and restart the scheduler."""
    from dagu import queue as dqueue
    from dagu import service

    dqueue.check_max(max_)
    with service.opened(lane_index) as ld:
        changed = dqueue.set_queue_max(ld, max_)
    info(f"global queue: {max_} at once ({'changed, Dagu restarted' if changed else 'unchanged'})")
    return 0
