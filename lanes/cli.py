"""`nev lane ...`: parses arguments and dispatches to the lanes modules."""

from __future__ import annotations

from collections.abc import Callable

import click

from lanes import gateargs
from lanes.base.laneopt import Default, lane_option


class LaneGroup(click.Group):
    """`nev lane`: its own commands, and those the entry point adds by name (`loaders`: the line
    `nev lane --help` shows, and how to load it), each imported only when named."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.loaders: dict[str, tuple[str, Callable[[], click.Command]]] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.loaders})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.loaders:
            self.add_command(self.loaders[cmd_name][1](), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)
        rows = [(n, self.commands[n].get_short_help_str(limit) if n in self.commands else self.loaders[n][0])
                for n in names if n not in self.commands or not self.commands[n].hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group("lane", cls=LaneGroup)
def lane() -> None:
    """Run a worktree's command on a build lane; list, sweep, provision and create lanes."""


class GateCommand(click.Command):
    """`nev lane run|on`: parsed by `lanes.gateargs.parse`, the parser the fast path of
    `rig/cli.py` uses, never by click's; the options declared on the command give its --help
    (and shell completion) only, and its help is click's. A usage error is raised as click's own
    kind, so click words it as it words its own."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.resilient_parsing:
            return super().parse_args(ctx, args)
        try:
            g = gateargs.parse(self.name or "", args)
        except gateargs.Help:
            return super().parse_args(ctx, args)        # click prints the help and exits
        except gateargs.Usage as e:
            raise self._click_error(ctx, e) from None
        ctx.params, ctx.args = {"gate_args": g}, []
        return []

    def _click_error(self, ctx: click.Context, e: gateargs.Usage) -> click.UsageError:
        if e.kind == "no-such-option":
            longs = [*gateargs.OPTIONS[self.name or ""], "--help"]     # click offers long ones only
            offer = longs if e.name.startswith("--") else None
            return click.NoSuchOption(e.name, possibilities=offer, ctx=ctx)
        if e.kind == "option":
            return click.BadOptionUsage(e.name, e.message, ctx)
        param = next(p for p in self.params if e.name in (p.name, *p.opts))
        if e.kind == "missing":
            return click.MissingParameter(ctx=ctx, param=param)
        return click.BadParameter(e.message, ctx, param)


@lane.command("run", cls=GateCommand, context_settings={"allow_interspersed_args": False})
@lane_option(Default.FIRST)
@click.option("--pull", multiple=True, metavar="DIR", help="Copy DIR of the lane copy back after the run (repeatable).")
@click.option("--sandbox", is_flag=True, help="Run COMMAND in the lane's sandbox for model-written code "
              "(no network, no home, no .env; its nev must be installed: docs/sandbox.md).")
@click.argument("worktree", type=click.Path(file_okay=False))
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(gate_args: gateargs.GateArgs) -> int:
    """Ship WORKTREE (unpushed commits, diff, untracked files) to a lane and run COMMAND there.

    COMMAND never runs on this machine; `nev lane on` runs it here when no lane answers.

    Exit status is the command's; 1 when refused (a file that may not leave the worktree, a
    --pull folder that is a local symlink or holds .git), 2 for bad usage (a --pull path that
    is no folder inside the worktree, a --lane no lane has), 3 when no lane answered (nothing
    ran), 4 when the lane's disk is short even after a sweep, 5 when a pulled folder was refused
    (nothing of it written; the command's status on the line), 130/143 when interrupted (the
    command on the lane is stopped too). Already on a lane (NEV_ON_LANE set) COMMAND runs in place in
    WORKTREE, as with `nev lane on`: no lane settings read, --pull ignored.
    """
    return gateargs.run(gate_args)


@lane.command("on", cls=GateCommand, context_settings={"allow_interspersed_args": False})
@lane_option(Default.FIRST)
@click.option("--lane-only", is_flag=True, help="Exit 3 instead of running locally when no lane answers.")
@click.option("--pull", multiple=True, metavar="DIR", help="Copy DIR back after the run (ignored on a lane).")
@click.option("--sandbox", is_flag=True, help="Run COMMAND in the lane's sandbox for model-written code "
              "(no network, no home, no .env; its nev must be installed: docs/sandbox.md).")
@click.argument("worktree", type=click.Path(file_okay=False))
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def on(gate_args: gateargs.GateArgs) -> int:
    """Run COMMAND on a lane, or in place when already on one (NEV_ON_LANE set).

    Without --lane-only (and without NEV_LANE_STRICT=1) it runs here when no lane answers.
    """
    return gateargs.run(gate_args)


@lane.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_(as_json: bool) -> int:
    """Configured lanes: answering or not (and why not), free disk, copies, gates running.

    Exits 3 when no lane answers (or none is configured), as every command that cannot reach
    the rig does; the table (or the JSON) is printed all the same.
    """
    from lanes import gate
    from lanes.base.exitcodes import Exit
    from lanes.base.ui import emit_json, info

    rows = gate.lane_status()
    answered = any(r["answers"] for r in rows)
    if as_json:
        emit_json(rows)
    elif not rows:
        info("no lanes configured (NEV_LANE_SSH or the lanes file); nothing to reach")
    for r in [] if as_json else rows:
        state = "answers" if r["answers"] else "does not answer"
        free = f"{r['free_gb']:.1f} GiB free" if r["free_gb"] is not None else "free disk unknown"
        click.echo(f"lane {r['index']}  {r['ssh']:<28} {state:<16} {free:<16} "
                   f"copies: {', '.join(r['copies']) or '-'}  running: {', '.join(r['running']) or '-'}")
        if not r["answers"]:
            click.echo(f"        {r.get('error') or 'no answer'}")
    return Exit.OK if answered else Exit.UNAVAILABLE


@lane.command("install")
@lane_option(Default.EVERY)
def install(lane_index: int | None) -> int:
    """Install this nev on the lanes (wheels built here, sent over SSH, installed offline).

    A lane never runs a different nev than the dev box: the install is keyed by the sources (a
    client install's: by its installed files, packed back into wheels here, offline), and a
    second run with the same nev changes nothing.
    """
    from lanes import lanesfile, selfinstall

    lf = lanesfile.configured()
    for lane in lanesfile.pick(lf, lane_index):
        with lane.connect() as conn:
            _changed, line = selfinstall.install(conn, selfinstall.default_cache())
        click.echo(f"{lane.label}: {line}")
    return 0


@lane.command("sweep")
@lane_option(Default.EVERY)
@click.option("--track", help="Only the copies of this track.")
@click.option("--dry-run", is_flag=True, help="List what would go, with sizes; change nothing.")
@click.option("--repo", type=click.Path(file_okay=False, exists=True), default=".",
              show_default=True, help="The primary checkout, whose worktrees name the tracks that keep their copies "
                   "(default: here; from another repository no track keeps its copy).")
@click.option("--archives", is_flag=True,
              help="Instead: prune the share's archive/gate-logs, job-logs and corpus older than "
                   "NEV_ARCHIVE_KEEP_DAYS, keeping the newest per worktree or job.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: per lane swept, each decision and what was removed (the "
                   "lines go to stderr); not with --archives.")
def sweep(lane_index: int | None, track: str | None, dry_run: bool, repo: str, archives: bool,
          as_json: bool) -> int:
    """Remove lane copies whose track has no worktree in the primary checkout.

    Keeps the primary's own copy, copies with a process in them, copies locked by a running
    gate and directories that are not worktrees of the lane's mirror. Untracked data under a
    copy's corpus/ goes to the NAS first (archive/corpus/<name>/<time>.tar). Exit 1 when a lane
    could not be swept or a removal failed. Old nev installs go too: never the current one or one
    a nev runs from; the NEV_INSTALLS_KEEP (2) last made current stay.

    With --archives: the share's archives older than NEV_ARCHIVE_KEEP_DAYS (30) go, through the
    first lane that answers (or --lane N); the newest of each worktree or job always stays.
    """
    from pathlib import Path

    from lanes import lanesfile
    from lanes import sweep as sw
    from lanes.base import settings
    from lanes.base.gitrun import Repo

    if archives:
        if track or as_json:
            other = "--track" if track else "--json"
            raise click.UsageError(f"--archives and {other} do not go together")
        lanes = lanesfile.pick(lanesfile.configured(), lane_index)
        status, _ = sw.sweep_archives(settings.get_float(settings.ARCHIVE_KEEP_DAYS), dry_run, lanes)
        return status
    if not as_json:
        return sw.sweep(lane_index, track, dry_run, Repo(Path(repo)))[0]
    from lanes.base.ui import emit_json, info

    status, results = sw.sweep(lane_index, track, dry_run, Repo(Path(repo)), say=info)
    emit_json([sw.as_json(r) for r in results])
    return status


@lane.command("provision")
@lane_option(Default.EVERY)
@click.option("--packages", help="Comma-separated Debian packages (default: what the gate needs).")
@click.option("--apt-proxy", help="apt proxy on the node's bridge (default NEV_LANE_APT_PROXY).")
@click.option("--ssh-user", default="root", show_default=True, help="Who provisions on the guest.")
@click.option("--dry-run", is_flag=True,
              help="Print the lanes and the steps it would run; connect to none, change nothing.")
def provision(lane_index: int | None, packages: str | None, apt_proxy: str | None, ssh_user: str,
              dry_run: bool) -> int:
    """Idempotent set-up of a lane guest over SSH; prints changed:/unchanged: per step.

    Writer host: LANE_PI_TRACKS_URL clones pi-tracks; LANE_WRITER_SETUP runs as lane with
    LANE_WRITER_TOOL and LANE_WRITER_DIRS. The model URL comes from NEV_LANE_MODEL_URL.
    """
    import os

    from lanes import provision as pv
    from lanes.base import settings

    env = os.environ
    pk = pv.GATE_PACKAGES if packages is None else tuple(x.strip() for x in packages.split(",") if x.strip())
    params = pv.Params(packages=pk, apt_proxy=apt_proxy or settings.get(settings.LANE_APT_PROXY),
                       model_url=settings.get(settings.LANE_MODEL_URL) or env.get("LANE_MODEL_URL"),
                       pi_tracks_url=env.get("LANE_PI_TRACKS_URL"), writer=pv.Writer.from_env(env),
                       rust_min=pv.engine_rust_min())
    return pv.provision_lanes(lane_index, params, ssh_user, dry_run=dry_run)


@lane.command("create")
@click.option("--backend", type=click.Choice(["lxc", "pct"]), required=True)
@click.option("--name", required=True, help="Guest name (lxc container name / pct hostname).")
@click.option("--node", default="local", show_default=True,
              help="Where the guest goes: `local` (this machine) or [root@]host[:port] over SSH (pinned key).")
@click.option("--addr", required=True, help="The guest's IPv4 address (a /24 on the bridge).")
@click.option("--bridge", default=None, help="Bridge on the node (lxc: required; pct: vmbr0).")
@click.option("--cpus", type=int, default=96, show_default=True)
@click.option("--memory-gb", type=int, default=96, show_default=True)
@click.option("--disk-gb", type=int, default=200, show_default=True, help="pct: root disk size; lxc: recorded only.")
@click.option("--bind", "binds", multiple=True, metavar="SRC:DST[:ro]", help="Bind a node folder into the guest.")
@click.option("--shared", metavar="DIR", help="The NAS folder on the node, bound at /srv/lane-shared.")
@click.option("--authorized-key", "authorized_key", type=click.Path(dir_okay=False, exists=True), required=True,
              help="Public key file allowed to log in as lane and root.")
@click.option("--lxcpath", default=None, help="Absolute lxcpath on the node (default /var/lib/lxc, read at boot).")
@click.option("--cache", default=None, help="Image cache on the node (default /var/lib/nev-lxc).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Where the lane's host key and known_hosts line are kept (default under NEV_STATE_DIR).")
@click.option("--vmid", type=int, help="pct: the guest id.")
@click.option("--gateway", help="pct: the guest's default gateway.")
@click.option("--storage", default="local-lvm", show_default=True, help="pct: storage of the root disk.")
@click.option("--dry-run", "print_only", is_flag=True,
              help="pct: print the command lines, run nothing.")
@click.option("--print", "print_legacy", is_flag=True, hidden=True)     # --dry-run's old name
def create(backend: str, name: str, node: str, addr: str, bridge: str | None, cpus: int, memory_gb: int,
           disk_gb: int, binds: tuple[str, ...], shared: str | None, authorized_key: str, lxcpath: str | None,
           cache: str | None, out_dir: str | None, vmid: int | None, gateway: str | None, storage: str,
           print_only: bool, print_legacy: bool) -> int:
    """Create a lane as an unprivileged LXC guest started at node boot (lxc on a Debian host, pct on Proxmox)."""
    from pathlib import Path

    from lanes import create as cr
    from lanes import create_lxc as crl
    from lanes import create_pct as crp
    from lanes.base import settings
    from lanes.base.errors import UsageError

    print_only = print_only or print_legacy
    all_binds = [cr.Bind.parse(b) for b in binds]
    if shared:
        all_binds.append(cr.Bind(cr.check_abs(shared, "--shared"), "/srv/lane-shared"))
    keys = Path(authorized_key).read_text()
    if backend == "pct":
        if vmid is None:
            raise UsageError("--backend pct needs --vmid (the Proxmox guest id)")
        lane = crp.PctLane(vmid=vmid, name=name, addr=addr, gateway=gateway, bridge=bridge or "vmbr0", cpus=cpus,
                          memory_gb=memory_gb, disk_gb=disk_gb, storage=storage, binds=tuple(all_binds))
        return crp.run_create_pct(None if print_only else _node(node), lane, keys)
    if not bridge:
        raise UsageError("--backend lxc needs --bridge (the node's bridge the guest joins)")
    lane_x = crl.LxcLane(name=name, bridge=bridge, addr=addr, cpus=cpus, memory_gb=memory_gb, disk_gb=disk_gb,
                        lxcpath=lxcpath or cr.LXCPATH, cache=cache or cr.cache(), binds=tuple(all_binds))
    state = settings.get_path(settings.STATE_DIR)
    out = Path(out_dir) if out_dir else (state or Path(".")) / "lanes" / name
    return crl.run_create_lxc(_node(node), lane_x, keys, out)


def _node(spec: str):  # type: ignore[no-untyped-def]
    """A node to run scripts on; a remote one through the jump host (NEV_LANE_JUMP or the
    lanes file's `jump`), as on the real rig."""
    from lanes import lanesfile
    from lanes.hostexec import LOCAL, Node

    return Node(spec, jump=None if spec == LOCAL else lanesfile.default_jump())


@lane.command("destroy")
@click.option("--backend", type=click.Choice(["lxc", "pct"]), required=True)
@click.option("--name", help="lxc: the container name.")
@click.option("--vmid", type=int, help="pct: the guest id.")
@click.option("--node", default="local", show_default=True, help="`local` or [root@]host[:port].")
@click.option("--lxcpath", default=None, help="Absolute lxcpath on the node (default /var/lib/lxc).")
@click.option("--dry-run", "print_only", is_flag=True,
              help="pct: print the command lines, run nothing.")
@click.option("--print", "print_legacy", is_flag=True, hidden=True)     # --dry-run's old name
def destroy(backend: str, name: str | None, vmid: int | None, node: str, lxcpath: str | None,
            print_only: bool, print_legacy: bool) -> int:
    """Stop and remove a lane guest and everything it held on the node (its image stays cached)."""
    from lanes import create as cr
    from lanes import create_lxc as crl
    from lanes import create_pct as crp
    from lanes.base.errors import UsageError

    print_only = print_only or print_legacy
    if backend == "pct":
        if vmid is None:
            raise UsageError("--backend pct needs --vmid")
        cmds = crp.pct_destroy_commands(vmid)
        if print_only:
            for c in cmds:
                click.echo(c)
            return 0
        _node(node).run("set -eu\n" + "\n".join(cmds) + "\n", what=f"pct destroy {vmid}")
        return 0
    if not name:
        raise UsageError("--backend lxc needs --name")
    for line in crl.destroy_lxc(_node(node), name, lxcpath or cr.LXCPATH):
        click.echo(line)
    return 0
