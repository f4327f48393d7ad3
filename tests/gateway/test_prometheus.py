"""The gateway's /metrics read by the real Prometheus tools (issue 37): ``promtool check
metrics`` validates the exposition, and a Prometheus server on loopback scrapes a running
gateway (with its bearer token) until its query API gives the matches the client read.

Prometheus is Debian's package (``prometheus``, with ``promtool``). When it is missing the
tests install it with apt-get (a root shell with the Debian archive reachable, as in CI and
the development machines); when that is impossible they fail saying so."""
import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest

from raycep.cep import Engine
from raycep.cep.match import match_id
from raycep.gateway.client import connect

from cluster_helpers import PAIR, ids_of, make_stream, read_all, send_in_slices, wait_for

TOKEN = "pr0m"


@pytest.fixture(scope="module")
def prometheus_tools() -> tuple:
    """The paths of ``prometheus`` and ``promtool`` (installed with apt-get if missing)."""
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends",
                               "prometheus"], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail("these tests need Debian's prometheus package and could not install "
                        f"it (apt-get install prometheus: {done.stderr.strip()[-500:]}); "
                        "install it and run them again")
    return shutil.which("prometheus"), shutil.which("promtool")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(url: str) -> bytes:
    req = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read()


def _traffic(cluster) -> int:
    """A query, events, and the matches read; how many."""
    client = connect(cluster.url, token=TOKEN)
    client.register(PAIR, name="pair")
    events = make_stream(500, 9, 5, 0.0, gaps=(0.25, 0.5, 1.0))
    send_in_slices(client, events)
    eng = Engine(key_attr="k")
    eng.add_query(PAIR, name="pair")
    expected = [match_id(m) for ev in events for m in eng.process(ev)]
    got = ids_of(read_all(client, "pair"))
    assert sorted(got) == sorted(expected) and got
    return len(got)


def test_promtool_accepts_the_exposition(make_cluster, prometheus_tools):
    cluster = make_cluster(token=TOKEN)
    _traffic(cluster)
    done = subprocess.run([prometheus_tools[1], "check", "metrics"], input=_scrape(cluster.url),
                          capture_output=True, timeout=60)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()


def test_a_prometheus_server_scrapes_the_gateway(make_cluster, prometheus_tools, tmp_path):
    cluster = make_cluster(token=TOKEN)
    host = urllib.parse.urlsplit(cluster.url).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({             # YAML is a superset of JSON
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "raycep", "authorization": {"credentials": TOKEN},
                            "static_configs": [{"targets": [host]}]}]}))
    port = _free_port()
    server = subprocess.Popen([prometheus_tools[0], f"--config.file={config}",
                               f"--storage.tsdb.path={tmp_path / 'data'}",
                               f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        matches = _traffic(cluster)
        query = urllib.parse.quote('raycep_query_matches_total{query="pair"}')
        api = f"http://127.0.0.1:{port}/api/v1/query?query={query}"

        def scraped():
            if server.poll() is not None:
                raise AssertionError(f"prometheus exited: {server.stderr.read()[-2000:]!r}")
            try:
                with urllib.request.urlopen(api, timeout=5) as resp:
                    result = json.loads(resp.read())["data"]["result"]
            except OSError:
                return None
            return result and float(result[0]["value"][1]) == matches

        wait_for(scraped, timeout=90, what="Prometheus to scrape the matches", every=0.5)
        # the scrape itself was healthy (the target is up, with the token)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query=up",
                                    timeout=5) as resp:
            up = json.loads(resp.read())["data"]["result"]
        assert [float(r["value"][1]) for r in up] == [1.0]
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
