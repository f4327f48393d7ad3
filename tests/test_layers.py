"""The layering of docs/architecture.md, checked on the source.

Packages: no package imports one above it (cep <- planner <- local <- actors <- spark_ingest <-
gateway: raycep local's run has its own package, under the gateway's command line), and only
actors/handles.py and gateway/runtime.py import Ray.

Inside ``raycep.cep``: each module belongs to a layer (a sub-package, or ``cep`` for the
top-level modules errors, event and match that every layer uses) and imports only its own
layer and the layers below it (CEP_LAYERS); ``cep/__init__.py``, the package's face, may import
any. No two modules of any package import each other, directly or through others, imports
inside functions included. The tests mirror the packages.
"""
import ast
import pathlib
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = ("cep", "planner", "local", "actors", "spark_ingest", "gateway")
RAY_MODULES = {"actors/handles.py", "gateway/runtime.py"}
#: raycep.cep's layers, bottom up, each with the layers below it that it may import
CEP_LAYERS = {
    "cep": (),                                  # errors, event, match
    "cep.lang": ("cep",),                       # text -> AST -> compiled query
    "cep.store": ("cep",),                      # the index, column batches, arrival order
    "cep.io": ("cep", "cep.store"),             # readers, tables, the codec, match output
    "cep.evaluation": ("cep", "cep.lang", "cep.store"),
    "cep.runtime": ("cep", "cep.lang", "cep.store", "cep.io", "cep.evaluation"),
}
CEP_FACE = "raycep.cep"


def modules(root: pathlib.Path = ROOT) -> dict:
    """``{module name: path}`` of the packages under ``root`` (``cep/io/sources.py`` is
    ``raycep.cep.io.sources``, ``cep/__init__.py`` is ``raycep.cep``)."""
    out = {}
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(("raycep",) + parts)] = path
    return out


def imports(root: pathlib.Path = ROOT):
    """``(module, imported name)`` for every absolute import in the packages, at any depth
    (inside functions too); ``from a import b`` names ``a.b`` where that is a module."""
    known = modules(root)
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield module, alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    yield module, sub if sub in known else node.module


def cep_layer(module: str) -> str | None:
    """The layer of a module of raycep.cep (None for the package's face and for the modules
    of other packages)."""
    parts = module.split(".")
    if parts[:2] != ["raycep", "cep"] or module == CEP_FACE:
        return None
    return "cep." + parts[2] if len(parts) > 3 or f"cep.{parts[2]}" in CEP_LAYERS else "cep"


def upward_cep_imports(root: pathlib.Path = ROOT) -> list:
    """``(module, imported module)`` for each import of a raycep.cep module from a layer it
    may not import."""
    known = modules(root)
    bad = []
    for module, name in imports(root):
        mine = cep_layer(module)
        if mine is None or not name.startswith("raycep.cep"):
            continue
        target = max((m for m in known if name == m or name.startswith(m + ".")), key=len,
                     default=name)
        theirs = CEP_FACE if target == CEP_FACE else cep_layer(target)
        if theirs != mine and theirs not in CEP_LAYERS.get(mine, ()):
            bad.append((module, target))
    return bad


def upward_packages(root: pathlib.Path = ROOT) -> list:
    """``(module, imported name)`` for each import of a package above the module's own."""
    rank = {p: k for k, p in enumerate(LAYERS)}
    upward = []
    for module, name in imports(root):
        parts = name.split(".")
        if parts[0] == "raycep" and len(parts) > 1 and parts[1] in rank and \
                rank[parts[1]] > rank[module.split(".")[1]]:
            upward.append((module, name))
    return upward


def cycles(root: pathlib.Path = ROOT) -> list:
    """The sets of modules that import each other (strongly connected, more than one)."""
    known = modules(root)
    edges: dict = {m: set() for m in known}
    for module, name in imports(root):
        if name in known and name != module:
            edges[module].add(name)
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(known):
        if v not in index:
            visit(v)
    return found


def test_no_package_imports_a_layer_above_it():
    assert upward_packages() == []


def test_every_cep_module_is_in_a_layer():
    """A new sub-package of cep/ is added to CEP_LAYERS, with what it may import."""
    strays = [path.relative_to(ROOT).as_posix() for path in (ROOT / "cep").rglob("*.py")
              if path.parent != ROOT / "cep" and
              "cep." + path.relative_to(ROOT / "cep").parts[0] not in CEP_LAYERS]
    assert strays == []


def test_cep_layers_import_only_themselves_and_layers_below():
    assert upward_cep_imports() == []


def test_no_import_cycle():
    assert cycles() == []


