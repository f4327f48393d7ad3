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
    """(module path, imported top-level name) for every absolute import in the packages."""
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
                    yield path.relative_to(ROOT).as_posix(), name.partition(".")[0]


def test_no_package_imports_a_layer_above_it():
    rank = {p: k for k, p in enumerate(LAYERS)}
    upward = [(path, top) for path, top in imports()
              if top in rank and rank[top] > rank[path.split("/")[0]]]
    assert upward == []


def test_ray_is_imported_only_at_the_ray_boundary():
    sites = {path for path, top in imports() if top == "ray"}
    assert sites == RAY_MODULES
