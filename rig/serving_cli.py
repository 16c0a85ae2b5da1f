"""`nev rig drain|stop|start|restart|drift|provision-sudo`: parses arguments and dispatches to rig.serving."""

from __future__ import annotations

import click

HELP = {
    "drain": """Take ROLE[/REPLICA] out of HAProxy (drain), wait for its calls in flight, then stop it.

    Drain through HAProxy's runtime API (no config edit, no reload), wait until the server has
    no session or the grace is over (the calls still in flight are cut and counted), stop the
    unit, put the server in maintenance.""",
    "stop": """Put ROLE[/REPLICA] in maintenance in HAProxy, then stop its unit (calls in flight are cut).""",
    "start": """Start ROLE[/REPLICA]'s unit, wait for its health, put it back to ready, check a real completion.""",
    "restart": """Drain and stop ROLE[/REPLICA], then start it again (drain's steps, then start's).""",
}
TAIL = """

    One line per step; a change-log entry (who, what, when, result) in the rig notes. A stop
    that would leave an alias with no ready replica is refused unless --force. A pair starts and
    stops only as one (naming one half is refused). Exits 1 naming the step that failed."""


# The options each verb takes: --force where a replica is stopped, --grace where calls are drained,
# --probe-timeout where one is started (`nev rig start --help` offers no --force or --grace).
OPTIONS = {"drain": {"force", "grace"}, "stop": {"force"}, "start": {"probe_timeout"},
           "restart": {"force", "grace", "probe_timeout"}}
GRACE_S = PROBE_S = 60.0


def _make(verb: str) -> click.Command:
    no_force = (" A stop\n    that would leave an alias with no ready replica is refused "
                "unless --force.")
    tail = TAIL if "force" in OPTIONS[verb] else TAIL.replace(no_force, "")
    @click.command(verb, help=HELP[verb] + tail)
    @click.argument("spec", metavar="ROLE[/REPLICA]")
    @click.option("--dry-run", is_flag=True, help="Print the steps; change nothing.")
    @click.option("--force", is_flag=True, help="Stop even the last ready replica of an alias.")
    @click.option("--grace", type=click.FloatRange(min=0), default=GRACE_S, show_default=True,
                  help="Seconds a drain waits for calls in flight before it stops the replica.")
    @click.option("--probe-timeout", type=click.FloatRange(min=1), default=PROBE_S,
                  show_default=True,
                  help="Seconds the completion through the gateway may take after a start.")
    def cmd(spec: str, dry_run: bool, force: bool = False, grace: float = GRACE_S,
            probe_timeout: float = PROBE_S) -> int:
        from lanes.base.mask import known_secrets, mask
        from rig import rigfile
        from rig.serving.actions import run_verb
        from rig.snapshot.context import notes_dir

        def say(line: str) -> None:
            click.echo(mask(line, extra=known_secrets()))

        return run_verb(verb, spec, rigfile.load(rigfile.default_path()), notes_dir(), say, grace=grace,
                        force=force, dry_run=dry_run, probe_timeout=probe_timeout)

    cmd.params = [p for p in cmd.params if p.name in {"spec", "dry_run", *OPTIONS[verb]}]
    return cmd


COMMANDS = [_make(v) for v in ("drain", "stop", "start", "restart")]


@click.command("drift")
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
@click.option("--fix", is_flag=True, help="Regenerate the gateway's model list and limits from the declaration and put it "
              "in place (snapshot first; validate, atomic move, reload, health check, rolled back on failure).")
def drift(as_json: bool, fix: bool) -> int:
    """Compare the gateway, HAProxy and bench/folknet.json; one line per difference.

    Reads every model the gateway serves and its limits (with NEV_GATEWAY_ADMIN_KEY_FILE),
    HAProxy's server lines through its runtime API and the gateway's keys file over SSH. Exits 1 when anything
    differs. With --fix, the gateway's model list is regenerated and applied first; what is
    left is printed after it.
    """
    from bench import folknet
    from lanes.base.mask import known_secrets, mask
    from lanes.base.ui import emit_json
    from rig import rigfile
    from rig.serving import drift as dr

    rig_file = rigfile.load(rigfile.default_path())
    declared = folknet.load(folknet.default_path())
    fixed = 0
    if fix:
        from rig.serving import fix as fx
        from rig.snapshot.context import Context, notes_dir
        from rig.snapshot.record import take

        def say(line: str) -> None:
            click.echo(mask(line, extra=known_secrets()), err=as_json)

        role = fx.gateway_role(rig_file).name

        def snapshot(label: str) -> None:
            take(Context.load(), label, (role,), say)

        fixed = fx.fix(rig_file, declared, notes_dir(), say, snapshot)
    diffs = dr.compare(declared, rig_file.serving, dr.gather(rig_file, dr.served_models(), dr.served_limits()))
    if as_json:
        emit_json([d.to_json() for d in diffs])
    else:
        for d in diffs:
            click.echo(d.message)
        if not diffs:
            click.echo("no drift: the gateway, HAProxy and the declaration agree")
    return 1 if diffs or fixed else 0


COMMANDS.append(drift)


@click.command("provision-sudo")
@click.argument("role", metavar="ROLE")
@click.option("--dry-run", is_flag=True, help="Print the drop-in and run visudo -cf on it on the hosts; replace nothing.")
def provision_sudo(role: str, dry_run: bool) -> int:
    """Install ROLE's sudoers drop-in: its admin accounts may run exactly their units' commands.

    For the replicas with "sudo": true: one line per admin account allowing the start, stop and
    status commands exactly as the rig file gives them (no wildcard), as root, without a password.
    Snapshot first (the undo is printed), then /etc/sudoers.d/nev-serving-ROLE written beside its
    place as root:root 0440, checked with visudo -cf, moved into place atomically and checked
    again with visudo -c; a file visudo refuses is never installed. Exits 1 naming the step that
    failed or the command sudo cannot allow exactly, 2 for an unknown role.
    """
    from lanes.base.mask import known_secrets, mask
    from rig import rigfile
    from rig.serving import sudoers
    from rig.serving.provision import provision
    from rig.snapshot.context import Context, notes_dir
    from rig.snapshot.record import take

    def say(line: str) -> None:
        click.echo(mask(line, extra=known_secrets()))

    def snapshot(label: str) -> None:
        take(Context.load(), label, (sudoers.role_name(role),), say)

    return provision(rigfile.load(rigfile.default_path()), role, notes_dir(), say, snapshot, dry_run=dry_run)


COMMANDS.append(provision_sudo)
