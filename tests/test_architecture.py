"""The dependency direction of docs/architecture.md holds: each package imports only what it may."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"bench", "jobs", "lanes", "rig", "dagu", "crates_bridge"}
ALLOWED = {
    "rig": PACKAGES,
    "jobs": {"jobs", "lanes", "dagu", "bench"},
    "bench": {"bench", "crates_bridge", "lanes"},
    "dagu": {"dagu", "lanes"},
    "lanes": {"lanes"},
    "crates_bridge": {"crates_bridge"},
}
# Benchmark scripts are programs that drive the whole rig (they bring up the box), not part of
# the bench package's code.
EXEMPT = {ROOT / "bench" / "perf"}


def imported_packages(path: Path) -> set[str]:
    return imported_by(path.read_text(encoding="utf-8"))


def imported_by(source: str) -> set[str]:
    """Our packages a module imports: import statements, and importlib.import_module("x...") /
    __import__("x...") calls with a literal name (an import hidden that way is still one)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("__import__", "import_module")))):
            names = [node.args[0].value]
        else:
            continue
        found |= {n.split(".")[0] for n in names} & PACKAGES
    return found


def test_the_import_rules_see_imports_hidden_behind_importlib():
    hidden = 'import importlib\n\ndef f():\n    return importlib.import_module("jobs.land")\n'
    assert imported_by(hidden) == {"jobs"}                                    # lanes may not: caught
    assert imported_by('m = __import__("rig.cli")\n') == {"rig"}
    assert imported_by('from importlib import import_module\nimport_module("bench.batch")\n') == {"bench"}
    assert not {"jobs"} <= ALLOWED["lanes"]
    assert imported_by('import importlib\nimportlib.import_module("json")\n') == set()   # not ours


def test_each_package_imports_only_what_the_architecture_allows():
    bad = []
    checked = 0
    for pkg, allowed in ALLOWED.items():
        for f in (ROOT / pkg).rglob("*.py"):
            if any(e in f.parents for e in EXEMPT) or "target" in f.parts:
                continue
            checked += 1
            extra = imported_packages(f) - allowed
            if extra:
                bad.append(f"{f.relative_to(ROOT)} imports {sorted(extra)}")
    assert checked > 100
    assert not bad, "\n".join(bad)


def test_lane_program_is_stdlib_only():
    # The lane agent is sent whole with every call and runs with the lane's bare python3: every
    # module of the subpackage is sent, and each imports only the stdlib and modules sent before it.
    import sys

    from lanes import payload

    sent = [m for m in payload.LANE_MODULES if m != "lanes"]   # `lanes`: an empty namespace there
    assert set((ROOT / "lanes" / "agent").rglob("*.py")) <= {payload.source_path(m) for m in sent}
    earlier = {"lanes"}

    def allowed(module: str) -> bool:
        return module.split(".")[0] in sys.stdlib_module_names | {"__future__"} or module in earlier

    for name in sent:
        tree = ast.parse(payload.source_path(name).read_text(encoding="utf-8"))
        bad = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += [a.name for a in node.names if not allowed(a.name)]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level or not allowed(module):
                    bad.append("." * node.level + module)
                bad += [f"{module}.{a.name}" for a in node.names
                        if f"{module}.{a.name}" in payload.LANE_MODULES and f"{module}.{a.name}" not in earlier]
        assert not bad, (name, bad)
        earlier.add(name)
