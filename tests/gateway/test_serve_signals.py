"""``raycep serve`` as a process manager sees it: it prints its URL and registry path, stops
cleanly on SIGTERM (no native stack dump, exit status 0) and keeps its registry where it said."""
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.ray
def test_sigterm_stops_serve_cleanly(tmp_path):
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    env.pop("RAYCEP_REGISTRY", None)
    proc = subprocess.Popen([sys.executable, "-m", "raycep", "serve", "--port", "0",
                             "--partitions", "1"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()           # blocks until the gateway listens
        assert line.startswith("raycep gateway listening on http://"), line
        registry = tmp_path / "state" / "raycep" / "registry.sqlite"
        assert f"(registry {registry}" in line
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "SIGTERM: stopping ..." in err and err.rstrip().endswith("stopped")
    assert "SIGTERM received" not in err and "Traceback" not in err
    assert registry.exists() and not (tmp_path / "raycep-registry.sqlite").exists()


def _serve(tmp_path, partitions: int):
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    env.pop("RAYCEP_REGISTRY", None)
    proc = subprocess.Popen([sys.executable, "-m", "raycep", "serve", "--port", "0",
                             "--key", "k", "--partitions", str(partitions),
                             "--checkpoint-dir", str(tmp_path / "ck")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("raycep gateway listening on http://"), line
    return proc, line.split()[4]


def _stop(proc) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return err


@pytest.mark.ray
def test_serve_with_another_partitions_restores_the_saved_layout_and_rescales(tmp_path):
    """What a Helm upgrade of gateway.partitions does: serve starts again with another
    --partitions on the same checkpoint directory; the saved state is restored in its own
    layout, then re-partitioned (issue 38)."""
    from raycep.gateway.client import connect
    sys.path.insert(0, str(ROOT / "tests"))
    from cluster_helpers import PAIR, make_stream
    events = make_stream(600, 4, 8, 0.0, gaps=(0.1, 0.3))
    proc, url = _serve(tmp_path, 2)
    try:
        client = connect(url)
        client.register(PAIR, name="pair")
        client.send(events[:300])
        before = sum(a["buffered"] for t, a in client.stats()["actors"].items()
                     if t != "global")
    finally:
        _stop(proc) if proc.poll() is None else None
    assert before > 0
    proc, url = _serve(tmp_path, 3)
    try:
        client = connect(url)
        assert client.routing()["partitions"] == 3
        actors = client.stats()["actors"]
        assert sorted(actors) == ["0", "1", "2", "global"]
        assert sum(a["buffered"] for t, a in actors.items() if t != "global") == before
        assert client.send(events[300:])["events"] == 300
    finally:
        err = _stop(proc) if proc.poll() is None else ""
    assert "held the state of 2 partition actors, restored; re-partitioning to 3" in err
