"""Every NEV_* setting, its default and its legacy GENERA_* name, defined once.

Readers call `get(NAME)` (or the typed variants); the legacy `GENERA_*` name is
read only when the `NEV_*` one is unset, so old records and shells keep working.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lanes.base import config
from lanes.base.errors import ConfigError


@dataclass(frozen=True)
class Setting:
    name: str
    default: str | None
    help: str
    secret: bool = False

    @property
    def legacy(self) -> str:
        return "GENERA_" + self.name.removeprefix("NEV_")

    @property
    def names(self) -> tuple[str, str]:
        """The name and the legacy name, in the order they are read (also in `.env` files)."""
        return self.name, self.legacy


_REGISTRY: dict[str, Setting] = {}


def _s(name: str, default: str | None, help: str, secret: bool = False) -> Setting:
    """Register one setting; a name registered twice is refused (one name, one meaning)."""
    if name in _REGISTRY:
        raise ValueError(f"setting {name} is registered twice in lanes/base/settings.py; keep one definition")
    s = Setting(name, default, help, secret)
    _REGISTRY[name] = s
    return s


# The config file
CONFIG = _s("NEV_CONFIG", None,
            "nev's config file (TOML; default $XDG_CONFIG_HOME/nev/config.toml, "
            "else ~/.config/nev/config.toml): every setting below by its short name, the "
            "environment overriding it; relative paths in it are relative to the file "
            "(docs/config.md, `nev config init`)")
# Lanes
LANE_SSH = _s("NEV_LANE_SSH", None, "one lane as [user@]host[:port]; overrides lanes[] in the lanes file")
LANE_GIT_URL = _s("NEV_LANE_GIT_URL", None, "the forge repository as the lanes reach it (rig address; else the lanes file's "
                  "git_url): lane mirrors and job steps fetch and publish there; no credential in it")
LANE_FETCH_MAX_AGE = _s("NEV_LANE_FETCH_MAX_AGE", "600", "seconds before a lane mirror fetches from the forge again")
ARCHIVE_KEEP_DAYS = _s("NEV_ARCHIVE_KEEP_DAYS", "30", "days the share keeps archive/gate-logs, job-logs and corpus entries, and unused corpus store entries (`nev lane sweep --archives`, the tick once a day); the newest per worktree, job or function always stays")
LANE_MIN_FREE_GB = _s("NEV_LANE_MIN_FREE_GB", "20", "free GiB a lane root needs before a gate; below it the lane is swept")
LANE_STRICT = _s("NEV_LANE_STRICT", None, "when set to 1, every check runs lane-only (never on the dev box); a landing's verify always does")
LANE_KEEP_ENV = _s("NEV_LANE_KEEP_ENV", None, "when set to 1, the lane copy keeps .env after the run")
PULL_MAX_MB = _s("NEV_PULL_MAX_MB", "2048", "MiB a `--pull` folder may hold (the sum of its files' "
                 "sizes); a larger one, or one holding a sparse file, is not written (nothing of it)")
LANE_SHARED = _s("NEV_LANE_SHARED", "/srv/lane-shared", "the NAS folder as seen on a lane")
IN_GATE = _s("NEV_IN_GATE", None, "set to 1 inside a gate's own jail on a lane (docs/sandbox.md): "
             "nev's oracle builder there neither trusts nor records the share's corpus digests")
ON_LANE = _s("NEV_ON_LANE", None, "set on a lane (gates, job steps): commands run in place, the gateway URL comes "
             "from ~/.lane-model-env")
LANES_FILE = _s("NEV_LANES_FILE", "bench/lane.local.json", "the lanes file (lanes[], git_url, nas)")
LANE_JUMP = _s("NEV_LANE_JUMP", None, "the jump host every lane is reached through, [user@]host[:port]; overrides the lanes file's top-level jump (a lane's own jump wins)")
KNOWN_HOSTS = _s("NEV_KNOWN_HOSTS", None, "known_hosts file with the pinned host keys of the lanes and the jump host")
SSH_KEY = _s("NEV_SSH_KEY", None, "private key file used to reach lanes")
SSH_PERSIST = _s("NEV_SSH_PERSIST", "60", "seconds one authenticated connection to a lane stays open "
                 "after its last command, for the next gate to reuse (OpenSSH ControlPersist; 0: a "
                 "connection per command); its socket lives in a folder only this user can reach "
                 "(docs/lanes.md, \"The kept connection\")")
LANE_BUSY_COMMANDS = _s("NEV_LANE_BUSY_COMMANDS", "cargo|rustc|node", "process names that make a lane busy (LANE_BUSY_COMMANDS also read)")
WRITER_SETTLE_S = _s("NEV_WRITER_SETTLE_S", "2", "seconds `nev lane writer start` watches a new writer; "
                     "one that ends in them fails the start")
LANE_APT_PROXY = _s("NEV_LANE_APT_PROXY", None, "apt proxy a lane guest installs through (apt-cacher-ng on the node's bridge address)")
LANE_MODEL_URL = _s("NEV_LANE_MODEL_URL", None, "gateway URL as a lane reaches it: on a lane, ~/.lane-model-env's "
                    "(written by `nev lane provision` from this setting) wins over the environment's")
# Models and the gateway
MODEL_URL = _s("NEV_MODEL_URL", None, "the LiteLLM gateway's base URL as the development box reaches it "
               "(never read on a lane)")
MODEL_API_KEY = _s("NEV_MODEL_API_KEY", None, "the gateway key (secret)", secret=True)
MODEL_KEY_FILE = _s("NEV_MODEL_KEY_FILE", None, "file holding the gateway key (mode 600)")
GATEWAY_ADMIN_KEY_FILE = _s("NEV_GATEWAY_ADMIN_KEY_FILE", None, "file holding the gateway's admin (master) key "
                            "(mode 600): `nev rig drift` reads every model the gateway serves with it")
GATEWAY_KEYS_FILE = _s("NEV_GATEWAY_KEYS_FILE", None, "the gateway's keys file (per-key allowlists, digests only) as "
                       "[user@]host:/path, reached over SSH through NEV_LANE_JUMP: `nev job submit` adds each job's "
                       "own key there and the tick removes it when the job ends")
MODELS = _s("NEV_MODELS", None, "models of a batch as ALIAS:N:INFLIGHT,...")
MAX_BATCHES = _s("NEV_MAX_BATCHES", "4", "stop a generation run after this many batches")
ESCALATE_AFTER = _s("NEV_ESCALATE_AFTER", "2", "batches with no pass before a run escalates to the capacity tier")
ESCALATE_MODEL = _s("NEV_ESCALATE_MODEL", None, "the capacity-tier share of a run as ALIAS:N:INFLIGHT (default: the first capacity alias)")
BUDGET_TOKENS = _s("NEV_BUDGET_TOKENS", None, "a batch run's budget in tokens (prompt + completion); a job's stages get the manifest's `budget.tokens`, counted across the job's ledger lines")
BUDGET_GPU_S = _s("NEV_BUDGET_GPU_S", None, "a batch run's budget in pool GPU-seconds, estimated from `nev rig throughput` (NEV_THROUGHPUT_DIR); a job's stages get the manifest's `budget.gpu_s`")
FOLKNET_FILE = _s("NEV_FOLKNET_FILE", "bench/folknet.json", "declared model aliases")
# Forge
FORGE_URL = _s("NEV_FORGE_URL", None, "the forge repository as the development box reaches it (its local forward, "
               "http://127.0.0.1:PORT/OWNER/REPO.git): job and result branches are pushed and listed there; "
               "unset, NEV_LANE_GIT_URL is used (a flat rig where both sides reach one address); no credential in it")
FORGE_USER = _s("NEV_FORGE_USER", None, "forge user name (else the checkout's or primary checkout's .env, else nev)")
FORGE_TOKEN = _s("NEV_FORGE_TOKEN", None, "forge token (secret); looked up in the environment, then NEV_FORGE_TOKEN_FILE, "
                 "then the checkout's or primary checkout's .env (NEV_FORGE_TOKEN or GENERA_FORGE_TOKEN)", secret=True)
FORGE_TOKEN_FILE = _s("NEV_FORGE_TOKEN_FILE", None, "file holding the forge token (mode 600)")
# Dagu
DAGU_LANE = _s("NEV_DAGU_LANE", None, "index of the lane that runs Dagu")
DAGU_PORT = _s("NEV_DAGU_PORT", "18431", "Dagu's port on the lane's loopback")
DAGU_WAIT = _s("NEV_DAGU_WAIT", "3600", "seconds `nev dagu run` follows a run")
DAGU_ANSWER_WAIT = _s(
    "NEV_DAGU_ANSWER_WAIT", "90", "seconds `nev job submit` waits for a lane's Dagu that does not "
    "answer (the lane rebooting, its Dagu starting) before exit 3, nothing submitted")
DAGU_BINARY = _s("NEV_DAGU_BINARY", None, "the pinned Dagu release binary to install on lanes")
DAGU_DIR = _s("NEV_DAGU_DIR", "~/dagu", "where Dagu lives on a lane (binary, home, logs), under the lane user's home")
DAGU_POLL = _s("NEV_DAGU_POLL", "15", "seconds between status reads while `nev dagu run`/`watch` follow a run")
DAGU_COORD_PORT = _s("NEV_DAGU_COORD_PORT", "50055", "Dagu coordinator gRPC port (distributed mode; loopback-only in single mode)")
DAGU_PKI_DIR = _s("NEV_DAGU_PKI_DIR", "~/.local/state/nev/dagu-pki", "the distributed mode's CA and lane certificates (mode 600, never committed, never on the NAS)")
# Rig
RIG_FILE = _s("NEV_RIG_FILE", "rig/rig.local.json", "roles, hosts and jump host (gitignored)")
RIG_NOTES = _s("NEV_RIG_NOTES", "~/.local/share/nev/rig-notes", "local rig notes: snapshots and the change log")
INVENTORY = _s("NEV_INVENTORY", "~/.local/share/nev/inventory.json", "the inventory snapshot")
INVENTORY_LANE = _s("NEV_INVENTORY_LANE", None,
                    "index of the lane whose snapshot (its collector's, "
                    "~/.local/share/nev/inventory.json there) `nev rig status`, "
                    "`nev rig metrics` and the dashboard read over SSH when NEV_INVENTORY "
                    "names no file here (`nev box env` sets 0)")
INVENTORY_PORT = _s("NEV_INVENTORY_PORT", "8787", "port of the HTTP inventory `nev rig advertise` serves")
MDNS_INTERFACE = _s("NEV_MDNS_INTERFACE", None, "address mDNS browses/advertises on (never all interfaces)")
INVENTORY_MAX_AGE = _s("NEV_INVENTORY_MAX_AGE", "900", "seconds before the inventory check calls a snapshot stale")
PROBE_EVERY = _s("NEV_PROBE_EVERY", "300", "seconds between probe rounds of `nev rig probe --every`")
PROBE_TIMEOUT = _s("NEV_PROBE_TIMEOUT", "30", "seconds one alias probe may take before it counts as failed")
PROBE_FAILS = _s("NEV_PROBE_FAILS", "2", "failed probes in a row before a ready alias turns failing")
PROBE_OKS = _s("NEV_PROBE_OKS", "2", "answered probes in a row before a failing alias turns ready")
THROUGHPUT_DIR = _s("NEV_THROUGHPUT_DIR", "~/.local/share/nev/throughput", "where `nev rig throughput` keeps each alias's last sweep (JSON)")
CAPACITY_FILE = _s("NEV_CAPACITY_FILE", "bench/capacity.json", "declared per-class power figures, roles and budgets, candidate size")
QUEUE_WINDOW = _s("NEV_QUEUE_WINDOW", "86400",
                  "seconds of the queue-wait window of `nev rig metrics` and the dashboard: p50, p95 "
                  "and max over the jobs and draws whose wait ended within it")
DASHBOARD_REFRESH = _s("NEV_DASHBOARD_REFRESH", "15", "seconds between the dashboard's collections (and page reloads)")
STATE_DIR = _s("NEV_STATE_DIR", "~/.local/state/nev", "local state: approvals, job results, locks, port forwards (forwards/)")
NOTIFY_TIMEOUT = _s("NEV_NOTIFY_TIMEOUT", "5",
                    "seconds one webhook POST may take (the rig file's notify, docs/notify.md); "
                    "one that fails is kept in NEV_STATE_DIR/notify/outbox.json for the next tick")
NOTIFY_ALIAS_DOWN_S = _s("NEV_NOTIFY_ALIAS_DOWN_S", "1800",
                         "seconds an alias is not ready (the probe's status) before the webhook "
                         "hears of it (once; its recovery once more)")
MEND_PER_HOUR = _s("NEV_MEND_PER_HOUR", "3",
                   "times the tick starts one pool's dead HAProxy or serving unit again in an hour "
                   "(rig/serving/mend.py); past it, and at 0, it only names what it leaves")
NOTIFY_FORWARD_DOWN_S = _s("NEV_NOTIFY_FORWARD_DOWN_S", "60",
                           "seconds a port forward's client keeps failing (none up for 10 s) "
                           "before the webhook hears of it")
STATUS_FILE = _s("NEV_STATUS_FILE", None,
                  "a file every nev command rewrites as it exits with one line saying whose its "
                  "exit status is: `command N` (the remote command's own status, passed through "
                  "by `nev lane run|on`) or `own N NAME` (nev's own code, docs/exit-codes.md); a "
                  "script tells a failing test from an unreachable lane by it")
# Landing
LAND_LOCK_WAIT = _s("NEV_LAND_LOCK_WAIT", "3600", "seconds `nev land` waits for another landing's lock before refusing")
UNATTENDED = _s("NEV_UNATTENDED", None, "set to 1 by the tick (`nev job poll`) and in every job "
                "stage's environment: no person is present, so `nev land --reviewed-by` refuses")
LAND_FAULT = _s("NEV_LAND_FAULT", None, "test only: `nev land` SIGKILLs itself at this phase (before-rebase, gate, before-ref-update, after-ref-update, cleanup)")
# Jobs
JOB_MIN_FREE_GB = _s("NEV_JOB_MIN_FREE_GB", "20", "free GiB a job needs on its workdir's filesystem (requirements check)")
JOB_BROWSERS = _s("NEV_JOB_BROWSERS", "chromium|chromium-browser,firefox-esr|firefox,WebKitWebDriver",
                  "the oracle's three browsers a writer job needs (commas between browsers, | between names)")
JOB_MIN_LEFT = _s("NEV_JOB_MIN_LEFT", "600", "seconds of the wall-clock limit a job must have left to start a stage")
JOB_STATE = _s("NEV_JOB_STATE", None, "a job's state folder (default NEV_STATE_DIR/jobs/<name>)")
INSTALL = _s("NEV_INSTALL", None,
             "the lane install of nev a run is pinned to (set by nev itself when it runs from "
             "`~/.local/share/nev/installs/<key>`; its children run that install's nev)")
INSTALLS_KEEP = _s("NEV_INSTALLS_KEEP", "2",
                   "how many of a lane's nev installs the sweep keeps (the newest made current, "
                   "the current one among them); one in use is kept too")
AGENT_KEEP_HOURS = _s("NEV_AGENT_KEEP_HOURS", "24",
                      "the sweep keeps a lane's cached agents used within this many hours (another "
                      "development box's, on an older or newer nev, is then not sent again)")
JOB_INSTALL_NEV = _s("NEV_JOB_INSTALL_NEV", "1", "`nev job submit` installs this nev on the lane first (`nev lane install`; 0 skips)")
LEDGER_NAME = _s("NEV_LEDGER_NAME", None, "the ledger file batches are filed under (default: the worktree's folder name, on a lane its copy's `<folder>-<key>`; a job's stages get the job's name)")
JOB_RUN_ID = _s("NEV_JOB_RUN_ID", None, "the Dagu run id a job's run is part of (set by the job workflow)")
# Rig-in-a-box
BOX_DIR = _s("NEV_BOX_DIR", ".box", "where boxes keep state and configs (one folder per box name)")
BOX_NAME = _s("NEV_BOX_NAME", "nevbox", "prefix of the box's namespaces, bridge and users")
BOX_NET = _s("NEV_BOX_NET", "198.18.0", "the /24 (inside 198.18.0.0/15) the box's hosts are addressed from")
BOX_LANES = _s("NEV_BOX_LANES", "lxc", "how the box makes its lanes: lxc (unprivileged LXC guests, as on the rig) or "
               "netns (a namespace + sshd sharing this machine's filesystem: the quick local loop)")
LXC_CACHE = _s("NEV_LXC_CACHE", "/var/lib/nev-lxc", "where LXC lane images are cached (one folder per recipe) and the "
               "box's guests live (an absolute path the guests' root, uid 100000, can traverse)")
BOX_KEEP = _s("NEV_BOX_KEEP", None, "when set to 1, the test fixture leaves the box up at the end")
BOX_REGISTRY = _s("NEV_BOX_REGISTRY", "/var/lib/nev-box", "the machine-wide list of boxes, their users and locks "
                  "(so boxes never take each other's names or nets)")
# Engine, corpora and floors (crates_bridge, bench/floors.py)
ENGINE_DIR = _s("NEV_ENGINE_DIR", "crates_bridge/engine", "the engine's Cargo workspace, relative to the repository root")
CORPUS_DIR = _s("NEV_CORPUS_DIR", "corpus", "where corpora live (corpus/<name>/): `nev oracle build` writes them, "
                "batches and floors read them; relative to the repository root")
SPECS_DIR = _s("NEV_SPECS_DIR", "bench/specs", "the spec texts of the generated functions "
              "(<function>.md), relative to the repository root; a function without one there takes "
              "nev's own (bench/specs)")
PROVENANCE_REGEN = _s("NEV_PROVENANCE_REGEN", None, "when set to 1, the tick submits a regeneration "
                      "job for each function `nev provenance stale` says to regenerate (also "
                      "through tracks.json specWatch.pollEnv)")
REGEN_MAX = _s("NEV_REGEN_MAX", "2", "regeneration jobs the tick keeps submitted at once, at most")
REGEN_BATCH = _s("NEV_REGEN_BATCH", "nev batch run {function} --supersede --seed-failures && "
                 "git checkout -- {floor}", "the batch stage of a regeneration job ({function}: "
                 "its name; {floor}: its floor file, protected, put back)")
CORPUS_STORE = _s("NEV_CORPUS_STORE", None, "the corpus store every lane copy shares (one folder per corpus key, "
                  "built once under a lock); on a lane <NEV_LANE_SHARED>/corpora when unset, elsewhere none")
SUITE_STORE = _s("NEV_SUITE_STORE", None,
                 "where conformance suites' pinned checkouts are fetched once for every lane copy "
                 "(`<suite>-<commit>/`); on a lane <NEV_LANE_SHARED>/suites when unset, elsewhere "
                 "none (the suite commands then run on a lane)")
CORPUS_CASES = _s("NEV_CORPUS_CASES", "1000", "seeds per corpus (0 ... N-1): the default of `nev oracle build --cases` "
                  "and the size of every corpus the floors check and `nev scores` build")
# The sandbox for model-written code (lanes/base/sandbox.py, docs/sandbox.md)
SANDBOX_MEMORY_MB = _s("NEV_SANDBOX_MEMORY_MB", "2048", "address-space cap of one sandboxed candidate run, MiB (a "
                       "candidate past it is `killed: memory cap`)")
SANDBOX_READ = _s("NEV_SANDBOX_READ", None, "folders a verify in the sandbox may also read (colon-separated; "
                  "nothing besides its copy, nev, the toolchain and /usr by default)")
SANDBOX_WRITE = _s("NEV_SANDBOX_WRITE", None, "folders a verify in the sandbox may also write (colon-separated; "
                   "nothing besides its copy by default): an operator's choice, never a track's")
SANDBOX_ENV = _s("NEV_SANDBOX_ENV", None, "environment variables a verify in the sandbox also gets (comma-separated "
                 "names; a secret-named one never): it gets the non-secret NEV_* settings and nothing else by default")
TRUTH_SOCKET = _s("NEV_TRUTH_SOCKET", None, "set by nev for a verify in the sandbox: the socket of the oracle "
                  "builder outside the jail, which renders the corpora the verify asks for (never set it by hand)")
TRUTH_STAGING = _s("NEV_TRUTH_STAGING", None, "set by nev for a verify in the sandbox: the read-only folder the "
                   "builder outside leaves the corpora in")
STORE_SOCKET = _s("NEV_STORE_SOCKET", None, "set by a gate's jail on a lane: the socket of nev's store "
                  "builder outside the jail, which renders corpora and fetches suites into the share's "
                  "store for the gate (the store is read-only inside; never set it by hand)")
SANDBOX_SCRATCH_MB = _s("NEV_SANDBOX_SCRATCH_MB", "256", "size of a sandboxed process's private /tmp, MiB")
COMPILE_BUDGET_S = _s(
    "NEV_COMPILE_BUDGET_S", "30",
    "the longest one compile of a batch's candidates may take, seconds: past it the batch's "
    "culprits are found and judged `compile timed out`, the others compiled without them (docs/sandbox.md, "
    "\"The compile budget\")")
COMPILE_MEMORY_MB = _s(
    "NEV_COMPILE_MEMORY_MB", "2048",
    "address-space cap of one rustc run on candidates, MiB (a candidate that needs more is judged "
    "`compiler ran out of memory`)")


def all_settings() -> list[Setting]:
    return list(_REGISTRY.values())


# What a value must be, beyond a string: a whole number, a number, or a file that exists and can
# be read (`nev settings` checks each value that is set; the readers refuse it when they read it).
# A setting whose default is a number is a number too.
WHOLE = (DAGU_LANE, INVENTORY_LANE, DAGU_PORT, DAGU_COORD_PORT, INVENTORY_PORT, BUDGET_TOKENS,
         MAX_BATCHES, ESCALATE_AFTER, PROBE_FAILS, PROBE_OKS, INSTALLS_KEEP, REGEN_MAX,
         CORPUS_CASES, SANDBOX_MEMORY_MB, SANDBOX_SCRATCH_MB)
FILES = (SSH_KEY, KNOWN_HOSTS, MODEL_KEY_FILE, FORGE_TOKEN_FILE, GATEWAY_ADMIN_KEY_FILE,
         DAGU_BINARY, LANES_FILE, RIG_FILE, FOLKNET_FILE, CAPACITY_FILE)
CHECKED_BY_READER = (LANES_FILE, RIG_FILE, FOLKNET_FILE)
# Relative defaults that name nev's own files: read in nev's checkout, wherever nev runs.
NEV_RELATIVE = (LANES_FILE, RIG_FILE, FOLKNET_FILE, CAPACITY_FILE, BOX_DIR)


def problem(setting: Setting, environ: Mapping[str, str] | None = None) -> str | None:
    """What is wrong with the value the environment gives `setting` (None: nothing, or unset)."""
    raw = given(setting, environ)
    if raw is None:
        return None
    if setting in WHOLE:
        try:
            int(raw)
        except ValueError:
            return f"{setting.name}={raw!r} is not a whole number"
    elif setting.default is not None and _number(setting.default) and not _number(raw):
        return f"{setting.name}={raw!r} is not a number (default {setting.default})"
    if setting in FILES:
        p = get_path(setting, environ) or Path(raw)     # relative to the config file, from it
        where = source(setting, environ)
        named = (f"{setting.name.removeprefix('NEV_').lower()} in the {where}"
                 if where.startswith("config ") else setting.name)
        if not p.exists():
            return f"the file {p} that {named} names does not exist"
        if setting in CHECKED_BY_READER:
            return None         # its reader names what is wrong with it (`nev settings`' files)
        if not p.is_file():
            return f"{p}, which {named} names, is not a file"
        if not os.access(p, os.R_OK):
            return f"the file {p} that {named} names cannot be read"
    return None


def _number(raw: str) -> bool:
    try:
        return float(raw) == float(raw)      # NaN is no number here
    except ValueError:
        return False


def given(setting: Setting | str, environ: Mapping[str, str] | None = None) -> str | None:
    """What the environment sets (NEV_* first, then the legacy GENERA_* name), else the config
    file (for this process's environment only), ignoring the default: None when none sets it."""
    s = _REGISTRY[setting] if isinstance(setting, str) else setting
    return _given(s, environ)[0]


def source(setting: Setting | str, environ: Mapping[str, str] | None = None) -> str:
    """Where a setting's value comes from: its NEV_* name, the legacy name, `config FILE`,
    `default` or `unset`."""
    s = _REGISTRY[setting] if isinstance(setting, str) else setting
    raw, where = _given(s, environ)
    if raw is not None:
        return where
    return "default" if s.default is not None else "unset"


_SECRETS: dict[str, bool] = {}


def _secrets() -> dict[str, bool]:
    """Every setting the config file may hold -> whether it is a secret (made once)."""
    if not _SECRETS:
        _SECRETS.update({n: x.secret for n, x in _REGISTRY.items() if x is not CONFIG})
    return _SECRETS


def _given(s: Setting, environ: Mapping[str, str] | None) -> tuple[str | None, str]:
    env = os.environ if environ is None else environ
    for name, where in ((s.name, s.name), (s.legacy, s.legacy + " (legacy)")):
        raw = env.get(name)
        if raw:
            return raw, where
    # the config file of that environment (this process's, or one made from it)
    cfg = config.path_in(env) if s is not CONFIG else None
    if cfg is not None:
        found = config.values(cfg, _secrets())
        if s.name in found:
            return found[s.name], f"config {cfg}"
    return None, ""


def get(setting: Setting | str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of a setting: NEV_* first, then the legacy GENERA_* name, then the default."""
    s = _REGISTRY[setting] if isinstance(setting, str) else setting
    raw = given(s, environ)
    return s.default if raw is None else raw


def value(setting: Setting | str, environ: Mapping[str, str] | None = None) -> str:
    """`get` for a setting that always has a value (its default when unset); ConfigError when it has
    neither, so no caller repeats the default."""
    s = _REGISTRY[setting] if isinstance(setting, str) else setting
    raw = get(s, environ)
    if raw is None:
        raise ConfigError(f"{s.name} is not set and has no default; set it")
    return raw


def get_int(setting: Setting | str, environ: Mapping[str, str] | None = None) -> int:
    s = _REGISTRY[setting] if isinstance(setting, str) else setting
    raw = get(s, environ)
    if raw is None:
        raise ConfigError(f"{s.name} is not set and has no default; set it to a whole number")
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{s.name}={raw!r} is not a whole number; set it to one (default {s.default})") from None


def get_float(setting: Setting | str, environ: Mapping[str, str] | None = None) -> float:
    s = _REGISTRY[setting] if isinstance(setting, str) else setting
    raw = get(s, environ)
    if raw is None:
        raise ConfigError(f"{s.name} is not set and has no default; set it to a number")
    try:
        number = float(raw)
    except ValueError:
        number = float("nan")
    if number != number:      # NaN compares false with everything: a guard set to it would never trip
        raise ConfigError(f"{s.name}={raw!r} is not a number; set it to one (default {s.default})")
    return number


def get_flag(setting: Setting | str, environ: Mapping[str, str] | None = None) -> bool:
    raw = get(setting, environ)
    return raw is not None and raw.strip().lower() in {"1", "true", "yes", "on"}


NEV_ROOT = Path(__file__).resolve().parents[2]


def get_path(setting: Setting | str, environ: Mapping[str, str] | None = None) -> Path | None:
    """A path setting, `~` expanded: relative in the config file, relative to that file; a
    relative default of nev's own files (NEV_RELATIVE), relative to nev's checkout; never to the
    folder nev runs in (an environment variable is taken as given)."""
    s = _REGISTRY[setting] if isinstance(setting, str) else setting
    raw = get(s, environ)
    if raw is None:
        return None
    p = Path(os.path.expanduser(raw))
    if p.is_absolute():
        return p
    where = source(s, environ)
    if where.startswith("config "):
        return Path(where.removeprefix("config ")).parent / p
    if where == "default" and s in NEV_RELATIVE:
        return NEV_ROOT / p
    return p


def path(setting: Setting | str, environ: Mapping[str, str] | None = None) -> Path:
    """`get_path` for a setting that always has a value (see `value`)."""
    value(setting, environ)
    p = get_path(setting, environ)
    assert p is not None
    return p


def path_under(setting: Setting | str, root: Path, environ: Mapping[str, str] | None = None) -> Path:
    """A folder setting read relative to `root` (a repository) unless it is absolute (wherever
    the value came from: these name folders of the repository)."""
    p = Path(os.path.expanduser(value(setting, environ)))
    return p if p.is_absolute() else root / p
