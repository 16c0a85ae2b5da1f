"""Generate docs/settings.md from the settings registry and docs/exit-codes.md from the exit-code enum
(one source of truth each): `python -m rig.docgen > docs/settings.md`,
`python -m rig.docgen exit-codes > docs/exit-codes.md`."""

from __future__ import annotations

import sys

from lanes.base import settings
from lanes.base.exitcodes import COMMANDS, SHARED, Exit

HEADER = """# Settings and files

Every setting is an environment variable `NEV_*`; when it is unset, the legacy
`GENERA_*` name is read (one helper, `lanes.base.settings.get`, does this everywhere).
`nev settings` prints each one's value and where it came from, secrets masked (a secret setting
whole, any other value through `lanes.base.mask`: a credential inside a URL becomes `***`), under
a header row; `nev settings PATTERN` keeps the settings whose name or help holds PATTERN (or whose
name matches it as a glob, `nev settings 'NEV_LANE_*'`); a value longer than its column ends in
`...` (`--json` has it whole). Sizes are binary: GiB and MiB (settings named `*_GB`/`*_MB` too).
This page is generated from `lanes/base/settings.py` (`python -m rig.docgen > docs/settings.md`).

| variable | legacy | default | what |
|---|---|---|---|
"""

FILES = """
## Files

| file | committed | what |
|---|---|---|
| `tracks.json` | yes | `verify` (the gate command), `landChecks`, `protected` globs, `specWatch` (`pollEnv`, `landScript`, `lanes.tool`) |
| `bench/folknet.json` | yes | declared model aliases: pool, `max_inflight` and optional `rpm`/`tpm` (enforced at the gateway, docs/serving.md), provider, tier, `retired` date, allowed keys; `providers` allowed |
| `bench/lane.local.json` | no (gitignored; example `bench/lane.example.json`) | `lanes[]` (`ssh`, `root`, `name`), `git_url`, `nas`, `primary` |
| `rig/rig.local.json` | no (gitignored; example `rig/rig.example.json`) | `roles` (hosts, files, commands, validate, reload, health, masks, ssh_key), `jump`, `known_hosts`, `ssh_key`, `hosts` (a host's own ssh_key), `seeds`, `forwards` (local_port, target, check: [forwards.md](forwards.md)), `notify` (webhook or webhook_file, rig, format: [notify.md](notify.md)) |

Committed files name hosts by role and class, never by hostname, address or
account. A malformed file gets one line naming the file, the field and the
problem, and exit 1. Every JSON and JSON Lines file nev reads, state and declarations alike,
goes through one reader (`lanes.base.jsonfile.load`; the bridge's reads too, through
`crates_bridge.errors.load_json`): a folder, FIFO or device in a file's place, a file past 64 MiB, bytes
that are not UTF-8, nesting past 64 levels, integers past 2^63, floats past a double, NaN and
lone surrogates are each that one line too, and the file is never changed by the reading. In
`tracks.json`, `bench/folknet.json` (top level and each alias) and the rig file (top level, each
role and file), a key nev does not know is refused, naming it and the close known key
(`landCheck`: did you mean `landChecks`?). The lanes file refuses them the same way.

The lanes, rig and folknet files have JSON Schemas, [lanes.schema.json](lanes.schema.json),
[rig.schema.json](rig.schema.json) and [folknet.schema.json](folknet.schema.json): nev's readers
take the keys each object may hold from them, and an editor validates a file that names its
schema (`"$schema": "https://nev.invalid/schemas/lanes.schema.json"`, or the file's path, in the
editor's JSON schema settings). The config file is TOML: [the config file](config.md).

Secrets (forge token, gateway keys, Dagu password) never appear in argv, a
committed file, a log line, a Dagu run parameter or an error message: every
log and error line goes through `lanes.base.mask.mask`.
"""


def render() -> str:
    rows = []
    for s in settings.all_settings():
        default = f"`{s.default}`" if s.default is not None else "—"
        what = s.help + (" **(secret)**" if s.secret else "")
        rows.append(f"| `{s.name}` | `{s.legacy}` | {default} | {what} |")
    return HEADER + "\n".join(rows) + "\n" + FILES


