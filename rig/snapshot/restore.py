"""`nev rig restore LABEL [ROLE...]`: put a role's files back the way Ansible's `validate:` does.

Per role: write every changed file to a temporary name beside it (owner and mode set), run
the validate command on the temporary copy, keep a hard link of the current file, rename the
new one into place (atomic per file), reload, and run the health check until it passes or
its time is up. On any failure the previous files go back, the service is reloaded again and
the message names the role, the host and the failing step. `--dry-run` stops after validate.
"""

from __future__ import annotations

import os
import secrets as _secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from lanes.base.errors import NevError
from lanes.base.mask import mask
from lanes.base.ssh import Connection
from lanes.base.ui import info
from rig.rigfile import Role
from rig.snapshot import changelog
from rig.snapshot.capture import FileRec, HostState, capture_host
from rig.snapshot.context import Context
from rig.snapshot.diff import learn_secrets, render
from rig.snapshot.hosts import Hosts
from rig.snapshot.store import HostStore, Manifest, StoreError, describe_problems


class RestoreFailed(NevError):
    pass


@dataclass(frozen=True)
class FileChange:
    path: str
    want: FileRec
    have: FileRec

    def describe(self) -> str:
        if self.want.missing:
            return f"{self.path} removed (absent in the snapshot)"
        if self.have.missing:
            return f"{self.path} created ({self.want.meta()})"
        parts = []
        if self.want.sha256 != self.have.sha256:
            parts.append("content")
        if (self.want.user, self.want.group) != (self.have.user, self.have.group):
            parts.append(f"owner {self.have.user}:{self.have.group} -> {self.want.user}:{self.want.group}")
        if self.want.mode != self.have.mode:
            parts.append(f"mode {self.have.mode:04o} -> {self.want.mode:04o}")
        return f"{self.path} " + ", ".join(parts)


def plan_host(want: HostState, have: HostState) -> list[FileChange]:
    """The files whose content, owner, mode or presence differ from the snapshot."""
    out = []
    for w in want.files:
        h = have.file(w.path) or FileRec(path=w.path, missing=True)
        if not w.same_as(h):
            out.append(FileChange(w.path, w, h))
    return out


def one_line(text: str, limit: int = 600) -> str:
    s = " | ".join(ln.strip() for ln in text.splitlines() if ln.strip())
    return mask(s if len(s) <= limit else s[:limit] + " ...")


def side_name(path: str, kind: str, token: str) -> str:
    d, b = os.path.split(path)
    return os.path.join(d, f".{b}.nev-{kind}.{token}")


class StepFailed(Exception):
    def __init__(self, step: str, host: str, detail: str) -> None:
        super().__init__(step)
        self.step, self.host, self.detail = step, host, detail


