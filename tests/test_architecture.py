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
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {n.split(".")[0] for n in names} & PACKAGES
    return found


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
