"""The gate's command line, `nev lane run|on [OPTIONS] WORKTREE COMMAND...`: its one parser and
its one call into `lanes.gate`. The parser is the stdlib's alone (os and stat, loaded already),
so the fast path in `rig/cli.py` reads a gate before the rest of nev loads; the click commands of
`lanes/cli.py` parse with it too (`GateCommand`), and declare the same options only for --help.

Read as click reads a command that takes no options after its first argument: options until the
first other word (or `--`), `--opt value` or `--opt=value` (a value may start with "-"), the last
`--lane` counts and `--pull` repeats; then WORKTREE (a file or an unreadable folder is refused;
one that does not exist is the gate's to say) and COMMAND, one word at least, taken as it is.

Anything wrong is a `Usage` (exit 2), and help (`-h`, `--help` among the options) is `Help`: the
fast path leaves both to the click commands, which say them in click's words, so a usage error
reads the same whichever way a gate came in.
"""

from __future__ import annotations

import os
import stat

# The options of each verb and whether each takes a value (`lanes/cli.py` declares the same for
# --help; tests/test_lane_gateargs.py keeps the two the same). The help options are nev's
# (`help_option_names` in rig/commands.py, which every command inherits).
OPTIONS: dict[str, dict[str, bool]] = {
    "run": {"--lane": True, "--pull": True, "--sandbox": False},
    "on": {"--lane": True, "--lane-only": False, "--pull": True, "--sandbox": False},
}
HELP = ("-h", "--help")


class GateArgs:
    """One gate as asked: `sub` is "run" or "on"; `command` as given (`argv` is as it runs). A
    plain class: a NamedTuple of these annotations takes ~2 ms to make (a dataclass more, with its
    import), all before the gate's client can start."""

    __slots__ = ("sub", "worktree", "command", "lane_index", "lane_only", "pull", "sandbox")

    def __init__(self, sub: str, worktree: str, command: tuple[str, ...],
                 lane_index: int | None = None, lane_only: bool = False,
                 pull: tuple[str, ...] = (), sandbox: bool = False) -> None:
        self.sub, self.worktree, self.command = sub, worktree, command
        self.lane_index, self.lane_only = lane_index, lane_only
        self.pull, self.sandbox = pull, sandbox

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GateArgs) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return "GateArgs(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"

    def argv(self) -> list[str]:
        """COMMAND as given, or (asked with --sandbox) as a verify in the sandbox of wherever it
        runs: a person's own gate runs as the person unless they ask (docs/sandbox.md)."""
        if self.sandbox:
            return ["nev", "sandbox", "exec", "--", *self.command]
        return list(self.command)


class Usage(Exception):
    """A gate's command line that is not one (exit 2). `kind` is how click names it:
    "no-such-option" (`name` the option as given), "option" (an option used wrongly), "value" (a
    bad value of the option or argument `name`), "missing" (the argument `name`); `message` is
    click's words for the last three (`lanes.cli.GateCommand` hands them to click)."""

    def __init__(self, kind: str, name: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.name, self.message = kind, name, message


class Help(Exception):
    """`-h` or `--help` among the options (and nothing click would refuse before it)."""


def parse(sub: str, args: list[str]) -> GateArgs:
    """The words after `nev lane run|on` (`sub`) as a gate; Usage or Help otherwise."""
    values, flags, i = _options(OPTIONS[sub], args)
    if "--help" in flags:
        raise Help()
    lane_index = None
    if "--lane" in values:
        raw = values["--lane"][-1]
        try:
            lane_index = int(raw)
        except ValueError:
            raise Usage("value", "--lane", f"{raw!r} is not a valid integer.") from None
    rest = args[i:]
    if not rest:
        raise Usage("missing", "worktree", "Missing argument 'WORKTREE'.")
    _check_folder(rest[0])
    command = _command(sub, rest[1:])
    if not command:
        raise Usage("missing", "command", "Missing argument 'COMMAND...'.")
    return GateArgs(sub, rest[0], tuple(command), lane_index=lane_index,
                    lane_only="--lane-only" in flags, pull=tuple(values.get("--pull", ())),
                    sandbox="--sandbox" in flags)


def _command(sub: str, words: list[str]) -> list[str]:
    """COMMAND: the words after WORKTREE. One of nev's own options right there (`nev lane run
    ~/engine --lane 0 true`) would run on the lane as the command: refused, with the fix; `--`
    first sends a command that starts with such a word on purpose."""
    if words[:1] == ["--"]:
        return words[1:]
    name = words[0].partition("=")[0] if words else ""
    if name in OPTIONS[sub]:
        raise Usage("option", name, f"{name} comes after WORKTREE, where it would run on the lane "
                    f"as the command; put nev's options before WORKTREE (nev lane {sub} {name} "
                    "... WORKTREE COMMAND...), or `--` before a command that starts with it.")
    return words


def _options(options: dict[str, bool], args: list[str]
             ) -> tuple[dict[str, list[str]], set[str], int]:
    """The options that lead `args`: each valued option's values in order, the flags given (help
    as "--help"), and the index of the first argument."""
    values: dict[str, list[str]] = {}
    flags: set[str] = set()
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return values, flags, i + 1
        if not a.startswith("-") or a == "-":
            break
        i += 1
        name, eq, value = a.partition("=")
        if options.get(name):
            if not eq:
                if i >= len(args):
                    raise Usage("option", name, f"Option {name!r} requires an argument.")
                value, i = args[i], i + 1
            values.setdefault(name, []).append(value)
        elif name in options or name == "--help":
            if eq:
                raise Usage("option", name, f"Option {name!r} does not take a value.")
            flags.add(name)
        elif a.startswith("--"):
            raise Usage("no-such-option", name, f"No such option {name!r}.")
        else:
            for ch in a[1:]:                  # one-letter options run together, as click reads them
                if f"-{ch}" not in HELP:
                    raise Usage("no-such-option", f"-{ch}", f"No such option '-{ch}'.")
            flags.add("--help")
    return values, flags, i


def _check_folder(path: str) -> None:
    """WORKTREE as click's `Path(file_okay=False)` takes it: a file or an unreadable folder is
    refused; a path that does not exist passes (the gate says so, exit 1)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if stat.S_ISREG(st.st_mode):
        raise Usage("value", "worktree", f"Directory {shown!r} is a file.")
    if not os.access(path, os.R_OK):
        raise Usage("value", "worktree", f"Directory {shown!r} is not readable.")


def run(g: GateArgs) -> int:
    """The gate `g`, through `lanes.gate` (`run` is always lane-only): the one call both command
    lines make."""
    from pathlib import Path

    from lanes import gate

    worktree = Path(g.worktree)
    if g.sub == "run":
        return gate.run(worktree, g.argv(), lane_index=g.lane_index, lane_only=True, pull=g.pull)
    return gate.on(worktree, g.argv(), lane_only=g.lane_only, pull=g.pull, lane_index=g.lane_index)
