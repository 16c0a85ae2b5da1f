"""First contact with a rig: `nev config init`, `nev doctor`, `nev completion` (the command lines;
the work is in rig/config_cmd.py and rig/doctor.py)."""

from __future__ import annotations

import click

from lanes.base.exitcodes import Exit


@click.group("config")
def config() -> None:
    """nev's config file ($XDG_CONFIG_HOME/nev/config.toml): docs/config.md."""


@config.command("init")
def config_init() -> int:
    """Write a commented skeleton of the config file (the lanes, the jump host, the forge, the
    gateway, the NAS); never overwrites one that is there (exit 1)."""
    from rig import config_cmd

    p = config_cmd.init()
    click.echo(f"wrote {p}: fill it in, then `nev settings` and `nev doctor`")
    return Exit.OK


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: one object per check.")
def doctor(as_json: bool) -> int:
    """Walk every hop a gate and a job take, in order, one line per check: the config and its
    files; the jump host (name, port, pinned key, login); each lane through it (login, free disk,
    nev installed and current, toolchain, browsers, sandbox, NAS); the forge through its forward;
    the gateway with your key and each declared alias; Dagu; the inventory snapshot's age.

    Each check takes a few seconds at most. Exit 0 only when every check passes, else 1.
    """
    from lanes.base.ui import emit_json
    from rig import doctor as doc

    checks = doc.run(lambda c: None if as_json else click.echo(c.line()))
    failed = [c for c in checks if not c.ok]
    if as_json:
        emit_json([c.to_json() for c in checks])
    else:
        took = sum(c.seconds for c in checks)
        click.echo(f"{len(checks) - len(failed)} of {len(checks)} checks ok ({took:.1f} s)"
                   + (f"; first to mend: {failed[0].name}" if failed else ""))
    return Exit.FAILED if failed else Exit.OK


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> int:
    """Print the shell completion script of nev for SHELL: `eval "$(nev completion bash)"` (in
    ~/.bashrc), `nev completion fish > ~/.config/fish/completions/nev.fish`."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None
    root = click.get_current_context().find_root().command
    click.echo(cls(root, {}, "nev", "_NEV_COMPLETE").source())
    return Exit.OK
