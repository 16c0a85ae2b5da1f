"""The corpus store on the share: one folder per corpus key, rendered once for every lane copy.

`<store>/<entry>/`, the entry being `<function>-<first 16 hex digits of the key>` (readable, and
short enough that log masking leaves it alone; the manifest holds the whole key, which is what is
checked), holds a corpus as `corpus/<name>/` does (manifest.json, cases.jsonl, votes.jsonl). A
builder takes `<store>/<entry>.lock` (flock) before looking: the first renders into
`<store>/.tmp-<entry>-<pid>` and publishes it with one rename; a second builder of the same
key waits on the lock, then finds it published and copies it into its own `corpus/<name>/`. A
key never changes content, so nothing under `<store>` is ever replaced. A build that finds an entry
touches it (its time is when it was last used): `nev lane sweep --archives` removes entries unused
for NEV_ARCHIVE_KEEP_DAYS, the newest per function staying, under the same lock. On a lane the store is
`<NEV_LANE_SHARED>/corpora`; elsewhere there is none unless NEV_CORPUS_STORE names one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from bench.oracle import store
from lanes.base import flockwait, settings

FOLDER = "corpora"   # under the share


def store_root(environ: Mapping[str, str] | None = None) -> Path | None:
    """NEV_CORPUS_STORE when set; on a lane the share's `corpora/`; else None (no shared store).
    None inside a gate's jail too: the store is read-only there, and nev's store builder outside
    fills it for the gate (`bench.oracle.store_service`)."""
    if settings.get(settings.IN_GATE, environ):
        return None
    given = settings.given(settings.CORPUS_STORE, environ)
    if given:
        return Path(given).expanduser()
    if settings.get(settings.ON_LANE, environ):
        return settings.path(settings.LANE_SHARED, environ) / FOLDER
    return None


DIGESTS = "corpus-digests"   # under the share: the digests nev vouches for (read-only in a gate)


class Digests:
    """The corpus digests nev's builder vouches for, kept on the share where no gate can write
    (the share is read-only in a gate's jail): `<share>/corpus-digests/<store id>/<entry>` holds the
    key and `content_sha256` of a store entry nev rendered outside any gate's jail. On a lane,
    outside a gate (a job's step, a verify's builder), a store entry is used only when its digest
    is here; one a gate rendered (or replaced, with its manifest) is rendered anew and recorded."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @staticmethod
    def for_store(root: Path, environ: Mapping[str, str] | None = None) -> Digests | None:
        """The registry of store `root`; None off a lane or inside a gate's jail (there the
        store's entries are used as they are and nothing is recorded)."""
        import hashlib

        if not settings.get(settings.ON_LANE, environ) or settings.get(settings.IN_GATE, environ):
            return None
        share = settings.path(settings.LANE_SHARED, environ)
        if not share.is_dir():
            return None
        ident = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
        return Digests(share / DIGESTS / ident)

    def vouches(self, folder: Path) -> bool:
        man = store.read_manifest(folder) or store.StoreManifest({})
        try:
            text = (self.folder / folder.name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return False
        return text == self._line(man) and store.verify(folder) is None

    def record(self, folder: Path, say: Callable[[str], None] | None = None) -> None:
        man = store.read_manifest(folder) or store.StoreManifest({})
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f".{folder.name}.{os.getpid()}"
            tmp.write_text(self._line(man), encoding="utf-8")
            os.replace(tmp, self.folder / folder.name)
        except OSError as e:
            if say is not None:
                say(f"cannot record the digest of {folder} in {self.folder} ({e.strerror}); "
                    "the next build outside a gate renders it again")

    @staticmethod
    def _line(man: store.StoreManifest) -> str:
        d = man.doc      # as written: the digest line holds the fields' JSON values as they are
        return f"{d.get('key')} {d.get('content_sha256')} {d.get('votes_sha256')}\n"


def entry(function: str, key: str) -> str:
    """The store's folder name for a corpus key."""
    return f"{function}-{key[:16]}"


@contextmanager
def locked(root: Path, name: str, say: Callable[[str], None] | None = None,
           what: str = "build of this corpus") -> Iterator[None]:
    """Hold `<root>/<name>.lock` exclusively: concurrent builders of one entry take turns (`say`
    hears when this one waits). A temporary folder of this entry left by a builder that died (on
    any lane) is removed once the lock is ours."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o664)
    try:
        flockwait.lock(fd, say, f"another {what} holds {path}; waiting for it")
        for p in root.glob(f"{store.TMP_PREFIX}{name}-*"):
            shutil.rmtree(p, ignore_errors=True)
        yield
    finally:
        os.close(fd)   # releases the lock


def find(root: Path, name: str, key: str) -> Path | None:
    """The published corpus of `key`, whole and matching its manifest, else None."""
    folder = root / name
    return folder if store.up_to_date(folder, key) else None


def touch(folder: Path) -> None:
    """Mark a store entry used now (its retention counts from here); a read-only share is no error."""
    try:
        os.utime(folder)
    except OSError:
        pass


def copy_in(src: Path, root: Path, folder: str) -> Path | None:
    """Copy a published corpus to `root/folder` through a temporary folder and one rename; an older
    corpus there moves to .superseded/ (returned), as a build's own publish does."""
    writer = store.Writer(root, folder)
    try:
        writer.copy_of(src)
        return writer.publish()
    except BaseException:
        writer.discard()
        raise
