"""Every exit code of `nev`, defined once: the number, what it means, and where a command group
gives it a narrower sense. `docs/exit-codes.md` is generated from this enum (`python -m rig.docgen
exit-codes > docs/exit-codes.md`).

Each code means one thing. 3 is "nothing ran: what the command needs is not available now; the same
request may succeed later": for the lane commands (and what runs through a lane: batches, floors,
the landing's gate) that is a build lane, for a job the inventory; the poller resends on it.
"""

from __future__ import annotations

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
    USAGE = 2, "usage error: bad arguments or options", (
        ("`nev land`", "a rebase conflict outside `handoff.md` (the files named): the branch must change first"),
    )
    UNAVAILABLE = 3, ("nothing ran: what the command needs is not available now; the same request may "
                      "succeed later"), (
        ("`nev lane`, `nev batch run`, `nev floors`, `nev land`'s gate, `nev oracle suites fetch`, "
         "`nev oracle suite run`", "no build lane answered"),
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
    INTERRUPTED = 130, "interrupted (SIGINT); a command running on a lane is stopped too"
    TERMINATED = 143, "terminated (SIGTERM); a command running on a lane is stopped too"
    CONNECTION_DROPPED = 255, ("`nev lane run`: the connection to the lane dropped mid-run (a second call "
                               "stops the command and removes the `.env` files)")
