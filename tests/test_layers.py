"""The layering of docs/architecture.md, checked on the source: no package imports one above
it (cep <- planner <- local <- actors <- spark_ingest <- gateway: raycep local's run has its
own package, under the gateway's command line), and only actors/handles.py and
gateway/runtime.py import Ray."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = ("cep", "planner", "local", "actors", "spark_ingest", "gateway")
RAY_MODULES = {"actors/handles.py", "gateway/runtime.py"}


def imports():
    """(module path, imported top-level name) for every absolute import in the packages; the
    packages install under raycep (``raycep.cep.x`` is layer ``cep``)."""
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top, _, rest = name.partition(".")
                    if top == "raycep" and rest:
                        top = rest.partition(".")[0]
                    yield path.relative_to(ROOT).as_posix(), top


def test_no_package_imports_a_layer_above_it():
    rank = {p: k for k, p in enumerate(LAYERS)}
    upward = [(path, top) for path, top in imports()
              if top in rank and rank[top] > rank[path.split("/")[0]]]
    assert upward == []


def test_ray_is_imported_only_at_the_ray_boundary():
    sites = {path for path, top in imports() if top == "ray"}
    assert sites == RAY_MODULES


#: gateway/server's modules, each importing only those before it (GatewayService is a facade
#: over one manager per concern; the managers share ``actors``)
GATEWAY_SERVER = ("messages", "settings", "checks", "actors", "drain", "planning", "queries",
                  "ingest", "service", "registry", "store", "http")


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
