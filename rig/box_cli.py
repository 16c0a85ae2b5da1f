"""`nev box ...`: the rig-in-a-box (a whole rig of real parts on this machine)."""

from __future__ import annotations

import shlex

import click

from lanes.base.ui import emit_json, info


def _box():
    from rig.box import Box

    return Box.from_settings()


def _up_box():
    """The box a reading command means, from any folder (the registry when NEV_BOX_DIR is unset)."""
    from rig.box import Box

    return Box.find()


@click.group("box")
def box() -> None:
    """The rig-in-a-box: up, down, status, env, shape, demo.

    Named from NEV_BOX_NAME (<= 6 characters), addressed from NEV_BOX_NET (a /24 in
    198.18.0.0/15), kept in NEV_BOX_DIR/<name>. Needs root (network namespaces).
    """


@box.command("up")
@click.option("--lanes", type=int, default=None, help="Number of lanes (default: as recorded, else 2).")
def up(lanes: int | None) -> int:
    """Build (or repair) the box, idempotently; prints the time it took."""
    b = _box()
    r = b.bring_up(lanes)
    if r.changed:           # each change was said as it happened
        info(f"box {b.name} is up ({len(r.info.lanes)} lanes, net {b.net}.0/24) in {r.seconds:.1f} s")
    else:
        info(f"box {b.name} was already up; nothing changed ({r.seconds:.1f} s)")
    info('point nev at it: eval "$(nev box env)"')
    return 0


@box.command("down")
def down() -> int:
    """Stop and remove everything the box made (also a box whose processes are gone)."""
    b = _box()
    done = b.down()
    for line in done:
        info(f"  {line}")
    info(f"box {b.name} is down" + ("" if done else " (nothing of it was left)"))
    return 0


@box.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(as_json: bool) -> int:
    """Each host and service: up or not, with addresses. Exits 1 when something is down."""
    from rig.box.status import rows

    b = _up_box()
    table = rows(b)
    if as_json:
        emit_json(table)
    else:
        for r in table:
            click.echo(f"{r['host']:<9} {r['addr']:<15} {r['what']:<22} {'up' if r['up'] else 'DOWN'}"
                       + (f"  {r['detail']}" if r.get("detail") else ""))
    return 0 if all(r["up"] for r in table) else 1


@box.command("env")
def env() -> int:
    """Print the export lines that point nev at the box: eval "$(nev box env)", from any folder.

    The box: NEV_BOX_DIR/NEV_BOX_NAME when NEV_BOX_DIR is set; else the one the machine's registry
    (NEV_BOX_REGISTRY) lists by NEV_BOX_NAME, or the only box up. The lines: the lanes, keys and
    declaration files, the forge and gateway through the forwards, the rig's own inventory
    snapshot and Dagu runs (lane 0), and a git credential helper for the forge's forward (it
    reads the token file; the token is never printed)."""
    b = _up_box()
    for k, v in b.shell_env(b.up_state()).items():   # from what the box holds now
        click.echo(f"export {k}={shlex.quote(v)}")
    return 0


@box.command("shape")
@click.argument("lane")
@click.argument("off", required=False)
@click.option("--up", "up_kbit", type=int, help="Upload rate (of the lane, or of the dev box for `outside`), kbit/s.")
@click.option("--down", "down_kbit", type=int, help="Download rate, kbit/s.")
def shape(lane: str, off: str | None, up_kbit: int | None, down_kbit: int | None) -> int:
    """Slow a link with tbf: `shape lane0 --up 156 --down 3640`, `shape outside ...` (the dev
    box's uplink to the jump host, as on the rig), or `shape lane0 off`."""
    from rig.box.shape import shape as do_shape

    info(do_shape(_up_box().info(), lane, off, up_kbit, down_kbit))
    return 0


@box.command("demo")
@click.option("--keep", is_flag=True, help="Leave the box up at the end, for exploring (else `nev box down`).")
@click.option("--cases", type=int, default=200, show_default=True, help="Oracle cases of the demo's corpus.")
def demo(keep: bool, cases: int) -> int:
    """Run the whole mission end to end on the box: one line per step, then a summary.

    Box NEV_BOX_NAME (default demo) on NEV_BOX_NET (default 198.18.77). After a failed step the
    later ones do not run, except the last; exit 0 only when every step ran and passed.
    """
    from rig.box.demo.steps import Options, run

    return run(Options(keep=keep, cases=cases))
