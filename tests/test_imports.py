"""The import graph (ouroboros, simulators, analysis; every import statement, function-local ones included, and
the package __init__ each one runs): no cycles; the core (contracts, draft, verify, sampling, decode, metrics,
phrase pool, backends, strategies, serving, batch) imports no entry point (a module with a `__main__` guard, or a
`__main__`), and nothing it reaches, however indirectly, imports Hydra, OmegaConf, wandb, the simulator or the
analysis package; no entry point imports another; no module of ouroboros reaches the simulator or the analysis
package, directly or through any chain of imports (both sit above it: the sweep's report writer is an entry point
too), nor names one of the simulator's modules in a string, nor imports or resolves a module by a name it
computes (importlib, __import__, a registry's resolve("module:attr")): backend kinds other than the core's hf are
plugins found through the `ouroboros.backends` entry points (pyproject.toml; ouroboros/backends/registry.py); no
module of ouroboros branches on a backend kind's name; nobody imports another module's private names or Hydra's
`_internal` package."""

import ast
import pathlib
import re

import pytest

from ouroboros.errors import OuroborosError

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("ouroboros", "simulators", "analysis")
CORE = ("ouroboros.errors", "ouroboros.loop", "ouroboros.strategies.phrase_pool", "ouroboros.backends",
        "ouroboros.strategies",
        "ouroboros.serving", "ouroboros.serving.batch")
EDGE_LIBRARIES = ("hydra", "omegaconf", "wandb", "simulators", "analysis")   # only the edges (entry points, config)
REGISTRY = "ouroboros.backends.registry"


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
    assert not bad - {WEIGHTS}


# The one core -> entry-point edge allowed: the model loader gets pinned weights from ouroboros.fetch's functions (the
# fetch CLI's main is a few lines around them); fetch reaches no edge library (test_core_reaches_no_edge_library).
WEIGHTS = ("ouroboros.backends.models", "ouroboros.fetch")


def _entry_points(mods: dict[str, ast.Module]) -> set[str]:
    return {m for m, tree in mods.items() if is_entry_point(m, tree)}


MODS = modules()


@pytest.mark.parametrize("module", sorted(_entry_points(MODS)))
def test_no_entry_point_imports_another(module):
    """An entry point parses and hands over to library modules; what two entry points share lives below both."""
    entry = _entry_points(MODS)
    bad = sorted(t for t in graph(MODS)[module] if t in entry)
    assert not bad, f"{module} imports the entry point(s) {bad}"


