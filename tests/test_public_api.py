"""The library face (``import raycep``): one import name, the public names with their
docstrings, ``raycep.match`` as a notebook uses it, ``raycep.connect`` and its environment,
and what a wheel installs."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import threading
import zipfile

import pandas as pd
import pytest

import raycep
from raycep.cep.errors import CepError
from raycep.gateway.runtime import InProcessCluster
from raycep.gateway.server.service import GatewaySettings

from test_tables import raycep_local

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def test_the_public_names_are_documented():
    for name in raycep.__all__:
        value = getattr(raycep, name)
        if name != "__version__":
            assert (getattr(value, "__doc__", None) or "").strip(), name
    assert raycep.__version__ and raycep.__version__[0].isdigit()
    assert issubclass(raycep.QuerySyntaxError, raycep.CepError)
    text = raycep.match.__doc__
    for arg in ("queries", "events", "key", "params", "ts", "type", "ts_format", "start",
                "end", "retracted"):
        assert f"``{arg}``" in text, arg
    assert "raycep.match" in raycep.__doc__


def test_parse_and_compile_and_the_builder_print_the_same_query():
    text = "PATTERN SEQ(Stock a, Stock b) WHERE [symbol] AND b.price > a.price WITHIN 5 seconds"
    q = raycep.parse(text)
    assert isinstance(q, raycep.Query)
    built = raycep.query(raycep.builder.seq(raycep.builder.var("Stock", "a"),
                                            raycep.builder.var("Stock", "b")),
                         where="b.price > a.price", equivalence="symbol", within=5)
    assert raycep.parse(str(built)) == raycep.parse(str(q))
    assert raycep.compile(text).window == 5.0
    assert len(raycep.parse(text + ";" + text)) == 2
    with pytest.raises(raycep.QuerySyntaxError):
        raycep.parse("PATTERN SEQ(")


def test_match_on_a_dataframe_with_datetime64_times_gives_raycep_locals_matches(tmp_path):
    """The notebook's first call: the sample ticks as a DataFrame whose times are datetime64
    give, query by query, the matches ``raycep local`` finds in the CSV (the same events at
    the same instants: its times are seconds after the epoch of the first)."""
    epoch = pd.Timestamp("2026-11-26", tz="UTC")
    ticks = pd.read_csv(EXAMPLES / "ticks.csv")
    frame = ticks.assign(ts=epoch.tz_localize(None) + pd.to_timedelta(ticks["ts"], unit="s"))
    found = raycep.match((EXAMPLES / "queries.cep").read_text(), frame, key="symbol")
    csv = tmp_path / "ticks.csv"                  # the same instants as epoch seconds
    ticks.assign(ts=ticks["ts"] + epoch.timestamp()).to_csv(csv, index=False)
    out = tmp_path / "local.jsonl"
    done = subprocess.run([sys.executable, "-m", "raycep", "local", "--query",
                           str(EXAMPLES / "queries.cep"), "--events", str(csv), "--key",
                           "symbol", "--out", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    local = [json.loads(line) for line in out.read_text().splitlines()]
    got = found.to_pandas()
    assert len(got) == len(local) > 2000
    for name in {r["query"] for r in local}:
        mine = got[got["query"] == name]
        theirs = [r for r in local if r["query"] == name]
        assert len(mine) == len(theirs), name
    assert str(found.schema.field("start").type).startswith("timestamp")
    assert got["start"].min() >= epoch.tz_localize(None)


def test_match_with_a_builder_query_on_an_arrow_table_gives_raycep_locals_ids(tmp_path):
    import pyarrow as pa
    jump = raycep.query(raycep.builder.seq(raycep.builder.var("Stock", "a"),
                                           raycep.builder.var("Stock", "b")),
                        where="b.price > a.price * 1.01", equivalence="symbol",
                        within=(10, "seconds"), name="jump")
    table = pa.Table.from_pandas(pd.read_csv(EXAMPLES / "ticks.csv"), preserve_index=False)
    found = raycep.match(jump, table, key="symbol")
    local = raycep_local(tmp_path, [str(jump)], EXAMPLES / "ticks.csv")
    assert found.num_rows == len(local) > 100
    assert found.column("id").to_pylist() == [r["id"] for r in local]


def test_connect_reads_the_gateway_and_token_from_the_environment(monkeypatch):
    settings = GatewaySettings(port=0, registry_path=None, plan_every=0, token="s3cret")
    with InProcessCluster(1, "k", settings) as cluster:
        monkeypatch.setenv("RAYCEP_GATEWAY", cluster.url)
        monkeypatch.setenv("RAYCEP_TOKEN", "s3cret")
        with raycep.connect() as client:
            assert client.address == cluster.url.rstrip("/")
            assert client.queries() == []
        monkeypatch.setenv("RAYCEP_TOKEN", "wrong")
        with pytest.raises(raycep.AuthenticationError):
            raycep.connect()


def test_a_closed_client_ends_its_streams_and_refuses_calls():
    with InProcessCluster(1, "k", GatewaySettings(port=0, registry_path=None,
                                                  plan_every=0)) as cluster:
        client = raycep.connect(cluster.url)
        client.register("PATTERN SEQ(A a, B b) WHERE [k] WITHIN 5 seconds", name="ab")
        ended = threading.Event()

        def read():
            try:
                for _ in client.subscribe("ab"):
                    pass
            except Exception:       # the closed socket ends the read, one way or another
                pass
            ended.set()
        threading.Thread(target=read, daemon=True).start()
        import time
        deadline = time.monotonic() + 10
        while not client._streams and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client._streams, "the subscription did not start"
        with client:
            pass                                    # __exit__ closes
        assert ended.wait(10), "close() did not end the stream"
        with pytest.raises(CepError, match="closed"):
            client.queries()
        client.close()                              # twice is fine


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "-q", "-w", str(out), str(ROOT)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("raycep-*.whl")
    return path


def test_the_wheel_installs_one_import_name(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"raycep"}, top
    for path in ("raycep/py.typed", "raycep/__init__.py", "raycep/cep/runtime/engine.py",
                 "raycep/gateway/cli/__init__.py", "raycep/local/match.py",
                 "raycep/planner/algorithms/__init__.py", "raycep/actors/partition.py",
                 "raycep/spark_ingest/__init__.py", "raycep/gateway/server/service.py"):
        assert path in names, path
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    with zipfile.ZipFile(wheel) as z:
        assert "raycep = raycep.gateway.cli:main" in z.read(entry).decode()


def test_a_fresh_environment_runs_the_notebook_example(wheel, tmp_path):
    """``pip install`` of the wheel in a new virtual environment (its dependencies taken from
    this one): ``import raycep`` is that install, ``import cep`` fails, the notebook example
    runs from another directory and the console script answers."""
    env = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env)],
                   check=True, timeout=300)
    python = env / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    where = subprocess.run([str(python), "-c", "import raycep, importlib.util; "
                            "print(raycep.__file__); print(importlib.util.find_spec('cep'))"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert where.returncode == 0, where.stderr
    assert where.stdout.splitlines() == [
        str(env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" /
            "site-packages" / "raycep" / "__init__.py"), "None"], where.stdout
    run = subprocess.run([str(python), str(EXAMPLES / "notebook.py")], capture_output=True,
                         text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "clean_breakout" in run.stdout and "jumps; the first" in run.stdout
    script = subprocess.run([str(env / "bin" / "raycep"), "--help"], capture_output=True,
                            text=True, timeout=300)
    assert script.returncode == 0 and "raycep" in script.stdout


def test_the_readme_python_quick_starts_run(monkeypatch, capsys):
    """The README's notebook quick start (``raycep.match`` on a DataFrame with datetime64
    times) and its engine example run as written, from the repository root."""
    import re
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    exec(blocks[0], scope)                 # noqa: S102 (our own README, the test's subject)
    assert scope["found"].num_rows > 1000
    assert scope["found"].column_names[:5] == ["query", "id", "retracted", "start", "end"]
    exec(blocks[1], {})                    # noqa: S102
    printed = capsys.readouterr().out
    assert "jump" in printed and "peak" in printed
