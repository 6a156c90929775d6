"""The import graph (ouroboros, simulators, analysis; every import statement, function-local ones included, and
the package __init__ each one runs): no cycles; the core (contracts, draft, verify, sampling, decode, metrics,
phrase pool, backends, strategies) imports no entry point (a module with a `__main__` guard, or a `__main__`);
nobody imports another module's private names or Hydra's `_internal` package."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("ouroboros", "simulators", "analysis")
CORE = ("ouroboros.contracts", "ouroboros.draft", "ouroboros.verify", "ouroboros.sampling", "ouroboros.decode",
        "ouroboros.metrics", "ouroboros.phrase_pool", "ouroboros.backends", "ouroboros.strategies")


def modules() -> dict[str, ast.Module]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = ast.parse(p.read_text(encoding="utf-8"))
    return out


def imports(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every import statement anywhere in the tree (absolute imports only)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, [a.name for a in node.names]))
    return out


def graph(mods: dict[str, ast.Module]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, tree in mods.items():
        for module, names in imports(tree):
            for target in [module] + [f"{module}.{n}" for n in names]:
                parts = target.split(".")
                for k in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
                    q = ".".join(parts[:k])
                    if q in mods and q != m and not m.startswith(q + "."):
                        edges[m].add(q)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def is_entry_point(name: str, tree: ast.Module) -> bool:
    if name.endswith("__main__"):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "__name__":
            return True
    return False


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert cycles(graph(modules())) == []


def test_core_imports_no_entry_point():
    mods = modules()
    entry = {m for m, tree in mods.items() if is_entry_point(m, tree)}
    assert {"ouroboros.run", "ouroboros.sweep", "analysis.__main__"} <= entry
    edges = graph(mods)
    bad = {(m, t) for m in mods if m.startswith(CORE) for t in edges[m] if t in entry}
    assert not bad


def test_no_private_names_across_modules():
    bad = []
    for m, tree in modules().items():
        for module, names in imports(tree):
            if module.startswith("hydra._internal"):
                bad.append((m, module))
            if module.split(".")[0] in PACKAGES and module != m:
                bad += [(m, f"{module}.{n}") for n in names if n.startswith("_") and not n.startswith("__")]
    assert not bad


def test_sweep_jobs_golden():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ouroboros.sweep import sweep_jobs

    parsed = OverridesParser.create().parse_overrides(["a=1,2", "b=3"])
    assert sweep_jobs(parsed) == [["a=1", "b=3"], ["a=2", "b=3"]]