@dataclass
class HostJob:
    host: str
    conn: Connection
    changes: list[FileChange]
    token: str
    staged: bool = False
    swapped: bool = False

    def tmp(self, ch: FileChange) -> str:
        return side_name(ch.path, "new", self.token)

    def backup(self, ch: FileChange) -> str:
        return side_name(ch.path, "prev", self.token)

    def stage(self, content: dict[str, bytes]) -> None:
        self.staged = True
        for ch in self.changes:
            if ch.want.missing:
                continue
            w, t = ch.want, shlex.quote(self.tmp(ch))
            cmd = (f"umask 077 && cat > {t} && "
                   f"{{ chown -- {shlex.quote(w.user + ':' + w.group)} {t} 2>/dev/null || "
                   f"chown -- {w.uid}:{w.gid} {t}; }} && chmod {w.mode:o} {t}")
            res = self.conn.run(cmd, stdin=content[w.sha256], timeout=60)
            if res.exit_status != 0:
                raise StepFailed("write", self.host, f"{ch.path}: {one_line(res.err) or 'exit ' + str(res.exit_status)}")

    def validate(self, role: Role) -> None:
        for ch in self.changes:
            v = role.validate_for(ch.path)
            if ch.want.missing or not v:
                continue
            cmd = v.replace("{path}", shlex.quote(self.tmp(ch)))
            res = self.conn.run(f"{{ {cmd} ; }} 2>&1", timeout=120)
            if res.exit_status != 0:
                raise StepFailed("validate", self.host,
                                 f"{ch.path}: `{mask(v)}` exited {res.exit_status}: {one_line(res.out) or 'no output'}")

    def drop_staged(self) -> None:
        if self.staged:
            paths = " ".join(shlex.quote(self.tmp(ch)) for ch in self.changes)
            try:
                self.conn.run(f"rm -f -- {paths}", timeout=30)
            except NevError:
                return  # the temporary copies stay, hidden and named .nev-new.*; nothing was replaced
            self.staged = False

    def swap(self) -> None:
        """Link every current file to its backup name, then rename each new file into place."""
        self.swapped = True
        q = shlex.quote
        lines = ["set -e"]
        for ch in self.changes:
            if not ch.have.missing:
                lines.append(f"ln -f -- {q(ch.path)} {q(self.backup(ch))}")
        for ch in self.changes:
            lines.append(f"rm -f -- {q(ch.path)}" if ch.want.missing else f"mv -f -- {q(self.tmp(ch))} {q(ch.path)}")
        res = self.conn.run("\n".join(lines) + "\n", timeout=60)
        if res.exit_status != 0:
            raise StepFailed("move into place", self.host, one_line(res.err) or f"exit {res.exit_status}")
        self.staged = False

    def put_back(self) -> str | None:
        q = shlex.quote
        lines = []
        for ch in self.changes:
            b = q(self.backup(ch))
            if ch.have.missing:
                lines.append(f"rm -f -- {q(ch.path)}")
            else:
                lines.append(f"if [ -e {b} ]; then mv -f -- {b} {q(ch.path)}; fi")
        lines.append("rm -f -- " + " ".join(q(self.tmp(ch)) for ch in self.changes))
        res = self.conn.run("\n".join(lines) + "\n", timeout=60)
        return None if res.exit_status == 0 else (one_line(res.err) or f"exit {res.exit_status}")

    def drop_backups(self) -> None:
        paths = " ".join(shlex.quote(self.backup(ch)) for ch in self.changes)
        self.conn.run(f"rm -f -- {paths}", timeout=30)

    def reload(self, role: Role) -> None:
        if not role.reload:
            return
        # a reload that restarts a slow service (LiteLLM) waits for it up to the role's health time
        res = self.conn.run(f"{{ {role.reload} ; }} 2>&1", timeout=max(120.0, role.health_timeout + 30))
        if res.exit_status != 0:
            raise StepFailed("reload", self.host, f"`{mask(role.reload)}` exited {res.exit_status}: "
                             f"{one_line(res.out) or 'no output'}")

    def health(self, role: Role) -> None:
        if not role.health:
            return
        deadline = time.monotonic() + role.health_timeout
        while True:
            res = self.conn.run(f"{{ {role.health} ; }} 2>&1", timeout=max(role.health_timeout, 10))
            if res.exit_status == 0:
                return
            if time.monotonic() >= deadline:
                raise StepFailed("health check", self.host,
                                 f"`{mask(role.health)}` still failing after {role.health_timeout:.0f} s "
                                 f"(exit {res.exit_status}): {one_line(res.out) or 'no output'}")
            time.sleep(0.5)


def restore_role(hosts: Hosts, role: Role, label: str, want: dict[str, HostState],
                 dry_run: bool, doing: str = "") -> list[str]:
    """Restore one role on all its recorded hosts; returns outcome lines or raises RestoreFailed.
    `want` may be any content (`nev rig drift --fix` puts a generated config in place through
    here); `doing` names the action in messages (default `restore LABEL`)."""
    jobs = _host_jobs(hosts, want, _secrets.token_hex(4))
    if not jobs:
        return [f"{role.name}: already as in {label}; nothing replaced, no reload"]
    doing = doing or f"restore {label}"
    _stage_and_validate(jobs, role, doing, want)
    if dry_run:
        for j in jobs:
            j.drop_staged()
        return [f"{role.name} on {j.host}: would change " + "; ".join(c.describe() for c in j.changes)
                + " (validate passed)" for j in jobs]
    _put_in_place(jobs, role, doing)
    out = []
    for j in jobs:
        j.drop_backups()
        steps = "validated, moved, " + ("reloaded, " if role.reload else "") + ("healthy" if role.health else "done")
        out.append(f"{role.name} on {j.host}: " + "; ".join(c.describe() for c in j.changes) + f" ({steps})")
    return out


def _host_jobs(hosts: Hosts, want: dict[str, HostState], token: str) -> list[HostJob]:
    """One job for each host whose files differ from the snapshot."""
    jobs: list[HostJob] = []
    for host, w in want.items():
        conn = hosts.get(host)
        have = capture_host(conn, host, [f.path for f in w.files], [])
        changes = plan_host(w, have)
        if changes:
            jobs.append(HostJob(host, conn, changes, token))
    return jobs


def _stage_and_validate(jobs: list[HostJob], role: Role, doing: str, want: dict[str, HostState]) -> None:
    """Every changed file written beside its place and validated there; on any failure the staged
    copies are removed and nothing was replaced."""
    content: dict[str, bytes] = {}
    for w in want.values():
        content.update(w.blobs)
    try:
        for j in jobs:
            info(f"{doing}: {role.name} on {j.host}: write and validate")
            j.stage(content)
            j.validate(role)
    except (StepFailed, NevError) as e:
        for j in jobs:
            j.drop_staged()
        where = f"{e.step} on {e.host}: {e.detail}" if isinstance(e, StepFailed) else f"write and validate: {mask(str(e))}"
        raise RestoreFailed(f"{doing}: role {role.name} failed at {where}; nothing was replaced") from None
    except BaseException:
        for j in jobs:
            j.drop_staged()
        raise


