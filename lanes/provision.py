"""`nev lane provision`: idempotent set-up of a lane guest over SSH (as root on the guest).

`plan` turns plain values into steps (pure); each step is a side-effect-free check and an action,
and the whole plan runs as one `sh -s` script on one SSH connection, printing `changed: STEP` or
`unchanged: STEP` per step. A second run finds every check true and changes nothing. Packages come
through the apt proxy on the node's bridge address (guests have no route out).
"""

from __future__ import annotations

import hashlib
import shlex
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lanes import audio, guestlist, lanesfile
from lanes.agent import layout
from lanes.base import rustversion, settings
from lanes.base.errors import ConfigError, NevError
from lanes.base.ssh import default_key_file, default_known_hosts
from lanes.create import heredoc
from lanes.hostexec import Node

# What a working lane needs (Debian bookworm names): the whole declared list, the image's part
# included (`lanes/guestlist.py`), so a guest made from any Debian image is checked and completed.
GATE_PACKAGES = guestlist.packages()
USER = "lane"
HOME = "/home/lane"
PROJECT = Path(__file__).resolve().parent.parent


def engine_rust_min(root: Path = PROJECT) -> str:
    """The engine's minimum Rust (`rust-version` of its Cargo workspace, read by the one reader
    `lanes.base.rustversion` that scripts/setup uses too); ConfigError naming file and field."""
    try:
        return rustversion.minimum(settings.path_under(settings.ENGINE_DIR, root) / "Cargo.toml")
    except ValueError as e:
        raise ConfigError(str(e)) from None


@dataclass(frozen=True)
class Writer:
    """A writer host's own set-up: LANE_WRITER_SETUP, run as the lane user (again whenever it or
    its settings change) with LANE_WRITER_TOOL and LANE_WRITER_DIRS in its environment."""

    setup: str
    tool: str = ""
    dirs: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Writer | None:
        setup = env.get("LANE_WRITER_SETUP")
        return cls(setup, env.get("LANE_WRITER_TOOL") or "", env.get("LANE_WRITER_DIRS") or "") if setup else None


@dataclass(frozen=True)
class Params:
    root: str = "/srv/lane"
    shared: str = "/srv/lane-shared"
    packages: tuple[str, ...] = GATE_PACKAGES
    apt_proxy: str | None = None
    model_url: str | None = None
    pi_tracks_url: str | None = None
    writer: Writer | None = None
    rust_min: str | None = None     # the engine's minimum Rust (`engine_rust_min`)


@dataclass(frozen=True)
class Step:
    name: str
    check: str      # exit 0: already so
    apply: str
    detail: str = ""   # a command printing what the check found, added to the step's line


def _as_lane(cmd: str) -> str:
    return f"runuser -u {USER} -- sh -c {shlex.quote(cmd)}"


def _file(name: str, path: str, content: str, owner: str, mode: str) -> Step:
    tag = "NEV_EOF_" + hashlib.sha256(content.encode()).hexdigest()[:12]
    check = (f"[ \"$(stat -c %U:%a {shlex.quote(path)} 2>/dev/null)\" = {shlex.quote(owner.split(':')[0] + ':' + mode)} ] "
             f"&& cmp -s {shlex.quote(path)} - <<'{tag}'\n{content}{tag}\n")
    return Step(name, check, heredoc(path, content, mode, owner).rstrip("\n"))


def _home_file(name: str, content: str) -> Step:
    """One of the lane home's files (`lanes.agent.layout`), the lane user's, mode 644."""
    return _file(f"~/{name}", layout.home_file(HOME, name), content, f"{USER}:{USER}", "644")


def no_userinfo(url: str) -> str:
    """A URL with any user:password removed (nothing secret is written on a lane by provision)."""
    u = urllib.parse.urlsplit(url)
    host = u.hostname or ""
    netloc = host + (f":{u.port}" if u.port else "")
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))


