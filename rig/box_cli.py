"""`nev box ...`: the rig-in-a-box (a whole rig of real parts on this machine)."""

from __future__ import annotations

import click

from lanes.ui import not_built


@click.group("box")
def box() -> None:
    """The rig-in-a-box: up, down, status, env, shape, demo."""


@box.command("up")
@click.option("--lanes", type=int, default=2, show_default=True)
def up(lanes: int) -> None:
    """Build (or repair) the box, idempotently."""
    raise not_built("box up", 3)


@box.command("down")
def down() -> None:
    """Stop and remove everything the box made."""
    raise not_built("box down", 3)


@box.command("status")
def status() -> None:
    """Each host and service: up or not, with addresses."""
    raise not_built("box status", 3)


@box.command("env")
def env() -> None:
    """Print the export lines that point nev at the box."""
    raise not_built("box env", 3)


@box.command("demo")
@click.option("--keep", is_flag=True)
def demo(keep: bool) -> None:
    """Run the whole mission end to end on the box."""
    raise not_built("box demo", 15)
