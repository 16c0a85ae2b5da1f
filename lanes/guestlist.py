"""What a lane guest holds: one declared list, split between the cached image and provisioning.

Every Debian package a working lane needs is named once here, with where it comes from:

| stage | who puts it there | when |
|---|---|---|
| `image` | `nev lane create --backend lxc` (debootstrap + apt in a chroot, `lanes/create.py`) | once per recipe, cached |
| `provision` | `nev lane provision` over SSH as root, through the rig's apt proxy (`lanes/provision.py`) | on every guest, idempotently |

`nev lane provision` checks the whole list (an image package already there is `unchanged`), so a
guest made from any Debian image (a Proxmox template, an older cached image) becomes a working
lane. The image's key hashes the whole list and the apt sources (`lanes.create_lxc.ImageRecipe`), so
a change to either is a new image, never a cached one used stale.

The browsers and node are in the image because every box lane is a fresh overlay: installing
them per lane (~1 GB) on every `nev box up` would cost minutes; in the image they cost once.

The apt sources are the host's (bookworm, bookworm-updates, bookworm-security), so a guest's
browsers are the versions this machine has: a corpus built on a lane and one built here can be
compared byte for byte (the corpus key holds the engine versions; `bench/oracle/store.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Stage(StrEnum):
    IMAGE = "image"
    PROVISION = "provision"


@dataclass(frozen=True)
class Need:
    package: str
    stage: Stage
    why: str


IMG, PROV = Stage.IMAGE, Stage.PROVISION

DECLARED: tuple[Need, ...] = (
    Need("openssh-server", IMG, "sshd: the one way into a lane"),
    Need("git", IMG, "the lane mirror and the gate's copies"),
    Need("python3", IMG, "the lane agent and nev"),
    Need("python3-venv", IMG, "`nev lane install` makes nev's venv with it"),
    Need("ca-certificates", IMG, "https for git and pip"),
    Need("gcc", IMG, "cargo's linker"),
    Need("libc6-dev", IMG, "cargo's linker"),
    Need("procps", IMG, "ps for the busy test and the sweep"),
    Need("iproute2", IMG, "ip, for the box's checks inside a guest"),
    Need("cron", IMG, "crontab, for Dagu's @reboot autostart line and the tick"),
    Need("rsync", IMG, "the copy B1's baseline measures against (bench/perf/b01_slow_uplink.py)"),
    Need("curl", IMG, "HTTP from a job's stages and checks (the gateway, Dagu's API on the lane)"),
    Need("chromium", IMG, "the oracle's Blink (Playwright drives /usr/lib/chromium/chromium)"),
    Need("firefox-esr", IMG, "the oracle's Gecko (WebDriver BiDi)"),
    Need("webkit2gtk-driver", IMG, "the oracle's WebKit (WebKitWebDriver starts MiniBrowser)"),
    Need("xvfb", IMG, "WebKit's display"),
    Need("pulseaudio", IMG, "the audio sink a realtime AudioContext plays into (lanes/audio.py)"),
    Need("gstreamer1.0-pulseaudio", IMG, "WebKit's way to that sink (GStreamer's pulsesink)"),
    Need("fonts-dejavu-core", IMG, "the fonts this machine renders with: same fonts, same layout"),
    Need("fonts-dejavu-extra", IMG, "the fonts this machine renders with"),
    Need("make", IMG, "a project's own verify command (`make test`, the quick start's example)"),
    Need("nodejs", IMG, "node: a job's requirements check wants it on every lane"),
    Need("npm", PROV, "npm ci from the share's cache"),
    Need("chromium-driver", PROV, "chromedriver, for tools that drive Chromium without Playwright"),
)


def packages(stage: Stage | None = None) -> tuple[str, ...]:
    """The declared packages of one stage, or all of them, in declared order."""
    return tuple(n.package for n in DECLARED if stage is None or n.stage == stage)


def digest_text() -> str:
    """The whole list as text, for the image key: any change to it makes a new image."""
    return "\n".join(f"{n.stage} {n.package}" for n in sorted(DECLARED, key=lambda n: n.package))