def plan(p: Params) -> list[Step]:
    q = shlex.quote
    steps: list[Step] = []
    if p.apt_proxy:
        steps.append(_file(f"apt proxy {p.apt_proxy}", "/etc/apt/apt.conf.d/01nev-proxy",
                           f'Acquire::http::Proxy "{p.apt_proxy}";\nAcquire::https::Proxy "DIRECT";\n',
                           "root:root", "644"))
    if p.packages:
        pk = " ".join(q(x) for x in p.packages)
        steps.append(Step(
            f"packages {' '.join(p.packages)}",
            f"[ \"$(dpkg-query -W -f='${{db:Status-Status}}\\n' {pk} 2>/dev/null | grep -c '^installed$')\" = {len(p.packages)} ]",
            "apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
            f"--no-install-recommends {pk} >/dev/null"))
    ak = f"{HOME}/.ssh/authorized_keys"
    steps.append(Step(
        f"user {USER}",
        f"id -u {USER} >/dev/null 2>&1 && [ -s {ak} ]",
        f"id -u {USER} >/dev/null 2>&1 || useradd -m -s /bin/bash {USER}; usermod -p '*' {USER}; "
        f"install -d -o {USER} -g {USER} -m 700 {HOME}/.ssh; "
        f"[ -s {ak} ] || install -o {USER} -g {USER} -m 600 /root/.ssh/authorized_keys {ak}"))
    steps.append(Step(
        f"lane root {p.root}",
        f"[ \"$(stat -c %U {q(p.root)} 2>/dev/null)\" = {USER} ]",
        f"mkdir -p {q(p.root)} && chown {USER}:{USER} {q(p.root)}"))
    mirror = layout.Root(p.root).mirror
    steps.append(Step(
        f"mirror {mirror}",
        _as_lane(f"git -C {q(mirror)} rev-parse --is-bare-repository 2>/dev/null | grep -qx true"),
        _as_lane(f"git init -q --bare {q(mirror)} && git -C {q(mirror)} config gc.auto 0")))
    steps.append(Step(
        "toolchains git python3 node",
        _as_lane("command -v git && command -v python3 && command -v node") + " >/dev/null",
        "echo 'git, python3 or node is missing: add it to the packages' >&2; false"))
    steps.append(rust_step(p.rust_min))
    steps.append(sandbox_step())
    steps.append(Step(f"audio sink (PulseAudio, null sink {audio.SINK})", audio.check_script(),
                      audio.apply_script()))
    steps.append(Step(
        f"NAS at {p.shared}",
        _as_lane(f"test -d {q(p.shared)} && test -w {q(p.shared)}"),
        f"echo 'the NAS is not bound writable at {p.shared}: bind it on the node "
        "(nev lane create --shared DIR)' >&2; false"))
    npm_cache = f"{p.shared}/npm-cache"
    steps.append(Step(f"npm cache {npm_cache}", f"[ -d {q(npm_cache)} ]", _as_lane(f"mkdir -p {q(npm_cache)}")))
    lane_env = (f"export NEV_LANE_SHARED={p.shared}\nexport npm_config_cache={npm_cache}\n"
                f"export PATH={layout.TOOLCHAIN_PATH}:$HOME/.cargo/bin\n")
    steps.append(_home_file(layout.LANE_ENV, lane_env))
    steps.append(_home_file(layout.SHARED_ENV, f"NEV_LANE_SHARED={p.shared}\nnpm_config_cache={npm_cache}\n"))
    if p.model_url:
        steps.append(_home_file(layout.MODEL_ENV, f"NEV_LANE_MODEL_URL={no_userinfo(p.model_url)}\n"))
    if p.pi_tracks_url:
        dest = f"{HOME}/.local/share/pi-tracks"
        steps.append(Step("writer host: pi-tracks clone", f"[ -d {q(dest)}/.git ]",
                          _as_lane(f"git clone -q {q(p.pi_tracks_url)} {q(dest)}")))
    if p.writer:
        w = p.writer
        stamp = f"{HOME}/.cache/nev-writer-setup"
        digest = hashlib.sha256("\0".join([w.setup, w.tool, w.dirs]).encode()).hexdigest()
        env = f"LANE_WRITER_TOOL={q(w.tool)} LANE_WRITER_DIRS={q(w.dirs)}"
        steps.append(Step(
            "writer host: LANE_WRITER_SETUP",
            f"[ \"$(cat {stamp} 2>/dev/null)\" = {digest} ]",
            _as_lane(f"cd && {env} sh -c {q(w.setup)} && mkdir -p ~/.cache && echo {digest} > {stamp}")))
    return steps


def sandbox_step() -> Step:
    """The sandbox every candidate and verify runs in (docs/sandbox.md) needs bubblewrap, user
    namespaces the lane user may create, and libseccomp: a lane without them refuses to score
    (exit 13), so provisioning says so first. bubblewrap and libseccomp2 come with the image's
    packages (WebKitGTK's own sandbox is bubblewrap; apt needs libseccomp2)."""
    check = _as_lane("command -v bwrap >/dev/null && bwrap --unshare-all --unshare-user --die-with-parent "
                     "--ro-bind / / true && (ldconfig -p 2>/dev/null || /sbin/ldconfig -p) | grep -q libseccomp.so.2")
    return Step("sandbox (bubblewrap, user namespaces, libseccomp)", check,
                "echo 'the sandbox cannot be built here: install bubblewrap and libseccomp2, and allow "
                "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; in LXC: "
                "the guest must be unprivileged or nesting allowed)' >&2; false")