def _test_folders() -> set:
    return {path.parent for path in (ROOT / "tests").rglob("test_*.py")
            if "data" not in path.relative_to(ROOT / "tests").parts}


def test_the_tests_mirror_the_packages():
    """tests/cep/io/ holds the tests of cep/io/, ...; cross-cutting tests stay in tests/."""
    strays = [folder.relative_to(ROOT).as_posix() for folder in _test_folders()
              if not (ROOT / folder.relative_to(ROOT / "tests")).is_dir()]
    assert strays == []


def test_every_folder_of_tests_is_on_the_test_path(request):
    """Test modules import each other by plain names (pyproject.toml's pytest pythonpath)."""
    listed = {pathlib.Path(str(path)).resolve() for path in request.config.getini("pythonpath")}
    missing = [folder.relative_to(ROOT).as_posix() for folder in _test_folders()
               if folder.resolve() not in listed]
    assert sorted(missing) == []


def test_ray_is_imported_only_at_the_ray_boundary():
    sites = {modules()[m].relative_to(ROOT).as_posix() for m, name in imports()
             if name.partition(".")[0] == "ray"}
    assert sites == RAY_MODULES


# ----------------------------------------------------------------- the checks see what they guard

def _tree(root: pathlib.Path, files: dict) -> pathlib.Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for package in LAYERS:
        (root / package).mkdir(exist_ok=True)
    return root


@pytest.mark.parametrize("code", [
    "from raycep.cep.runtime.engine import Engine\n",
    "def later():\n    from raycep.cep.runtime import engine\n    return engine\n",
    "import raycep.cep.io.codec\n",
    "from raycep.cep.lang import ast\n",
], ids=["at the top", "inside a function", "import a.b", "from a import module"])
def test_an_upward_import_in_the_store_is_found(tmp_path, code):
    root = _tree(tmp_path, {"cep/store/index.py": code, "cep/runtime/engine.py": "",
                            "cep/io/codec.py": "", "cep/lang/ast.py": ""})
    assert [m for m, _ in upward_cep_imports(root)] == ["raycep.cep.store.index"]


def test_imports_within_a_layer_and_downwards_pass(tmp_path):
    root = _tree(tmp_path, {
        "cep/__init__.py": "from raycep.cep.runtime.engine import Engine\n",
        "cep/event.py": "from raycep.cep.errors import CepError\n", "cep/errors.py": "",
        "cep/store/index.py": "from raycep.cep.event import Event\n",
        "cep/runtime/engine.py": "from raycep.cep.store import index\n"
                                 "from raycep.cep.runtime.groups import GroupManager\n",
        "cep/runtime/groups.py": ""})
    assert upward_cep_imports(root) == []


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    root = _tree(tmp_path, {
        "cep/io/sources.py": "from raycep.cep.io.columns import build_columns\n",
        "cep/io/columns.py": "def parse():\n    from raycep.cep.io import sources\n",
        "gateway/cli/local.py": "from raycep.gateway.cli.slices import run_slices\n",
        "gateway/cli/slices.py": "import raycep.gateway.cli.local\n"})
    assert cycles(root) == [["raycep.cep.io.columns", "raycep.cep.io.sources"],
                            ["raycep.gateway.cli.local", "raycep.gateway.cli.slices"]]


def test_a_package_importing_one_above_it_is_found(tmp_path):
    root = _tree(tmp_path, {"planner/plan.py": "def route():\n"
                                               "    from raycep.actors.routing import route\n",
                            "actors/routing.py": "from raycep.cep.errors import IngestError\n"})
    assert upward_packages(root) == [("raycep.planner.plan", "raycep.actors.routing")]


#: gateway/server's modules, each importing only those before it (GatewayService is a facade
#: over one manager per concern; the managers share ``actors``)
GATEWAY_SERVER = ("messages", "autoscale", "settings", "checks", "actors", "drain", "send_stages", "metrics",
                  "planning", "query_sets", "queries", "ingest", "scaling", "service", "registry",
                  "store", "http")


def test_gateway_server_modules_import_one_way():
    folder = ROOT / "gateway" / "server"
    assert {p.stem for p in folder.glob("*.py")} - {"__init__"} == set(GATEWAY_SERVER)
    rank = {m: k for k, m in enumerate(GATEWAY_SERVER)}
    later = []
    for module in GATEWAY_SERVER:
        for node in ast.walk(ast.parse((folder / f"{module}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module \
                    and node.module.startswith("raycep.gateway.server."):
                name = node.module.rpartition(".")[2]
                if rank[name] >= rank[module]:
                    later.append((module, name))
    assert later == []