def _put_in_place(jobs: list[HostJob], role: Role, doing: str) -> None:
    """Host by host: the staged files moved into place, reload, health check; on any failure (or an
    interrupt) every host touched is rolled back and the rest lose their staged copies."""
    done: list[HostJob] = []
    step, host = "move into place", jobs[0].host
    try:
        for j in jobs:
            info(f"{doing}: {role.name} on {j.host}: move into place, reload, health check")
            done.append(j)
            host = j.host
            step = "move into place"
            j.swap()
            step = "reload"
            j.reload(role)
            step = "health check"
            j.health(role)
    except (StepFailed, NevError) as e:
        detail = e.detail if isinstance(e, StepFailed) else mask(str(e))
        after = _roll_back(role, done)
        for j in jobs:
            if j not in done:
                j.drop_staged()
        raise RestoreFailed(f"{doing}: role {role.name} failed at {step} on {host}: {detail}; "
                            f"{after}") from None
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM): never leave a half-restored role behind.
        _roll_back(role, done)
        raise


def _roll_back(role: Role, done: list[HostJob]) -> str:
    """Previous files back on every host touched, reload again, check health; one phrase saying how it went."""
    problems = []
    for j in reversed(done):
        try:
            err = j.put_back()
        except NevError as e:
            err = mask(str(e))
        if err:
            problems.append(f"putting files back on {j.host} failed: {err} (backups are the .nev-prev.{j.token} "
                            "files beside each file)")
            continue
        try:
            j.reload(role)
            j.health(role)
        except StepFailed as e:
            problems.append(f"after putting the previous files back, {e.step} on {e.host} failed: {e.detail}")
        except NevError as e:
            problems.append(f"after putting the previous files back, {j.host} failed: {mask(str(e))}")
    if problems:
        return "; ".join(problems)
    return "previous files put back" + (", reloaded" if role.reload else "") + (
        " and healthy again" if role.health else "")


def fill_from_hosts(ctx: Context, m: Manifest, hosts: Hosts) -> int:
    """Objects missing locally are taken from the copy on the host that recorded them (hash checked)."""
    n = 0
    for hs in m.roles.values():
        for host, s in hs.items():
            shas = {f.sha256 for f in s.files if not f.missing} | {c.sha256 for c in s.commands}
            for sha in sorted(shas):
                if not ctx.store.has_blob(sha):
                    try:
                        data = HostStore(hosts.get(host), ctx.rig.host_store).get_blob(sha)
                    except NevError:
                        continue  # verify() names it
                    ctx.store.put_blob(data)
                    n += 1
    return n


def restore(ctx: Context, label: str, role_names: tuple[str, ...], dry_run: bool,
            say: Callable[[str], None]) -> int:
    m = ctx.store.read_manifest(label)
    roles = ctx.roles(role_names, within=list(m.roles))
    outcome: list[str] = []
    names = [r.name for r in roles]
    with Hosts(ctx.rig) as hosts:
        fetched = fill_from_hosts(ctx, m, hosts)
        if fetched:
            info(f"restore {label}: {fetched} object(s) missing from the local notes fetched from the hosts' copies")
        problems = ctx.store.verify(m)
        if problems:
            raise StoreError(describe_problems(label, problems))
        ctx.store.load_blobs(m)
        learn_secrets(m.roles, ctx.rig.roles)
        if dry_run:
            live = {r.name: {h: capture_host(hosts.get(h), h, [f.path for f in s.files], [])
                             for h, s in m.roles[r.name].items()} for r in roles}
            want = {r.name: {h: HostState(h, s.files, [], s.blobs) for h, s in m.roles[r.name].items()}
                    for r in roles}
            text = render("live", live, label, want, ctx.rig.roles)
            say(text.rstrip("\n") if text else f"live files already match {label}")
        try:
            for r in roles:
                outcome += restore_role(hosts, r, label, m.roles[r.name], dry_run)
        except RestoreFailed as e:
            if not dry_run:
                changelog.append(ctx.store.notes, changelog.restore_entry(
                    label, names, [*outcome, f"FAILED: {e.message}"]))
            for line in outcome:
                say(line)
            raise
    if not dry_run:
        changelog.append(ctx.store.notes, changelog.restore_entry(label, names, outcome))
    for line in outcome:
        say(line)
    return 0