EXIT_HEADER = """# Exit codes

Each code means one thing, except where a command defines a code itself (the last table: `nev
land`'s 2 is the reference rig's rebase conflict). Errors print one line on stderr, `nev: ...`,
naming the file, setting or host at fault and what to do; a usage error too (`nev: No such option
'--bogus'; see `nev lane run --help``). Each command's `--help` ends with the codes it can return.
This page is generated from `lanes/base/exitcodes.py` (`python -m rig.docgen exit-codes >
docs/exit-codes.md`).

| code | name | meaning |
|---|---|---|
"""

EXIT_FOOTER = """
`nev lane run` and `nev lane on` otherwise exit with the remote command's status, `nev sandbox
exec` with its command's, `nev dagu watch --once --step` with the step's (see [lanes](lanes.md)).

## Whose status is it: nev's, or the command's

A gate passes the remote command's status through, so the same number can be nev's own
(3: no lane answered, nothing ran) or the command's (`make test` exiting 3). Set
`NEV_STATUS_FILE` to a file and every nev command rewrites it as it exits with one line that
says whose the status is:

| line | meaning |
|---|---|
| `command N` | the remote command ran and exited N (`nev lane run`, `nev lane on`) |
| `own N NAME` | nev's own code N, NAME its name above (`own 3 UNAVAILABLE`) |

```sh
NEV_STATUS_FILE=/tmp/gate.status nev lane run ~/engine make test
read -r whose status name < /tmp/gate.status
if [ "$whose" = command ]; then echo "the tests ran and exited $status"
elif [ "$status" = 3 ]; then echo "cannot reach the rig: retry later (the cause is on stderr)"
else echo "refused ($name): see the line on stderr"
fi
```

The documented codes stay as they are (3 no lane answered, 4 disk short): scripts that read
only `$?` keep working; the status line is what tells the two 3s apart.

## "Cannot reach the rig"

Every command that connects (`nev lane run|on|list|install|...`, `nev dagu ...`, `nev rig status
--lane N`, `nev rig services status`, `nev rig forward up`, `nev job poll`'s forge) says why on
one line, with the same words, and exits 3. The causes (`lanes.base.sshfail`), each named with
the hop it happened at (the jump host, or the host behind it):

| cause | next step |
|---|---|
| name does not resolve | check the host name (lanes file, rig file, NEV_LANE_JUMP) and DNS |
| connection refused | nothing listens there: the port, and that sshd runs on the host |
| timed out | the host does not answer: is it up and reachable from here |
| host key not pinned | `nev rig trust HOST` (NEV_KNOWN_HOSTS names the file) |
| host key changed | re-pin (`nev rig trust HOST`) only if the host was really rebuilt |
| key file missing or unreadable | NEV_SSH_KEY (or the rig file's ssh_key) |
| login refused | the key's public half in the user's authorized_keys |
| the jump host cannot connect to it | the host's address and port, and that it is up |

`nev -v ...` shows the exact ssh command (for a paramiko connection, the OpenSSH command that
takes the same route: `by hand: ssh ...`). `nev doctor` checks every hop in one go.
"""


def render_exit_codes() -> str:
    rows = [f"| {int(e)} | `{e.name}` | {e.meaning} |" for e in Exit]
    out = EXIT_HEADER + "\n".join(rows) + "\n"
    out += "\n## What a code stands for, per command\n\n| code | command | there |\n|---|---|---|\n"
    out += "".join(f"| {int(e)} | {cmd} | {what} |\n" for e in Exit for cmd, what in e.where)
    shared = ", ".join(str(int(e)) for e in SHARED)
    out += (f"\n## The codes each command can return\n\nEvery command can return the shared codes "
            f"{shared}; a usage error exits 2, except where a command defines 2 itself. "
            "Beyond those:\n\n"
            "| command | codes beyond the shared ones | defined by the command itself | "
            "a usage error exits | otherwise |\n|---|---|---|---|---|\n")
    for path, c in sorted(COMMANDS.items()):
        extra = ", ".join(str(int(e)) for e in c.extra) or "-"
        own = "; ".join(f"{n}: {meaning}" for n, _, meaning in c.own) or "-"
        out += f"| `nev {path}` | {extra} | {own} | {c.usage} | {c.passes or '-'} |\n"
    return out + EXIT_FOOTER


PAGES = {"settings": render, "exit-codes": render_exit_codes}


if __name__ == "__main__":
    page = sys.argv[1] if len(sys.argv) > 1 else "settings"
    if page not in PAGES:
        sys.exit(f"usage: python -m rig.docgen [{'|'.join(PAGES)}]")
    print(PAGES[page](), end="")
