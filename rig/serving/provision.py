"""`nev rig provision-sudo ROLE`: a serving role's sudoers drop-in put in place through the
snapshot/restore path.

Steps: the drop-in per host (`sudoers.drop_ins`, pure); when a host's file differs, a snapshot
of the role `sudo-ROLE` (`before-provision-sudo-ROLE-TIME`, the undo: `nev rig restore LABEL
sudo-ROLE`), then as a restore does it: the new file beside the old one (root:root 0440), `visudo
-cf` on it, an atomic rename, `visudo -c` on the whole configuration; a file visudo refuses is
never moved into place, and a failure after the move puts the old file back. `--dry-run` prints
the drop-ins and runs `visudo -cf` on the hosts, replacing nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lanes.base.errors import UsageError
from rig.rigfile import RigFile
from rig.serving import sudoers
from rig.serving.declared import ServingRole
from rig.snapshot import changelog
from rig.snapshot.capture import FileRec, HostState, capture_host, sha256
from rig.snapshot.hosts import Hosts
from rig.snapshot.restore import RestoreFailed, plan_host, restore_role

MODE = 0o440
Render = Callable[[ServingRole], dict[str, str]]


def wanted(path: str, drops: dict[str, str]) -> dict[str, HostState]:
    """Per host, the drop-in as it should be: root:root, mode 0440."""
    out = {}
    for host, text in drops.items():
        data = text.encode()
        rec = FileRec(path=path, uid=0, gid=0, user="root", group="root", mode=MODE, size=len(data),
                      sha256=sha256(data))
        out[host] = HostState(host=host, files=[rec], blobs={rec.sha256: data})
    return out


def entry(spec: str, lines: list[str], result: str) -> str:
    out = [f"## {changelog.now()} provision-sudo {spec}", f"- who: {changelog.who()}"]
    out += [f"- {ln}" for ln in lines]
    out.append(f"- result: {result}")
    return "\n".join(out) + "\n"


def _serving_role(rig: RigFile, spec: str) -> ServingRole:
    if "/" in spec:
        raise UsageError(f"provision-sudo takes a serving role, not one replica ({spec}): the drop-in allows "
                         f"all of the role's unit commands: nev rig provision-sudo {spec.split('/')[0]}")
    role = rig.serving.get(spec)
    if role is None:
        raise UsageError(f"no serving role {spec!r} in the rig file (serving roles: {', '.join(rig.serving) or 'none'})")
    return role


def provision(rig: RigFile, spec: str, notes: Path, say: Callable[[str], None], snapshot: Callable[[str], None],
              dry_run: bool = False, render: Render = sudoers.drop_ins) -> int:
    role = _serving_role(rig, spec)
    drops = render(role)
    srole = rig.roles[sudoers.role_name(role.name)]
    path = sudoers.path(role.name)
    want = wanted(path, drops)
    lines: list[str] = []

    def tell(line: str) -> None:
        lines.append(line)
        say(f"provision-sudo {spec}: {line}")

    with Hosts(rig) as hosts:
        stale = [h for h, w in want.items() if plan_host(w, capture_host(hosts.get(h), h, [path], []))]
        if dry_run:
            for host, text in drops.items():
                say(f"provision-sudo {spec}: {path} on {host} would be:")
                for ln in text.splitlines():
                    say(f"    {ln}")
        if not stale:
            say(f"provision-sudo {spec}: {path} already as generated on {', '.join(want)}; nothing "
                f"{'would be ' if dry_run else ''}replaced")
            return 0
        if dry_run:
            for ln in restore_role(hosts, srole, "(dry run)", want, dry_run=True, doing=f"provision-sudo {spec}"):
                say(f"provision-sudo {spec}: {ln}")
            return 0
        label = f"before-provision-sudo-{role.name}-{changelog.now().replace(':', '').replace('-', '')}"
        n = sum(text.count(", \\\n") + text.count(" NOPASSWD: ") for text in drops.values())
        tell(f"{path}: {n} unit command(s) for {', '.join(want)}; replacing it on {', '.join(stale)}")
        snapshot(label)
        tell(f"snapshot {label} taken (the undo: nev rig restore {label} {srole.name})")
        try:
            for ln in restore_role(hosts, srole, label, want, dry_run=False, doing=f"provision-sudo {spec}"):
                tell(ln)
        except RestoreFailed as e:
            changelog.append(notes, entry(spec, lines, f"FAILED: {e.message}"))
            raise
    changelog.append(notes, entry(spec, lines, "done"))
    return 0