def reaches(edges: dict[str, set[str]], module: str) -> set[str]:
    """Every module of the three packages that importing `module` can import, however indirectly (itself included)."""
    seen, todo = {module}, [module]
    while todo:
        for w in edges[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def libraries(mods: dict[str, ast.Module], edges: dict[str, set[str]], module: str) -> dict[str, str]:
    """Top-level package -> the module (of those `module` reaches) that imports it: the transitive closure."""
    out: dict[str, str] = {}
    for m in sorted(reaches(edges, module)):
        for mod, _ in imports(mods[m]):
            out.setdefault(mod.split(".")[0], m)
        out.setdefault(m.split(".")[0], m)
    return out


EDGES = graph(MODS)


@pytest.mark.parametrize("module", sorted(m for m in MODS if m.startswith(CORE)))
def test_core_reaches_no_edge_library(module):
    """The core never imports Hydra, OmegaConf, wandb, the simulator or analysis: not even inside a function, and
    not through any module it imports, however indirectly."""
    bad = {lib: via for lib, via in libraries(MODS, EDGES, module).items() if lib in EDGE_LIBRARIES}
    assert not bad, f"{module} reaches {sorted(bad)} (imported by {bad})"


UPPER = ("simulators", "analysis")   # the packages above ouroboros: they import it, never the other way round


@pytest.mark.parametrize("module", sorted(m for m in MODS if m.startswith("ouroboros")))
def test_ouroboros_reaches_no_simulator_or_analysis_module(module):
    """No module of ouroboros imports the simulator or the analysis package, directly or through a chain of imports
    (a helper in another package that imports it counts): a simulated run reaches the simulator through its backend
    entry point only, a sweep's summary run the report writer through its `ouroboros.reports` entry point."""
    bad = {lib: via for lib, via in libraries(MODS, EDGES, module).items() if lib in UPPER}
    assert not bad, f"{module} reaches {sorted(bad)} (imported by {bad})"


RUNTIME = sorted(m for m in MODS if m.startswith("simulators") and not m.startswith("simulators.lab")
                 and m != "simulators.__main__")
LAB = "simulators.lab"   # the simulator's calibration and checking tooling: `python -m simulators ...` only


def test_runtime_and_lab_are_both_there():
    assert {"simulators.backend", "simulators.pair", "simulators.plugin", "simulators.trust"} <= set(RUNTIME)
    assert {"simulators.lab.cli", "simulators.lab.decisions.stats", "simulators.lab.spread"} <= set(MODS)
    assert LAB + ".cli" in reaches(EDGES, "simulators.__main__")   # the check below sees a function-local import


@pytest.mark.parametrize("module", RUNTIME)
def test_runtime_simulator_reaches_no_lab_module(module):
    """The runtime simulator (everything a simulated run can reach: simulators/*.py) never imports the lab, directly,
    inside a function or through a chain of imports: the lab imports the runtime, never the other way round."""
    bad = sorted(m for m in reaches(EDGES, module) if m == LAB or m.startswith(LAB + "."))
    assert not bad, f"{module} reaches the lab: {bad}"


def test_simulators_main_is_only_the_labs_door():
    """`python -m simulators` hands over to the lab's command tree (simulators/lab/cli.py), loaded only when it runs:
    importing simulators.__main__ imports nothing else of the simulator at module level."""
    assert EDGES["simulators.__main__"] <= {LAB, LAB + ".cli"}
    tree = MODS["simulators.__main__"]
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all(getattr(n, "module", None) in ("__future__", None) for n in top), "module-level import of the lab"


def test_a_simulated_run_loads_no_lab_module():
    """Importing every runtime module (and the backend kind's plugin) leaves the lab unloaded."""
    import subprocess
    import sys

    code = ("import importlib, sys\n"
            f"for m in {RUNTIME!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith('simulators.lab')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


IMPORTERS = ("import_module", "__import__", "run_module", "find_spec", "load_module", "resolve")   # name -> module
FILE_IMPORTERS = {"spec_from_file_location": 1, "run_path": 0}   # path -> module (its path argument's index): a
#                                                                   path fixed in the code is a name too
# a string naming a module of the simulator ("simulators", "simulators.pair", "simulators:make_pair"), or an import
# reference "package.module:attr" (or "ouroboros:attr", ...: one of the three packages)
SIMULATOR_REF = re.compile(r"^simulators([.:][A-Za-z_]\w*)*$")
NAME = r"[A-Za-z_]\w*"
IMPORT_REF = re.compile(rf"^(ouroboros|simulators|analysis|{NAME}(\.{NAME})+):{NAME}(\.{NAME})*$")


def string_refs(tree: ast.Module) -> list[str]:
    """Every way a module names a module to load it at run time: a string constant that names a simulator module
    or reads as an import reference ("pkg.module:attr"), and any call of an importer (importlib.import_module,
    __import__, runpy, a registry's resolve(...)) with arguments, whatever they are."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and (SIMULATOR_REF.match(n.value)
                                                                          or IMPORT_REF.match(n.value)):
            out.append(repr(n.value))
        elif isinstance(n, ast.Call) and (n.args or n.keywords and not all(k.arg == "strict" for k in n.keywords)):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            k = FILE_IMPORTERS.get(name, -1)
            if name in IMPORTERS or 0 <= k < len(n.args) and isinstance(n.args[k], ast.Constant):
                out.append(f"{name}({ast.unparse(n.args[max(k, 0)]) if n.args else '...'})")
    return sorted(set(out))


def test_string_refs_sees_every_form():
    tree = ast.parse("import importlib\nimportlib.import_module('simulators.pair')\n"
                     "X = 'simulators.serving:SimEngine'\nregistry.resolve('simulators:make_pair')\n"
                     "Y = 'simulators/ is the simulator'\n"
                     "Z = 'ouroboros.backends.hf:HFEngine'\nmod = importlib.import_module(name)\n__import__(x)\n"
                     "p = pathlib.Path('.').resolve()\nq = path.resolve(strict=True)\nT = '12:30'\nS = 'row:hits'\n"
                     "importlib.util.spec_from_file_location('m', path)\nrunpy.run_path('simulators/pair.py')\n")
    assert string_refs(tree) == ["'ouroboros.backends.hf:HFEngine'", "'simulators.pair'",
                                 "'simulators.serving:SimEngine'", "'simulators:make_pair'", "__import__(x)",
                                 "import_module('simulators.pair')", "import_module(name)",
                                 "resolve('simulators:make_pair')", "run_path('simulators/pair.py')"]


@pytest.mark.parametrize("module", sorted(m for m in MODS if m.startswith("ouroboros")))
def test_ouroboros_names_no_module_in_a_string(module):
    """A module loaded by a name in a string escapes every import rule above: the core loads none (a backend kind
    other than hf is an entry point, ouroboros/backends/registry.py)."""
    bad = string_refs(MODS[module])
    assert not bad, f"{module} loads a module by name: {bad}"


KINDS = {"hf", "sim"}   # the backend kinds this repository ships: the core's own and the simulator's plugin


def declared_plugins() -> set[str]:
    """The backend kinds pyproject.toml declares as entry points (group `ouroboros.backends`)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.partition('[project.entry-points."ouroboros.backends"]')[2].split("\n[", 1)[0]
    return set(re.findall(r"^(\w+)\s*=", section, flags=re.M))


def name_branches(tree: ast.Module, names: set[str]) -> list[str]:
    """Comparisons of a backend's or a kind's value (`rec.backend == "sim"`, `run.backend_kind != "hf"`) with a
    backend kind's name."""
    out = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Compare):
            continue
        sides = [n.left, *n.comparators]
        consts = {e.value for s in sides for e in ([s] + list(getattr(s, "elts", []))) if isinstance(e, ast.Constant)}
        if consts & names and any(re.search(r"backend|kind", ast.unparse(s)) for s in sides
                                  if not isinstance(s, ast.Constant | ast.Tuple | ast.List | ast.Set)):
            out.append(ast.unparse(n))
    return out


def test_name_branches_sees_every_form():
    tree = ast.parse("a = rec.backend == 'sim'\nb = run.backend_kind != 'hf'\nc = kind in ('sim', 'x')\n"
                     "d = self.cfg.schedule == 'hf'\ne = kind == 'tiny'\n")
    assert name_branches(tree, {"hf", "sim"}) == ["rec.backend == 'sim'", "run.backend_kind != 'hf'",
                                                  "kind in ('sim', 'x')"]


# Modules that still branch on a backend's name; the test fails once a listed one no longer does. A record on disk
# names its backend, and the oldest simulated records carry nothing else that says their clock was modelled.
NAME_BRANCHES_LEFT = {"ouroboros.running.record"}


@pytest.mark.parametrize("module", sorted(m for m in MODS if m.startswith("ouroboros")))
def test_ouroboros_never_branches_on_a_backend_name(module):
    """The core asks the run's backend kind (`run.kind`: ouroboros/backends/base.py `BackendKind`) what it can do;
    it never compares a backend's name."""
    bad = name_branches(MODS[module], KINDS)
    if module in NAME_BRANCHES_LEFT:
        assert bad, f"{module} no longer branches on a backend name: drop it from NAME_BRANCHES_LEFT"
    else:
        assert not bad, f"{module} branches on a backend name: {bad}; ask run.kind instead"


def test_backend_kinds_are_objects_behind_one_interface():
    """Every kind `backend=` takes is a BackendKind that opens its own pair and serving engine; the plugins are the
    entry points pyproject.toml declares (the installed ones: `pip install -e .` after editing it), and their
    modules stay out of the core's import graph."""
    from ouroboros.backends import registry
    from ouroboros.backends.base import BackendKind

    assert registry.names() == [registry.core().name, *sorted(declared_plugins()), registry.AUTO]
    assert set(registry.names()) == KINDS | {registry.AUTO}
    for name in KINDS:
        kind = registry.get(name)
        assert isinstance(kind, BackendKind) and kind.name == name
        assert type(kind).open_pair is not BackendKind.open_pair and type(kind).engine is not BackendKind.engine
        module = type(kind).__module__
        assert module in MODS and (kind is registry.core()) == module.startswith("ouroboros.")
    assert registry.get("auto", {"kind": "profile"}).simulated and not registry.get("auto", {"kind": "tiny"}).simulated
    with pytest.raises(OuroborosError, match=r"^unknown backend 'gpu'; known: hf, sim, auto$"):
        registry.get("gpu")


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


def later_kind():
    """A backend kind a later package might declare: it claims the model kind `later` and refuses at setup."""
    from ouroboros.backends.base import BackendKind

    class Later(BackendKind):
        name = "later"
        model_kinds = ("later",)
        model_noun = "later-backend model"

        def setup(self, run):
            raise OuroborosError(f"later: setup asked for {run.model['kind']} on {self.name}")

    return Later()


LATER = None


def test_a_later_backend_plugs_in_as_an_entry_point(monkeypatch):
    """A kind declared under the entry points is what `backend=<its name>` and `backend=auto` (for a model it
    claims) run on, with no change to the core: validate asks it, and refuses its model kinds on another kind."""
    from importlib.metadata import EntryPoint

    from ouroboros.backends import registry
    from ouroboros.config import BackendConfig, LoggerConfig, RunConfig, StrategyConfig, WandbConfig, validate

    global LATER
    LATER = later_kind()
    declared = {**registry._declared(), "later": EntryPoint("later", f"{__name__}:LATER", registry.GROUP)}
    monkeypatch.setattr(registry, "_declared", lambda: declared)
    registry._plugin.cache_clear()
    try:
        assert registry.names() == ["hf", "later", "sim", "auto"] and registry.get("later") is LATER
        quiet = LoggerConfig(console=False, wandb=WandbConfig(mode="disabled"))

        def run(backend, model):
            return RunConfig(model=model, strategy=StrategyConfig("vanilla"), dataset={"kind": "synthetic"},
                             backend=BackendConfig(kind=backend), logger=quiet, out=None)

        for backend in ("later", "auto"):
            with pytest.raises(OuroborosError, match="^later: setup asked for later on later$"):
                validate(run(backend, {"kind": "later"}))
        with pytest.raises(OuroborosError, match="^model kind 'later' is a later-backend model: use backend=later$"):
            validate(run("hf", {"kind": "later"}))
    finally:
        registry._plugin.cache_clear()
