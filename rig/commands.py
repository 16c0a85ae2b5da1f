"""The `nev` command tree (click): one group per package; every known error becomes one line and
an exit code. The entry point is `rig/cli.py`, which loads this after a gate's channel is started."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from importlib import import_module
from types import ModuleType

import click

from lanes.base.exitcodes import Exit, codes_of, help_epilog
from rig.entry import guarded


def _lanes() -> ModuleType:
    """`lanes.cli`, with `nev lane writer` added: the lane path is lanes', the declared harness
    (tracks.json) jobs'; jobs' command line is imported only when `writer` is named."""
    cli = import_module("lanes.cli")
    cli.lane.loaders["writer"] = ("Writers on a lane: start one in a worktree's lane copy, fetch...",
                                  lambda: _shared(import_module("jobs.cli").writer, "lane writer"))
    return cli


def _jobs() -> ModuleType:
    """`jobs.cli`, with the serving tier's mending added to the tick (`jobs.tick.PARTS`): the
    tick is jobs', starting a dead HAProxy or serving unit the rig's."""
    cli = import_module("jobs.cli")
    tick = import_module("jobs.tick")
    part = import_module("rig.serving").mend_tick
    if part not in tick.PARTS:
        tick.PARTS.append(part)
    return cli


def _bench() -> ModuleType:
    """`bench.cli`, with `nev oracle suites` and `nev oracle suite` added: the oracle is bench's,
    the suites' declaration (tracks.json) jobs'."""
    cli = import_module("bench.cli")
    suites_cli = import_module("jobs.suites_cli")
    for group in (suites_cli.suites, suites_cli.suite):
        cli.oracle.add_command(group)
    return cli


# Each group by the CLI module that holds it (under the group's own name), imported only when the
# group is named: `nev lane run` starts without the other packages' command lines. The imports are
# literal calls, so the import rules (tests/test_architecture.py) see them.
CLI_MODULES: dict[str, Callable[[], ModuleType]] = {
    "lanes": _lanes, "jobs": _jobs,
    "dagu": lambda: import_module("dagu.cli"), "rig": lambda: import_module("rig.rig_cli"),
    "box": lambda: import_module("rig.box_cli"), "bench": _bench,
    "provenance": lambda: import_module("jobs.provenance_cli"),
    "first": lambda: import_module("rig.first_cli")}
GROUPS: dict[str, Callable[[], ModuleType]] = {
    group: CLI_MODULES[module] for group, module in (
        ("lane", "lanes"), ("job", "jobs"), ("land", "jobs"), ("dagu", "dagu"), ("rig", "rig"), ("box", "box"),
        ("batch", "bench"), ("oracle", "bench"), ("floors", "bench"), ("scores", "bench"), ("ledger", "bench"),
        ("sandbox", "jobs"), ("provenance", "provenance"),
        ("config", "first"), ("doctor", "first"), ("completion", "first"))}


class _Nev(click.Group):
    """The `nev` group: the package groups of GROUPS are added when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *GROUPS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in GROUPS:
            module = GROUPS[cmd_name]()
            group = getattr(module, cmd_name, None) or getattr(module, f"{cmd_name}_group")
            self.add_command(_shared(group, cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)


def _verbose(ctx: click.Context, param: click.Parameter, value: int) -> None:
    if value:
        logging.getLogger().setLevel(logging.DEBUG)


def _shared(cmd: click.Command, path: str) -> click.Command:
    """`cmd` and the commands under it with what every command has: its exit codes at the end of
    its --help (from `lanes.base.exitcodes.COMMANDS`) and `-v` after the group too (`nev lane -v
    list`, `nev lane list -v`; `nev lane run|on` take it before `run`, as their own parser passes
    what follows WORKTREE to COMMAND). A command loaded later by name (`nev lane writer`) gets it
    when loaded."""
    if getattr(cmd, "_nev_shared", False):
        return cmd
    cmd._nev_shared = True  # type: ignore[attr-defined]
    cmd.epilog = help_epilog(path)
    if not any("-v" in getattr(p, "opts", ()) for p in cmd.params) and not _gated(cmd):
        cmd.params.append(click.Option(["-v", "--verbose"], count=True, expose_value=False,
                                       callback=_verbose, help="Debug logging (as `nev -v`)."))
    for name, sub in getattr(cmd, "commands", {}).items():
        _shared(sub, f"{path} {name}".strip())
    return cmd


def _gated(cmd: click.Command) -> bool:
    """A command whose arguments another parser reads (`nev lane run|on`, `nev job step`)."""
    return not cmd.add_help_option or type(cmd).__name__ == "GateCommand"


@click.group(cls=_Nev, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "--version", package_name="nev", prog_name="nev")
@click.option("-v", "--verbose", count=True, help="Debug logging (commands run, masked).")
def cli(verbose: int) -> None:
    """nev: run the build-and-generation rig from a development box."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(name)s: %(message)s", stream=sys.stderr)


@cli.command("settings")
@click.argument("pattern", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (values whole).")
@click.option("--get", "get_name", metavar="NAME", help="Print NAME's value alone, as nev reads "
              "it (a path resolved), for a script; exit 1 when it has none. Never a secret's.")
def settings_cmd(pattern: str | None, as_json: bool, get_name: str | None) -> int:
    """Every NEV_* setting with its value and source; every settings file, checked.

    PATTERN (case-insensitive) keeps the settings whose name or help holds it, or whose name
    matches it as a glob (`nev settings 'NEV_LANE_*'`). A value longer than its column ends in
    `...`; --json has it whole. Exits 1 when a settings file that exists is malformed, a value
    is not what its setting takes (a number, a file that exists), or no setting matches PATTERN.
    """
    from lanes.base.ui import emit_json, info
    from rig.settings_cmd import check_files, describe, matches, one_value, table

    if get_name:
        click.echo(one_value(get_name))
        return Exit.OK

    rows, files = [r for r in describe() if matches(r, pattern)], check_files()
    if as_json:
        emit_json({"settings": rows, "files": files})
    else:
        if rows:
            for line in table(rows):
                click.echo(line)
        else:
            info(f"nev: no setting matches {pattern!r}; `nev settings` lists them all")
        click.echo("")
        for f in files:
            click.echo(f"{f['what']:<8} {f['file']}: {f['status']}" + (f" - {f['error']}" if "error" in f else ""))
    wrong = [str(r["problem"]) for r in rows if r.get("problem")]
    for line in wrong:
        info(f"nev: {line}; fix it (`nev settings` shows where it came from)")
    return 1 if any(f["status"] == "error" for f in files) or not rows or wrong else 0


def main(argv: list[str] | None = None) -> int:
    def call() -> int:
        try:
            rv = cli.main(args=argv, prog_name="nev", standalone_mode=False)
            return rv if isinstance(rv, int) else 0
        except click.exceptions.Abort:
            print("nev: interrupted", file=sys.stderr)
            return Exit.INTERRUPTED
        except click.exceptions.NoArgsIsHelpError as e:    # `nev`, `nev GROUP`: the help, as is
            assert e.ctx is not None
            click.echo(e.ctx.get_help())
            return Exit.OK
        except click.UsageError as e:
            return usage_error(e)
        except click.ClickException as e:
            e.show()
            return Exit.FAILED

    return guarded(call)


def usage_error(e: click.UsageError) -> int:
    """A usage error as one line, `nev: what; see `nev ... --help``, and its command's usage code
    (2; `nev land`, whose 2 is a rebase conflict, exits 1: not landed)."""
    from lanes.base.mask import mask

    path = e.ctx.command_path if e.ctx else "nev"
    what = " ".join(e.format_message().split()).rstrip(".")
    print(f"nev: {mask(what)}; see `{path} --help`", file=sys.stderr)
    return codes_of(path.removeprefix("nev").strip()).usage


_shared(cli, "")
