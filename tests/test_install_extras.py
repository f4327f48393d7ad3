"""Install extras (pyproject.toml): the core install (the engine, ``raycep local``, the client)
needs neither Ray nor Spark nor aiohttp; a command that needs an extra says which one.

Each check runs in a fresh interpreter in which importing ray, pyspark, raydp or aiohttp
fails as it does when they are not installed."""
import json
import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
QUERY = "PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND b.price > a.price * 1.01 " \
        "WITHIN 10 seconds"

_BLOCK = """
import importlib.abc, json, sys
BLOCKED = {"ray", "pyspark", "raydp", "aiohttp"}
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Missing())
"""


def _python(code: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BLOCK + code, *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def _cli(*args) -> subprocess.CompletedProcess:
    return _python("from raycep.gateway.cli import main\nsys.exit(main(sys.argv[1:]))", *args)


def test_core_dependencies_leave_out_ray_spark_and_aiohttp():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(meta["dependencies"])
    for heavy in ("ray", "pyspark", "raydp", "aiohttp"):
        assert heavy not in core
    extras = meta["optional-dependencies"]
    assert any(d.startswith("ray") for d in extras["cluster"])
    assert "raycep[cluster]" in extras["spark"]
    assert "raycep[cluster,spark]" in extras["test"]


def test_raycep_local_runs_without_the_extras(tmp_path):
    out = tmp_path / "m.jsonl"
    done = _cli("local", "--query", QUERY, "--events", "examples/ticks.csv", "--key", "symbol",
                "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["events"] == 20_000 and summary["matches"] > 0
    assert len(out.read_text().splitlines()) == summary["matches"]


def test_the_client_imports_and_talks_without_the_extras():
    done = _python("from raycep.gateway.client import connect, UnavailableError\n"
                   "try:\n    connect('http://127.0.0.1:9').health()\n"
                   "except UnavailableError as exc:\n    print('unavailable:', exc)\n"
                   "print(sorted(m for m in BLOCKED if m in sys.modules))")
    assert done.returncode == 0, done.stderr
    assert "unavailable: cannot reach the raycep gateway" in done.stdout
    assert done.stdout.splitlines()[-1] == "[]"
    done = _cli("query", "ls", "--gateway", "http://127.0.0.1:9")
    assert done.returncode == 2 and "cannot reach the raycep gateway" in done.stderr


def test_commands_that_need_an_extra_name_it():
    for args, extra in ((("serve", "--port", "0"), "cluster"), (("demo",), "cluster"),
                        (("ingest", "examples/ticks.csv"), "spark")):
        done = _cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert f"pip install 'raycep[{extra}]'" in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
