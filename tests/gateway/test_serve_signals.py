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
