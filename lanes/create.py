"""Creating and destroying a lane guest: an unprivileged LXC container, started at node boot.

Two backends, one shape, each in its own module: `create_lxc.py` (the image and one LXC
guest) and `create_pct.py` (Proxmox); this module holds what both share (names, paths, a
guest's bind mounts, heredocs, the lane's own host key). Each backend's pure functions write every script and command line from plain values
(tested directly, and for `pct` against recorded expected files), then `hostexec.Node` sends
them to the node (`sh -s` over SSH, or the same command line locally when the node is this
machine).

- `lxc`: a plain Debian LXC host. The image is a debootstrap minbase rootfs with the lane's
  packages, built once per recipe (the folder is named by a digest of the recipe, so a changed
  recipe is a new image and one that lanes use is never rebuilt in place) and kept uid-shifted
  for the unprivileged id map. Each lane is an overlay on that image (`lxc.rootfs.path =
  overlay:IMAGE:DELTA`) whose delta gets the lane's own host key, sshd config and keys before
  the first start. Nothing is installed on the node beyond LXC itself and debootstrap.
- `pct`: a Proxmox node, where the same guest is made from a Debian template by `pct create`.
  Never run against a real Proxmox node (there is none here); see docs/lane-create.md.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lanes.base import settings
from lanes.base.errors import ConfigError, NevError

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
CACHE = settings.value(settings.LXC_CACHE, {})   # the default; `cache()` reads NEV_LXC_CACHE
LXCPATH = "/var/lib/lxc"          # the default lxcpath, which the node's lxc-autostart reads at boot


def cache(environ: Mapping[str, str] | None = None) -> str:
    """The image cache and the box's lxcpaths on this machine (NEV_LXC_CACHE)."""
    return check_abs(settings.value(settings.LXC_CACHE, environ), "NEV_LXC_CACHE")


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise ConfigError(f"lane name {name!r} is not usable; use lower-case letters, digits and '-', "
                          "starting with a letter, at most 31 characters")
    return name


def check_abs(path: str, what: str) -> str:
    # A relative lxcpath once let lxc-destroy delete a running container's rootfs.
    if not path.startswith("/") or ".." in path.split("/"):
        raise ConfigError(f"{what} {path!r} must be an absolute path without '..'")
    return path.rstrip("/") or "/"


def heredoc(path: str, content: str, mode: str = "644", owner: str | None = None) -> str:
    """Shell lines writing `content` to `path` (quoted heredoc: nothing in it is expanded)."""
    tag = "NEV_EOF_" + hashlib.sha256(content.encode()).hexdigest()[:12]
    assert tag not in content
    body = content if content.endswith("\n") else content + "\n"
    lines = f"cat > {shlex.quote(path)} <<'{tag}'\n{body}{tag}\nchmod {mode} {shlex.quote(path)}\n"
    if owner:
        lines += f"chown {owner} {shlex.quote(path)}\n"
    return lines


@dataclass(frozen=True)
class Bind:
    source: str       # on the node
    target: str       # in the guest (absolute)
    readonly: bool = False

    @classmethod
    def parse(cls, spec: str) -> Bind:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise ConfigError(f"--bind {spec!r}: use SOURCE:TARGET or SOURCE:TARGET:ro")
        return cls(check_abs(parts[0], "bind source"), check_abs(parts[1], "bind target"),
                   len(parts) == 3 and parts[2] == "ro")


def lane_keys(out_dir: Path, name: str) -> tuple[str, str]:
    """The lane's own host key, made once and kept beside the record, so re-creating a lane
    keeps the key that known_hosts pins."""
    key = out_dir / "ssh_host_ed25519_key"
    if not key.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        cp = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}-host", "-f", str(key)],
                            capture_output=True, text=True)
        if cp.returncode != 0:
            raise NevError(f"ssh-keygen failed for {key}: {cp.stderr.strip()}")
    return key.read_text(), key.with_suffix(".pub").read_text()


def known_hosts_line(addr: str, pub: str) -> str:
    kind, b64 = pub.split()[:2]
    return f"{addr} {kind} {b64}"
