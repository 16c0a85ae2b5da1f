"""Every exit code of `nev`, defined once: the number, what it means, and where a command group
gives it a narrower sense. `docs/exit-codes.md` is generated from this enum (`python -m rig.docgen
exit-codes > docs/exit-codes.md`).

Each code means one thing, except where a command defines a code itself (`COMMANDS`: `nev land`'s 2,
the reference rig's rebase conflict). `COMMANDS` says, per command, which codes it can return: the
shared ones (`SHARED`, every command) and its own; each command's `--help` lists them from there.
3 is "nothing ran: what the command needs is not available now; the same
request may succeed later": for the lane commands (and what runs through a lane: batches, floors,
the landing's gate) that is a build lane, for a job the inventory; the poller resends on it.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from enum import IntEnum


class Exit(IntEnum):
    """An exit code with its meaning (`meaning`) and, per command group, what it stands for (`where`)."""

    meaning: str
    where: tuple[tuple[str, str], ...]

    def __new__(cls, code: int, meaning: str, where: tuple[tuple[str, str], ...] = ()) -> Exit:
        obj = int.__new__(cls, code)
        obj._value_ = code
        obj.meaning = meaning
        obj.where = where
        return obj

    OK = 0, "done", (
        ("`nev job check inventory`", "the inventory is ready"),
        ("`nev oracle suite run`", "no change: the failures are exactly the expected ones"),
    )
    FAILED = 1, ("refused or failed, the reason on one line (stderr); also a malformed settings, state or "
                 "declaration file (not UTF-8, nested too deep, a folder in its place, a number out of range, "
                 "an unknown key, a bad field: the file and the field named, the file left as it is)"), (
        ("`nev land`", "not landed (the reason on one line)"),
        ("`nev land --reviewed-by`", "no person present: stdin or stdout is not a terminal, or the tick or "
                                     "a job stage runs it (`NEV_UNATTENDED`); nothing was done"),
        ("`nev job run`", "a stage failed"),
        ("`nev batch run`", "no version passed, or the kept files exist from an earlier batch (never rewritten)"),
        ("`nev floors check`", "a floor is broken"),
        ("`nev rig snapshots`", "a label is damaged (each named on stderr; the others listed)"),
        ("`nev rig snapshot`", "the label exists, or another `nev rig snapshot` of it just wrote it"),
        ("`nev job submit`", "another `nev job submit` of the same name is running"),
        ("`nev lane writer start`", "refused (a writer running, unfetched commits, the harness checkout "
         "with local changes or not able to fast-forward), or the writer ended within "
         "NEV_WRITER_SETTLE_S (its log's last lines shown)"),
        ("`nev oracle suite run`", "something changed: new failures or new passes against the "
         "suite's expectations (each listed)"),
    )
    USAGE = 2, ("usage error: an unknown option or command, a missing argument, or a bad value "
                "(a `--lane` no lane has, an unknown role); one line `nev: ...`")
    UNAVAILABLE = 3, (
        "nothing ran: what the command needs is not available now, or the rig cannot be "
        "reached; the same request may succeed later (once the cause on the line is mended). "
        "\"Cannot reach the rig\" is this code in every command that connects: an SSH hop "
        "failed (the line names the cause, one of: name does not resolve, connection refused, "
        "timed out, host key not pinned, host key changed, key file missing or unreadable, "
        "login refused, the jump host cannot connect to it; and whether it was the jump host "
        "or the host behind it), or the forge did not answer through its forward"), (
        ("`nev lane`, `nev batch run`, `nev floors`, `nev land`'s gate, `nev oracle suites fetch`, "
         "`nev oracle suite run`", "no build lane answered"),
        ("`nev lane list`", "no lane answered, or none is configured (the table, with each lane's "
         "cause, is printed all the same)"),
        ("`nev rig services status`", "a lane could not be reached (its cause on its line)"),
        ("`nev rig forward up`", "a forward did not come up (the jump host's cause on its line); "
         "what this call started is stopped"),
        ("`nev job poll`", "the forge did not answer (its forward down, the cause on the line); "
         "nothing changed"),
        ("`nev lane create`", "a running guest's config changed but the guest is busy (a process named "
         "in LANE_BUSY_COMMANDS); nothing changed"),
        ("`nev job run`, `nev job check inventory`",
         "the inventory is not ready (a not-run result is kept on the lane; `nev job poll` resends the job)"),
        ("`nev job status --follow`",
         "the job's lane did not answer or its runner is gone (or the job ended not run)"),
    )
    DISK_SHORT = 4, ("a lane's disk is short even after a sweep (names the lane index, free GB, the largest "
                     "copies)")
    PULL_REFUSED = 5, ("`nev lane run --pull`: the command ran (its status on the line) but a folder it pulled was "
                       "refused (a link out of it, a FIFO or device, a local symlink or `.git` on its way); "
                       "nothing of that folder was written")
    PUBLISH_FAILED = 7, "job: publishing the result to the forge failed (`nev job poll` resends the job)"
    STOPPED = 8, "job: stopped (SIGTERM/SIGINT, or the wall-clock limit)"
    UNMET = 9, "job: the requirements check failed (not resent)"
    REFUSED = 10, ("job: an inventory refusal that never clears by itself (model retired or undeclared, "
                   "provider not allowed; not resent)")
    NO_GROUND_TRUTH = 11, ("floors, scores: no three-browser ground truth, nothing scored: a corpus built with "
                           "fewer than Chromium, Firefox and WebKit, or a browser missing where the corpora are "
                           "built (each named)")
    BUDGET = 12, ("the budget bound: the next model call would have passed the run's or job's budget (tokens or "
                  "GPU-seconds), so it was not sent; the ledger line says which (`budget.bound`)"), (
        ("`nev batch run`", "no version passed before the budget bound (what was drawn was verified and recorded)"),
        ("`nev job run`", "a batch stage's budget bound (the job's budget, across its stages and resumes)"),
    )
    NO_SANDBOX = 13, ("the sandbox for model-written code cannot be built on this host (bubblewrap, user "
                      "namespaces or libseccomp missing, named); nothing ran (docs/sandbox.md)")
    MANIFEST_CHANGED = 14, ("`nev batch run --manifest FILE`: an input the run manifest pins no longer "
                            "holds (the spec text, the prompt prefix, an alias's model id, the corpus or "
                            "its browsers, the engine's commit, nev; the first named on one line); "
                            "nothing drawn (docs/batch.md)")
    INTERRUPTED = 130, "interrupted (SIGINT); a command running on a lane is stopped too"
    TERMINATED = 143, "terminated (SIGTERM); a command running on a lane is stopped too"
    CONNECTION_DROPPED = 255, ("`nev lane run`: the connection to the lane dropped mid-run (a second call "
                               "stops the command and removes the `.env` files)")


# Every command can return these: done, refused or failed (also a malformed settings file), a usage
# error, and an interrupt or SIGTERM.
SHARED: tuple[Exit, ...] = (Exit.OK, Exit.FAILED, Exit.USAGE, Exit.INTERRUPTED, Exit.TERMINATED)

# `nev land`'s 2 is the reference rig's rebase conflict: the branch must change first.
LAND_CONFLICT = 2

# A word or two per code for a command's --help (the page has the whole meaning).
SHORT: dict[int, str] = {
    0: "done", 1: "refused or failed", 2: "usage error", 3: "nothing ran, not available now",
    4: "lane disk short", 5: "a pulled folder refused", 7: "publish failed", 8: "stopped",
    9: "requirements unmet", 10: "inventory refusal that never clears", 11: "no ground truth",
    12: "budget bound", 13: "no sandbox here", 14: "a pinned input changed", 130: "interrupted",
    143: "terminated",
    255: "connection to the lane dropped",
}


@dataclass(frozen=True)
class Codes:
    """What one command can exit with, beyond SHARED: `extra` codes of the enum; `own` codes the
    command defines itself (number, a word or two for --help, the meaning; they replace the
    shared meaning); `usage` the code its usage errors exit with (2, unless the command defines 2
    itself); `passes` whose exit status it otherwise returns (a remote command's), else empty."""

    extra: tuple[Exit, ...] = ()
    own: tuple[tuple[int, str, str], ...] = ()
    usage: int = Exit.USAGE
    passes: str = ""

    def codes(self) -> list[int]:
        """Every code the command can return, in order."""
        return sorted({*map(int, SHARED), *map(int, self.extra), *(c for c, _, _ in self.own)})


_E = Exit
_LANE = (_E.UNAVAILABLE,)      # reads the lanes file: none configured, or the lane did not answer
_GATE = (_E.UNAVAILABLE, _E.DISK_SHORT, _E.PULL_REFUSED, _E.NO_SANDBOX, _E.CONNECTION_DROPPED)
_JOB = (_E.UNAVAILABLE, _E.STOPPED, _E.UNMET, _E.REFUSED, _E.BUDGET)
_SCORE = (_E.UNAVAILABLE, _E.NO_GROUND_TRUTH)

# Per command (its path after `nev`): the codes it can return beyond SHARED. A test walks the
# command tree: every command is here, and its --help lists exactly these codes.
COMMANDS: dict[str, Codes] = {
    "settings": Codes(), "ledger announce": Codes(), "scores": Codes(_SCORE),
    "config init": Codes(), "doctor": Codes(), "completion": Codes(), "rig trust": Codes(_LANE),
    "land": Codes((_E.UNAVAILABLE,), usage=Exit.FAILED, own=(
        (LAND_CONFLICT, "rebase conflict",
         "a rebase conflict outside `handoff.md` (the files named): the branch must change first"),)),
    "batch plan": Codes(), "batch run": Codes((_E.UNAVAILABLE, _E.BUDGET, _E.NO_SANDBOX, _E.MANIFEST_CHANGED)),
    "box demo": Codes(), "box down": Codes(), "box env": Codes(), "box shape": Codes(),
    "box status": Codes(), "box up": Codes(),
    **{f"dagu {c}": Codes(_LANE) for c in (
        "autostart", "clean-jobs", "prune-mirror", "queue", "run", "start", "status", "stop",
        "stop-run", "tunnel", "up")},
    "dagu watch": Codes(_LANE, passes="with --once --step, the step's exit code"),
    "floors check": Codes(_SCORE), "floors raise": Codes(_SCORE),
    "job check inventory": Codes((_E.UNAVAILABLE, _E.REFUSED)),
    "job check preflight": Codes((_E.UNMET,)),
    "job poll": Codes((_E.UNAVAILABLE,), passes="the landing's (as `nev land --approved`: 2 a rebase "
                      "conflict) or the tracks' specWatch.landScript's status"), "job revoke": Codes(), "job run": Codes(_JOB), "job status": Codes(_JOB),
    "job step": Codes((*_JOB, _E.PUBLISH_FAILED)), "job submit": Codes(_LANE),
    "lane create": Codes(_LANE), "lane destroy": Codes(), "lane install": Codes(_LANE),
    "lane list": Codes(_LANE), "lane provision": Codes(_LANE), "lane sweep": Codes(_LANE),
    "lane run": Codes(_GATE, passes="COMMAND's own status"),
    "lane on": Codes(_GATE, passes="COMMAND's own status"),
    "lane writer fetch": Codes(_LANE), "lane writer start": Codes(_LANE),
    "lane writer status": Codes(_LANE), "lane writer stop": Codes(_LANE),
    "oracle build": Codes(), "oracle engines": Codes(), "oracle render": Codes(),
    "oracle audio": Codes(),
    "oracle serve-store": Codes(),
    "oracle suite run": Codes((_E.UNAVAILABLE, _E.NO_SANDBOX)), "oracle suites fetch": Codes(_LANE),
    "provenance bom": Codes(), "provenance list": Codes(), "provenance regen": Codes(_LANE),
    "provenance stale": Codes(),
    **{f"rig {c}": Codes() for c in (
        "advertise", "capacity", "collect", "dashboard", "log", "probe", "snapshots",
        "throughput", "forward down", "forward status", "forward supervise",
        "services apply", "services here", "services once", "services run")},
    # these reach the rig's hosts over SSH (through the jump host): 3 when they cannot
    **{f"rig {c}": Codes(_LANE) for c in (
        "diff", "drain", "drift", "provision-sudo", "restart", "restore", "snapshot", "start",
        "stop", "forward up")},
    "rig status": Codes(_LANE), "rig metrics": Codes(_LANE), "rig services install": Codes(_LANE),
    "rig services remove": Codes(_LANE), "rig services status": Codes(_LANE),
    "sandbox check": Codes((_E.NO_SANDBOX,)),
    "sandbox exec": Codes((_E.NO_SANDBOX,), passes="the command's own status"),
}


# Whose the exit status is: a command that passes a remote (or child) command's status through
# marks it here (`passed_through`), so the status line says "command" for it and "nev" for every
# code of nev's own (docs/exit-codes.md: NEV_STATUS_FILE).
_PASSED: list[int] = []


def passed_through(status: int) -> int:
    """`status`, the command's own (not nev's), noted for the status line; returned as is."""
    _PASSED.append(status)
    return status


def status_line(code: int) -> str:
    """The status line for a run that exits `code`: `command N` when N is the command's own
    status passed through, else `own N NAME` (NAME the code's name here, when it has one)."""
    if _PASSED and _PASSED[-1] == code:
        return f"command {code}\n"
    name = next((e.name for e in Exit if int(e) == code), "")
    return f"own {code} {name}".rstrip() + "\n"


def codes_of(path: str) -> Codes:
    """The table's entry for a command (`lane run`); a group's (`lane`, ``) is the union of its
    commands' codes, with no own meanings."""
    if path in COMMANDS:
        return COMMANDS[path]
    under = [c for p, c in COMMANDS.items() if not path or p.startswith(path + " ")]
    by_code = {int(e): e for e in Exit}
    extra = {by_code[n] for c in under for n in c.codes()}
    return Codes(tuple(sorted(extra - set(SHARED))))


def help_epilog(path: str) -> str:
    """The exit codes for a command's --help, from COMMANDS."""
    c = codes_of(path)
    own = {n: short for n, short, _ in c.own}
    parts = [f"{n} {own.get(n, SHORT[n])}" for n in c.codes()]
    if c.usage != Exit.USAGE:
        parts = [p + (" (also a usage error)" if p.startswith(f"{c.usage} ") else "")
                 for p in parts]
    tail = f" Otherwise {c.passes}." if c.passes else ""
    text = f"Exit codes: {'; '.join(parts)}.{tail} See docs/exit-codes.md."
    # "\b": click keeps these lines as they are (it would break docs/exit-codes.md at its hyphen)
    return "\b\n" + "\n".join(textwrap.wrap(text, 76, break_on_hyphens=False))
