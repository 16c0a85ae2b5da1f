"""The lane agent packed for the trip: its modules (`lanes/agent/`, with `lanes/dotenv.py`;
stdlib only) stripped, zlib'd and named by their content hash (`lane_agent`), and the one command
line that starts it on a lane (`lane_command`: the bootstrap, which holds no secret). A lane that
caches that hash runs its copy, one that lacks it asks, and the agent travels on the same
channel, once.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from lanes.agent import layout
from lanes.agent.wire import Kind

# The agent as sent, each module under its own name, in import order: each imports only the
# stdlib and modules before it (tests/test_architecture.py). `lanes` is an empty namespace on the
# lane, so nothing but these modules can be imported from it there.
LANE_MODULES = ("lanes", "lanes.dotenv", "lanes.agent", "lanes.agent.errors", "lanes.agent.layout",
                "lanes.agent.wire", "lanes.agent.wiretypes", "lanes.agent.messages", "lanes.agent.guard", "lanes.agent.git",
                "lanes.agent.links", "lanes.agent.procs", "lanes.agent.output",
                "lanes.agent.mirror", "lanes.agent.copy", "lanes.agent.writer", "lanes.agent.installs",
                "lanes.agent.root", "lanes.agent.storeserve",
                "lanes.agent.retention", "lanes.agent.gate", "lanes.agent.main")
PACKAGES = ("lanes", "lanes.agent")

# The only argv on the lane, with the agent's hash after it: runs the lane's cached agent when
# its content hashes to that name; else asks for the agent (NEED_AGENT), keeps the frames that came
# ahead of it for the agent, caches it (atomically, only when it matches the hash) and runs it.
# Double quotes only: the command line is single-quoted whole, and it crosses the slow uplink.
BOOTSTRAP = ('import sys,os,zlib;from hashlib import sha256 as H\n'
             f'h=sys.argv[1];f=os.path.expanduser("~/{layout.AGENT_CACHE}/")+h;q=b""\n'
             'try:s=open(f,"rb").read()\n'
             'except OSError:s=b""\n'
             'if H(s).hexdigest()!=h:\n'
             ' if s:print("the cached agent does not match its hash: sent again",file=sys.stderr)\n'
             ' b=sys.stdin.buffer;o=sys.stdout.buffer\n'
             f' o.write(b"{Kind.NEED_AGENT.value.decode()}"+bytes(4));o.flush()\n'
             ' while 1:\n'
             '  x=b.read(5)\n'
             '  if len(x)<5:sys.exit(1)\n'
             '  y=b.read(int.from_bytes(x[1:],"big"))\n'
             f'  if x[:1]==b"{Kind.AGENT.value.decode()}":break\n'
             '  q+=x+y\n'
             ' s=zlib.decompress(y)\n'
             ' if H(s).hexdigest()==h:\n'
             '  try:os.makedirs(os.path.dirname(f),0o700,exist_ok=True);t=f+".tmp%d"%os.getpid();'
             'open(t,"wb").write(s);os.replace(t,f)\n'
             '  except OSError:pass\n'
             'exec(s)')

# The agent's content starts with this: it registers each module under its own name, compiles
# and runs it, then the agent's entry with `q` (the frames the bootstrap read first). The modules
# follow. Only the cached agent itself is run from the lane, and only when its content hashes to
# the name the development box sent: nothing that lies beside it (a compiled form of its modules,
# such as older agents kept in `<hash>.code`) is read, since no hash the development box holds
# could check it and a gate could rewrite it (docs/lanes.md, "The agent's code and the installs").
# Compiling costs about 20 ms a start. Each start touches the cached agent: its age is when a
# development box last used it, and the sweep keeps agents used recently
# (`lanes.sweep.stale_agents`: a teammate's is not sent again).
LOADER = ("import sys,types\n"
          "try:os.utime(f)\n"
          "except OSError:pass\n"
          "for k,p,c in M:\n"
          " m=types.ModuleType(k);m.__file__=k;sys.modules[k]=m\n"
          " if p:m.__path__=[]\n"
          " a,_,e=k.rpartition(\".\")\n"
          " if a:setattr(sys.modules[a],e,m)\n"
          " exec(compile(c,k,\"exec\"),m.__dict__)\n"
          "sys.modules[\"lanes.agent.main\"].main(q)\n")


@dataclass(frozen=True)
class Agent:
    """The lane agent as sent: `blob`, the JSON of its modules zlib'd for the trip, and `hash`, the
    sha256 (hex) of that JSON, the name a lane caches it under and checks before running it."""

    blob: bytes
    hash: str


def source_path(module: str) -> Path:
    """The file of one of LANE_MODULES."""
    path = Path(__file__).parent.parent.joinpath(*module.split("."))
    return path / "__init__.py" if module in PACKAGES else path.with_suffix(".py")


@functools.lru_cache(maxsize=1)
def lane_agent() -> Agent:
    """The agent as this development box sends it (~26 KB zlib'd); a lane that holds its hash
    gets none of it."""
    blob, content = _blob()
    return Agent(blob, hashlib.sha256(content).hexdigest())


def lean(source: str) -> str:
    """`source` without its docstrings and comments, every line where it was (a traceback on the
    lane points at the same line here): the agent crosses a slow uplink to every lane that lacks it.
    Built only when the agent's sources change (`_blob`), so its parsers are imported here."""
    import ast
    import tokenize

    lines = source.splitlines(keepends=True)
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            doc = body[0]
            first, last = doc.lineno - 1, (doc.end_lineno or doc.lineno) - 1
            indent = lines[first][:doc.col_offset]
            lines[first:last + 1] = [indent + '""\n'] + ["\n"] * (last - first)
    out = io.StringIO("".join(lines))
    cuts: dict[int, int] = {}
    for tok in tokenize.generate_tokens(out.readline):
        if tok.type == tokenize.COMMENT:
            cuts[tok.start[0] - 1] = tok.start[1]
    lines = "".join(lines).splitlines(keepends=True)
    for row, col in cuts.items():
        lines[row] = lines[row][:col].rstrip() + "\n"
    return "".join(lines)


def _blob() -> tuple[bytes, bytes]:
    """The agent zlib'd, and unpacked. Built once per version of the agent's sources and kept in
    the user's cache: making it (parsing, stripping, compressing ~15 modules) takes about as long
    as a whole warm gate."""
    sources = {name: "" if name == "lanes" else source_path(name).read_text() for name in LANE_MODULES}
    digest = hashlib.sha256(json.dumps([LOADER, sorted(sources.items())]).encode()).hexdigest()[:20]
    cached = _cache_dir() / f"agent-{digest}.zlib"
    try:
        blob = cached.read_bytes()
        return blob, zlib.decompress(blob)
    except (OSError, zlib.error):
        pass
    mods = [(name, name in PACKAGES, lean(src) if src else "") for name, src in sources.items()]
    content = f"M={mods!r}\n{LOADER}".encode()
    blob = zlib.compress(content, 9)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(blob)
        os.replace(tmp, cached)
        _prune_agent_cache(cached.parent, keep=AGENT_CACHE_KEEP)
    except OSError:
        pass     # a read-only cache: built again next time, nothing lost
    return blob, content


AGENT_CACHE_KEEP = 4   # built agents kept in the user's cache: the newest (other checkouts may use them)


def _prune_agent_cache(folder: Path, keep: int) -> None:
    """Only the `keep` newest built agents (and no older form's `.blob`) left in `folder`: one is
    built per version of the agent's sources, so they pile up as nev changes."""
    found = []
    for p in folder.glob("agent-*"):
        if p.suffix in (".zlib", ".blob"):
            try:
                found.append((p.stat().st_mtime, p))
            except OSError:
                pass
    found.sort(reverse=True)
    for _, p in found[keep:]:
        try:
            p.unlink()
        except OSError:
            pass


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nev"


def lane_command(agent_hash: str, python: str = "python3") -> str:
    """The command line that starts the agent of `agent_hash` on a lane (no secret in it). The
    agent is stdlib only: `-I -S` spare it the site and user packages (tens of ms per gate)."""
    import shlex

    return f"{python} -I -S -c {shlex.quote(BOOTSTRAP)} {agent_hash}"
