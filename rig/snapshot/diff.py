"""Unified diffs between two states of the rig (two labels, or a label and live), secrets masked.

Every line shown passes through the role's declared masks (key names such as `master_key`,
or `re:<regex>`), the shared masking helper, and the role's declared volatile patterns
(fields that change on their own, such as a uptime in a command's output).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from lanes.base.mask import MASK, known_secrets, mask, register_secret
from rig.rigfile import Role
from rig.snapshot.capture import FileRec, HostState, capture_host
from rig.snapshot.context import Context
from rig.snapshot.hosts import Hosts

VOLATILE = "<volatile>"

Side = dict[str, dict[str, HostState]]


def mask_patterns(masks: Iterable[str]) -> list[re.Pattern[str]]:
    out = []
    for m in masks:
        if m.startswith("re:"):
            out.append(re.compile(m[3:]))
        else:
            out.append(re.compile(r"(?P<pre>[\"']?\b" + re.escape(m) + r"\b[\"']?\s*[:=]\s*[\"']?)"
                                  r"(?P<val>[^\s\"',}#]+)"))
    return out


def _secret_span(m: re.Match[str]) -> tuple[int, int]:
    if "val" in m.re.groupindex:
        return m.span("val")
    if m.re.groups:
        return m.span(1)
    return m.span(0)


def declared_secrets(text: str, masks: Iterable[str]) -> set[str]:
    found = set()
    for rx in mask_patterns(masks):
        for m in rx.finditer(text):
            a, b = _secret_span(m)
            if b > a:
                found.add(m.string[a:b])
    return found


def learn_secrets(side: Side, roles: dict[str, Role]) -> None:
    """Register every declared secret value found in the content, so logs and errors mask it too."""
    for role, hosts in side.items():
        masks = roles[role].masks if role in roles else []
        if not masks:
            continue
        for s in hosts.values():
            for data in s.blobs.values():
                for v in declared_secrets(data.decode("utf-8", errors="replace"), masks):
                    register_secret(v)


def mask_text(text: str, masks: Iterable[str] = (), volatile: Iterable[str] = ()) -> str:
    masks = list(masks)
    for v in declared_secrets(text, masks):
        register_secret(v)

    def hide(m: re.Match[str]) -> str:
        a, b = _secret_span(m)
        return m.string[m.start():a] + MASK + m.string[b:m.end()]

    for rx in mask_patterns(masks):
        text = rx.sub(hide, text)
    text = mask(text, extra=known_secrets())
    return without_volatile(text, volatile)


def without_volatile(text: str, volatile: Iterable[str]) -> str:
    for v in volatile:
        rx = re.compile(v)
        text = rx.sub(lambda m: m.string[m.start():_secret_span(m)[0]] + VOLATILE
                      + m.string[_secret_span(m)[1]:m.end()], text)
    return text


def is_binary(data: bytes) -> bool:
    if b"\0" in data:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _body(a: bytes | None, b: bytes | None, masks: list[str], volatile: list[str]) -> list[str]:
    """Diff lines of two contents: volatile fields levelled first, then every shown line masked,
    so a changed secret still shows as a changed line (`-master_key: ***` / `+master_key: ***`)."""
    if a is not None and b is not None and (is_binary(a) or is_binary(b)):
        return ["# binary content differs"] if a != b else []
    ta = a.decode() if a is not None else ""
    tb = b.decode() if b is not None else ""
    for v in declared_secrets(ta + "\n" + tb, masks):
        register_secret(v)
    la = without_volatile(ta, volatile).splitlines()
    lb = without_volatile(tb, volatile).splitlines()
    out = []
    for line in list(difflib.unified_diff(la, lb, lineterm="", n=3))[2:]:
        out.append(line if line.startswith("@@") else line[:1] + mask_text(line[1:], masks))
    return out


def _content(s: HostState | None, f: FileRec | None) -> bytes | None:
    if s is None or f is None or f.missing:
        return None
    return s.blobs.get(f.sha256)


@dataclass(frozen=True)
class Entry:
    """One file (`file`) or command (`command`, masked) of a role's host that differs: `left` and
    `right` (owner/mode or exit status, `not recorded` when absent) and the diff `lines`, masked."""

    role: str
    host: str
    left: str
    right: str
    lines: list[str]
    file: str | None = None
    command: str | None = None

    @property
    def where(self) -> str:
        if self.file is not None:
            return f"{self.host}:{self.file}"
        return f"{self.host}: $ {self.command}"

    def to_json(self) -> dict[str, object]:
        what = {"file": self.file} if self.file is not None else {"command": self.command}
        return {
            "role": self.role,
            "host": self.host,
            **what,
            "left": self.left,
            "right": self.right,
            "lines": self.lines,
        }


def entries(left: Side, right: Side, roles: dict[str, Role]) -> list[Entry]:
    """What differs, one entry per file or command of a role's host; empty when the two sides
    hold the same state."""
    found: list[Entry] = []
    for role in sorted(set(left) | set(right)):
        r = roles.get(role)
        masks = r.masks if r else []
        volatile = r.volatile if r else []
        lh, rh = left.get(role, {}), right.get(role, {})
        for host in sorted(set(lh) | set(rh)):
            ls, rs = lh.get(host), rh.get(host)
            paths = [f.path for f in (ls.files if ls else [])]
            paths += [f.path for f in (rs.files if rs else []) if f.path not in paths]
            for path in paths:
                lf = ls.file(path) if ls else None
                rf = rs.file(path) if rs else None
                if lf is not None and rf is not None and lf.same_as(rf):
                    continue
                lmeta = lf.meta() if lf else "not recorded"
                rmeta = rf.meta() if rf else "not recorded"
                lines = [f"# owner/mode: {lmeta} -> {rmeta}"] if lmeta != rmeta else []
                lines += _body(_content(ls, lf), _content(rs, rf), masks, volatile)
                found.append(Entry(role, host, lmeta, rmeta, lines, file=path))
            lcmds = {c.cmd: c for c in (ls.commands if ls else [])}
            rcmds = {c.cmd: c for c in (rs.commands if rs else [])}
            for cmd in [*lcmds, *[c for c in rcmds if c not in lcmds]]:
                lc, rc = lcmds.get(cmd), rcmds.get(cmd)
                a = ls.blobs.get(lc.sha256) if (ls and lc) else None
                b = rs.blobs.get(rc.sha256) if (rs and rc) else None
                body = _body(a, b, masks, volatile)
                lexit = f"exit {lc.exit}" if lc else "not recorded"
                rexit = f"exit {rc.exit}" if rc else "not recorded"
                if not body and lexit == rexit:
                    continue
                found.append(Entry(role, host, lexit, rexit, body, command=mask(cmd)))
    return found


def render(left_name: str, left: Side, right_name: str, right: Side, roles: dict[str, Role]) -> str:
    """The whole diff as text; empty when the two sides hold the same state."""
    out: list[str] = []
    for e in entries(left, right, roles):
        out.append(f"--- {left_name} {e.role} {e.where} ({e.left})")
        out.append(f"+++ {right_name} {e.role} {e.where} ({e.right})")
        out += e.lines
    return "\n".join(out) + ("\n" if out else "")


def redacted_view(role: Role | None, state: HostState) -> str:
    """A role on one host as text with every secret masked: the golden files' second form."""
    masks = role.masks if role else []
    volatile = role.volatile if role else []
    out = []
    for f in state.files:
        out.append(f"== {f.path} ({f.meta()})")
        if not f.missing:
            data = state.blobs[f.sha256]
            out.append("# binary" if is_binary(data) else mask_text(data.decode(), masks, volatile).rstrip("\n"))
    for c in state.commands:
        out.append(f"== $ {mask(c.cmd)} (exit {c.exit})")
        out.append(mask_text(state.blobs[c.sha256].decode("utf-8", errors="replace"), masks, volatile).rstrip("\n"))
    return "\n".join(out) + "\n"


