"""What every snapshot command starts from: the rig file, the local store and the NAS roots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lanes import lanesfile
from lanes.base import settings
from lanes.base.errors import UsageError
from rig import rigfile
from rig.rigfile import RigFile, Role
from rig.snapshot.store import LocalStore


def nas_roots() -> list[str]:
    """Every path that is the NAS: the lanes file's `nas` and the lanes' shared folder."""
    roots = []
    lf = lanesfile.configured(require=False)
    if lf.nas:
        roots.append(str(Path(lf.nas).expanduser()))
    shared = settings.get(settings.LANE_SHARED)
    if shared:
        roots.append(shared)
    return roots


def notes_dir() -> Path:
    return settings.path(settings.RIG_NOTES)


@dataclass
class Context:
    rig: RigFile
    store: LocalStore
    nas: list[str]

    @classmethod
    def load(cls, create: bool = True) -> Context:
        nas = nas_roots()
        store = LocalStore.open(notes_dir(), nas, create=create)
        return cls(rig=rigfile.load(rigfile.default_path()), store=store, nas=nas)

    def roles(self, names: tuple[str, ...] | list[str], within: list[str] | None = None) -> list[Role]:
        pool = within if within is not None else list(self.rig.roles)
        for n in names:
            if n not in pool:
                where = "the snapshot" if within is not None else str(self.rig.path)
                raise UsageError(f"no role {n!r} in {where} (roles: {', '.join(pool) or 'none'})")
        chosen = list(names) if names else pool
        out = []
        for n in chosen:
            if n not in self.rig.roles:
                raise UsageError(f"role {n} is in the snapshot but not in {self.rig.path}; add it back "
                                 "(with its validate, reload and health commands) to use it")
            out.append(self.rig.roles[n])
        return out
