"""The client and gateway as a new user meets them: error classes importable from the
client, a clear message when the address is a web server but not a raycep gateway, and a
registry location that does not depend on the working directory."""
import http.server
import threading

import pytest

import raycep.cep.errors
import raycep.gateway.client as client_module
from raycep.gateway.client import GatewayError, connect


class _NotAGateway(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def not_a_gateway():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotAGateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_web_server_that_is_not_a_gateway_is_named_as_such(not_a_gateway):
    with pytest.raises(GatewayError) as info:
        connect(not_a_gateway).health()
    text = str(info.value)
    assert "is the address a raycep gateway" in text and "404" in text
    assert f"{not_a_gateway}/v1/health" in text
    assert info.value.status == 404


def test_every_error_class_is_exported_by_the_client():
    for name in client_module.__all__:
        assert hasattr(client_module, name), name
    errors = {name for name, value in vars(raycep.cep.errors).items()
              if isinstance(value, type) and issubclass(value, raycep.cep.errors.CepError)
              and (issubclass(value, raycep.cep.errors.GatewayError) or name in (
                  "CepError", "QuerySyntaxError", "QueryValidationError", "IngestError"))}
    assert errors <= set(client_module.__all__), errors - set(client_module.__all__)
    assert client_module.NotFoundError is raycep.cep.errors.NotFoundError


def test_the_default_registry_does_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    from raycep.gateway.server.registry import default_registry_path
    monkeypatch.delenv("RAYCEP_REGISTRY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    first = default_registry_path()
    monkeypatch.chdir("/")
    assert default_registry_path() == first == str(tmp_path / "state" / "raycep" /
                                                   "registry.sqlite")
    monkeypatch.setenv("RAYCEP_REGISTRY", "rel/reg.sqlite")
    assert default_registry_path() == "/rel/reg.sqlite"       # made absolute where asked
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.delenv("RAYCEP_REGISTRY")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_registry_path() == str(tmp_path / "home" / ".local" / "state" / "raycep" /
                                          "registry.sqlite")
