"""The engine's Cargo workspace: where it is, how cargo runs on it, what a build produced.

Every cargo/rustc call of the bridge runs without a compiler wrapper: a wrapper
such as sccache uploads the whole dependency directory on every compile, which
costs far more than the small compiles of a candidate probe (the seed's
"Distributed compilation").

The engine holds model-written functions (and a model-written track may add a
build script), so its build runs in the sandbox (`lanes.base.sandbox`): cargo
writes only the workspace and its target folder, reads the toolchain, has no
network, no home and an empty CARGO_HOME (the engine uses the standard library
only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from crates_bridge.errors import BridgeError
from lanes.base import sandbox

#: The example engine shipped with this package (tests and the demo use it).
EXAMPLE_ENGINE = Path(__file__).resolve().parent / "engine"
#: Where generated functions live inside an engine workspace.
GENERATED_SUBDIR = Path("crates/layout/src/generated")
LAYOUT_CRATE = "layout"
GENERATION_CRATE = "generation"


@lru_cache(maxsize=4)
def sysroot() -> Path:
    """The Rust toolchain's root (`rustc --print sysroot`): the sandbox runs its rustc and cargo
    directly, not rustup's proxies (which read the user's home)."""
    try:
        cp = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True, env=no_wrapper_env(),
                            timeout=60)
    except FileNotFoundError:
        raise BridgeError("rustc is not installed; install Rust (rustup) and retry") from None
    if cp.returncode != 0 or not cp.stdout.strip():
        raise BridgeError(f"rustc --print sysroot failed: {(cp.stderr.strip().splitlines() or ['(no message)'])[-1]}")
    return Path(cp.stdout.strip())


def tool(name: str) -> str:
    """The real `rustc` or `cargo` of the toolchain (not a proxy), for use inside the sandbox."""
    mine = sysroot() / "bin" / name
    if mine.is_file():
        return str(mine)
    found = shutil.which(name)
    if found is None:
        raise BridgeError(f"{name} is not installed; install Rust (rustup) and retry")
    return os.path.realpath(found)


def toolchain_jail(read: Sequence[Path], write: Sequence[Path], cwd: Path | None = None) -> sandbox.Jail:
    """A jail for the compiler: the toolchain and `read` read-only, `write` written, processes allowed
    (rustc runs the linker, cargo runs rustc), no memory cap (the CPU cap bounds it)."""
    root = sysroot()
    reads = {root, *(Path(p) for p in read)}
    real_cargo = Path(tool("cargo")).parent
    if not str(real_cargo).startswith("/usr/"):
        reads.add(real_cargo)
    return sandbox.Jail(read=tuple(sorted(reads)), write=tuple(write), processes=True,
                        limits=sandbox.Limits(memory_bytes=None, cpu_s=3600, scratch_bytes=1024 * sandbox.MiB),
                        env={"PATH": f"{root}/bin:/usr/bin:/bin", "CARGO_HOME": "/tmp/cargo-home",
                             "CARGO_TERM_COLOR": "never", "RUSTC_WRAPPER": "", "RUSTC_WORKSPACE_WRAPPER": ""},
                        cwd=cwd)


def no_wrapper_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for cargo and rustc: no compiler wrapper, no colour."""
    env = dict(os.environ if base is None else base)
    for k in ("RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "CARGO_BUILD_RUSTC_WRAPPER",
              "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER"):
        env.pop(k, None)
    # Empty values override any wrapper named in a cargo config file.
    env["RUSTC_WRAPPER"] = ""
    env["RUSTC_WORKSPACE_WRAPPER"] = ""
    env["CARGO_TERM_COLOR"] = "never"
    return env


@dataclass(frozen=True)
class Build:
    """What `cargo build --release` of the generation crate produced."""

    rlibs: dict[str, Path]
    bins: dict[str, Path]
    deps_dir: Path

    def binary(self, name: str) -> Path:
        try:
            return self.bins[name]
        except KeyError:
            raise BridgeError(f"the engine build produced no binary `{name}`; "
                              f"it has {', '.join(sorted(self.bins)) or 'none'}") from None


@dataclass
class Workspace:
    """An engine Cargo workspace (`root` holds its Cargo.toml)."""

    root: Path
    target_dir: Path | None = None
    _build: Build | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        if self.target_dir is None:
            env_target = os.environ.get("CARGO_TARGET_DIR")
            self.target_dir = Path(env_target) if env_target else self.root / "target"
        self.target_dir = Path(self.target_dir).resolve()

    @property
    def generated_dir(self) -> Path:
        return self.root / GENERATED_SUBDIR

    def crate_dir(self, name: str) -> Path:
        return self.root / "crates" / name

    def check(self) -> None:
        if not (self.root / "Cargo.toml").is_file():
            raise BridgeError(f"{self.root}: no Cargo.toml; point NEV_ENGINE_DIR at the engine workspace")

    def cargo(self, *args: str, cwd: Path | None = None, timeout: float = 1800.0) -> subprocess.CompletedProcess:
        argv = ["cargo", *args]
        try:
            return subprocess.run(argv, cwd=cwd or self.root, env=no_wrapper_env(), capture_output=True,
                                  text=True, timeout=timeout)
        except FileNotFoundError:
            raise BridgeError("cargo is not installed; install Rust (rustup) and retry") from None
        except subprocess.TimeoutExpired:
            raise BridgeError(f"cargo {args[0]} in {cwd or self.root} took over {timeout:.0f} s; stopped") from None

    def build(self, force: bool = False) -> Build:
        """Build the workspace's libraries and binaries (release), in the sandbox; cached per instance."""
        if self._build is not None and not force:
            return self._build
        self.check()
        target = Path(str(self.target_dir))
        target.mkdir(parents=True, exist_ok=True)
        # the workspace written (cargo writes Cargo.lock when it has none; it is the copy's own), the
        # toolchain read, nothing else
        jail = toolchain_jail([], [self.root, target], cwd=self.root)
        out = sandbox.run([tool("cargo"), "build", "--release", "--offline", "--workspace", "--lib", "--bins",
                           "--message-format=json-render-diagnostics", "--target-dir", str(target)],
                          jail, timeout=1800)
        if out.timed_out:
            raise BridgeError(f"cargo build in {self.root} took over 1800 s; stopped")
        cp = subprocess.CompletedProcess([], out.returncode, out.stdout, out.stderr)
        if cp.returncode != 0:
            first = first_error_line(cp.stderr)
            raise BridgeError(f"the engine workspace {self.root} does not build: {first}")
        self._build = parse_build(cp.stdout.splitlines(), Path(str(self.target_dir)) / "release" / "deps")
        return self._build


def parse_build(lines: Sequence[str], deps_dir: Path) -> Build:
    """Read cargo's JSON messages: each library's rlib and each binary's path."""
    rlibs: dict[str, Path] = {}
    bins: dict[str, Path] = {}
    for line in lines:
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact":
            continue
        tgt = msg.get("target", {})
        kinds = tgt.get("kind", [])
        if "lib" in kinds or "rlib" in kinds:
            for f in msg.get("filenames", []):
                if f.endswith(".rlib"):
                    rlibs[tgt["name"]] = Path(f)
        if "bin" in kinds and msg.get("executable"):
            bins[tgt["name"]] = Path(msg["executable"])
    return Build(rlibs, bins, deps_dir)


def first_error_line(stderr: str) -> str:
    for line in stderr.splitlines():
        if line.startswith("error"):
            return line.strip()
    lines = [x for x in stderr.strip().splitlines() if x.strip()]
    return lines[-1].strip() if lines else "(no message)"
