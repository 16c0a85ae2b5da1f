"""`nev rig forward ...`: parses arguments and dispatches to rig.forward."""

from __future__ import annotations

import click


@click.group("forward")
def forward() -> None:
    """Local port forwards through the jump host (forge, gateway), each held up by a supervisor.

    Declared in the rig file's `forwards` (NEV_RIG_FILE); see docs/forwards.md.
    """


@forward.command("up")
@click.argument("names", nargs=-1)
@click.option("--timeout", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds to wait for each forward to answer its check.")
@click.option("--install", "install_", is_flag=True,
              help="Also add the @reboot crontab line that runs `nev rig forward up` (once).")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON afterwards, as `status --json` (all_up, forwards[]); the lines "
                   "go to stderr.")
def up(names: tuple[str, ...], timeout: float, install_: bool, as_json: bool) -> int:
    """Start a supervisor for each declared forward not running yet; wait until each answers.

    One line per forward: `NAME 127.0.0.1:PORT -> TARGET up`. Forwards already running are left
    as they are. Exits 1 naming each forward that did not come up and what ssh said.
    """
    from lanes.base.ui import emit_json
    from rig import rigfile
    from rig.forward import control

    def err(line: str) -> None:
        click.echo(line, err=True)

    say = err if as_json else click.echo
    rig = control.load(rigfile.default_path())
    if install_:
        control.install(rig.path, True, say)
    rc = control.up(rig, names, timeout, say, err)
    if as_json:
        rows = control.status(rig, names)
        emit_json({"all_up": all(r.up for r in rows), "forwards": [r.to_json() for r in rows]})
    return rc


@forward.command("down")
@click.argument("names", nargs=-1)
@click.option("--uninstall", is_flag=True, help="Also remove the @reboot crontab line (only that line).")
def down(names: tuple[str, ...], uninstall: bool) -> int:
    """Stop the supervisors and their ssh clients (by recorded PID and start time); drop their state."""
    from rig import rigfile
    from rig.forward import control

    if uninstall:
        control.install(rigfile.default_path(), False, click.echo)
    return control.down(names, click.echo)


@forward.command("status")
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object (all_up, forwards[]).")
def status(names: tuple[str, ...], as_json: bool) -> int:
    """Check each forward with a real request: name, local port, target, up/down, since, restarts.

    Exits 0 when every forward answers, 1 otherwise.
    """
    from lanes.base.ui import emit_json
    from rig import rigfile
    from rig.forward import control

    rows = control.status(control.load(rigfile.default_path()), names)
    all_up = all(r.up for r in rows)
    if as_json:
        emit_json({"all_up": all_up, "forwards": [r.to_json() for r in rows]})
    else:
        click.echo(control.render(rows))
    return 0 if all_up else 1


@forward.command("supervise", hidden=True)
@click.argument("name")
def supervise(name: str) -> int:
    """Run one forward's supervisor in the foreground (what `up` starts, detached)."""
    from rig import rigfile
    from rig.forward import control
    from rig.forward.supervise import Supervisor

    rig = control.load(rigfile.default_path())
    return Supervisor(rig, control.select(rig, [name])[0]).run()