def compare(ctx: Context, label: str, other: str | None) -> str:
    """`nev rig diff LABEL [LABEL2|live]`: the snapshot on the left, the other (default live) on the right."""
    left, right_name, right = sides(ctx, label, other)
    return render(label, left, right_name, right, ctx.rig.roles)


def sides(ctx: Context, label: str, other: str | None) -> tuple[Side, str, Side]:
    """The snapshot LABEL, the other side's name and its state (OTHER, default live); their
    secrets learnt."""
    left = ctx.store.read_manifest(label)
    ctx.store.load_blobs(left)
    right_name = other or "live"
    if right_name == "live":
        right: Side = {}
        with Hosts(ctx.rig) as hosts:
            for role, hs in left.roles.items():
                r = ctx.rig.roles.get(role)
                right[role] = {}
                for host, s in hs.items():
                    files = [f.path for f in s.files]
                    files += [p for p in (r.files if r else []) if p not in files]
                    cmds = [c.cmd for c in s.commands]
                    cmds += [c for c in (r.commands if r else []) if c not in cmds]
                    right[role][host] = capture_host(hosts.get(host), host, files, cmds)
    else:
        rm = ctx.store.read_manifest(right_name)
        ctx.store.load_blobs(rm)
        right = rm.roles
    learn_secrets(left.roles, ctx.rig.roles)
    learn_secrets(right, ctx.rig.roles)
    return left.roles, right_name, right