def rust_step(rust_min: str | None) -> Step:
    """Rust cannot be installed in a guest with no route out (rustup downloads, and Debian's
    rustc is older than the engine's minimum): it is the node's toolchain, bound read-only at
    /srv/toolchain, or rustup in the lane home. The line names which, and the version."""
    find = (f"PATH={layout.TOOLCHAIN_PATH}:$HOME/.cargo/bin:$PATH RUSTUP_HOME=${{RUSTUP_HOME:-{layout.TOOLCHAIN}/rustup}}; "
            "c=$(command -v cargo) || exit 1; v=$(cargo --version 2>/dev/null | cut -d' ' -f2) || exit 1; ")
    if rust_min:
        ok = (f"[ \"$(printf '%s\\n%s\\n' {shlex.quote(rust_min)} \"${{v%%-*}}\" | sort -V | head -1)\" = "
              f"{shlex.quote(rust_min)} ]")
    else:
        ok = "[ -n \"$v\" ]"
    where = (f"case $c in {layout.TOOLCHAIN}/*) echo \"cargo $v, the node's toolchain bound read-only at {layout.TOOLCHAIN}\";; "
             "*) echo \"cargo $v at $c\";; esac")
    need = f"rust >= {rust_min}" if rust_min else "rust"
    older = f" or older than {rust_min}" if rust_min else ""
    return Step(
        f"{need} (the engine's minimum)" if rust_min else need,
        _as_lane(find + ok),
        f"echo 'cargo is missing{older}: the Rust toolchain comes from the node "
        f"(a read-only bind at {layout.TOOLCHAIN}: nev lane create --bind SRC:{layout.TOOLCHAIN}/rustup:ro) "
        "or rustup in the lane home' >&2; false",
        detail=_as_lane(find + where))


def script(steps: list[Step]) -> str:
    """One script: every step prints its line; the first failing action stops the run."""
    out = ["set -u", "export LC_ALL=C PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    for s in steps:
        label = shlex.quote(s.name)
        if s.detail:
            label += f'": $({s.detail} 2>/dev/null)"'
        out.append(f"if {s.check}\nthen echo unchanged: {label}\nelse\n"
                   f"{{ {s.apply}\n}} || {{ echo failed: {label}; exit 1; }}\n"
                   f"if {s.check}\nthen echo changed: {label}\nelse echo failed: {label}; exit 1; fi\nfi")
    return "\n".join(out) + "\n"


def run(node: Node, params: Params, label: str) -> list[str]:
    """Provision one guest; print and return its step lines. Raises on the first failed step."""
    ran = node.run(script(plan(params)), check=False, what=f"provisioning {label}")
    lines = [ln for ln in ran.out.splitlines() if ln.startswith(("changed: ", "unchanged: ", "failed: "))]
    for ln in lines:
        print(f"{label}: {ln}" if label else ln, flush=True)
    if ran.exit_status != 0:
        failed = next((ln for ln in lines if ln.startswith("failed: ")), "failed: (no step)")
        raise NevError(f"provisioning {label} stopped at {failed.removeprefix('failed: ')}: {ran.last_err()}")
    return lines


def provision_lanes(lane_index: int | None, params: Params, ssh_user: str = "root",
                    dry_run: bool = False) -> int:
    lf = lanesfile.configured()
    lanes = lanesfile.pick(lf, lane_index)      # a --lane no lane has: a usage error (2)
    for ln in lanes:
        t = ln.target
        if dry_run:     # no connection: the steps are the plan, each checked before it is applied
            p = Params(**{**params.__dict__, "root": ln.root, "shared": ln.shared or params.shared})
            print(f"would provision lane {ln.index} ({ssh_user}@{t.host}:{t.port}), "
                  "each step only where its check fails:")
            for s in plan(p):
                print(f"  {s.name}")
            continue
        node = Node(f"{ssh_user}@{t.host}:{t.port}", default_known_hosts(), default_key_file(), jump=ln.jump_target)
        try:
            run(node, Params(**{**params.__dict__, "root": ln.root, "shared": ln.shared or params.shared}),
                f"lane {ln.index}")
        finally:
            node.close()
    return 0
