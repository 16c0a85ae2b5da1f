"""The `nev` entry point (`nev = rig.cli:run`, `python -m rig.cli`): as little as possible before
the command tree (`rig/commands.py`, click) loads.

For `nev lane run|on` the first lane's SSH channel is started first (`lanes.ahead`): the client
connects through the jump host while the rest of nev is imported and the worktree is read, and
the gate then takes that channel. `cli`, `main` and the tables of `rig.commands` are its own.
"""

from __future__ import annotations

import sys
from typing import Any


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["lane"] and args[1:2] in (["run"], ["on"]):
        from lanes import ahead

        ahead.start(args[2:])
    from rig import commands

    return commands.main(args)


def run() -> None:
    sys.exit(main())


def __getattr__(name: str) -> Any:
    """`rig.cli.cli` and the rest of the command tree, loaded when asked for."""
    from rig import commands

    try:
        return getattr(commands, name)
    except AttributeError:
        raise AttributeError(f"module 'rig.cli' has no attribute {name!r}") from None


if __name__ == "__main__":
    run()
