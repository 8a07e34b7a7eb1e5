"""The quickstarts' verifiers grade what the agent did, not a blip of the host.

Each verifier (examples/quickstart*/tests/test_app.py) is loaded as a module and pointed at a
shop API on loopback that this test serves: one failed answer (a 5xx, as a failed lookup of the
database gives on a loaded host) is asked again, and an app that fails every time still fails
the check.
"""

import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import REPO

VERIFIERS = ["quickstart", "quickstart-single"]


def load_verifier(example, monkeypatch, url):
    monkeypatch.setenv("APP_URL", url)
    spec = importlib.util.spec_from_file_location(
        "verifier_" + example.replace("-", "_"),
        REPO / "examples" / example / "tests" / "test_app.py",
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module.time, "sleep", lambda _s: None)
    return module


@pytest.fixture
def shop():
    """A /total that fails the first `failures` requests with 500, then answers (3, 5000)."""
    state = {"failures": 0, "requests": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            state["requests"] += 1
            if state["requests"] <= state["failures"]:
                status, body = (
                    500,
                    {"error": "gaierror: [Errno -3] Temporary failure in name resolution"},
                )
            else:
                status, body = (
                    200,
                    {"user": "alice", "orders": 3, "total_cents": 5000, "total": "50.00"},
                )
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("example", VERIFIERS)
def test_one_failed_answer_is_asked_again(example, shop, monkeypatch):
    state, url = shop
    state["failures"] = 1
    verifier = load_verifier(example, monkeypatch, url)
    ok, detail = verifier.check_total("alice", (3, 5000))
    assert (ok, detail) == (True, "app (3, 5000), database (3, 5000)")
    assert state["requests"] == 2


@pytest.mark.parametrize("example", VERIFIERS)
def test_an_app_that_always_fails_fails_the_check(example, shop, monkeypatch):
    state, url = shop
    state["failures"] = 100
    verifier = load_verifier(example, monkeypatch, url)
    ok, detail = verifier.check_total("alice", (3, 5000))
    assert ok is False
    assert detail.startswith("GET /total -> 500")
    assert state["requests"] == 3


@pytest.mark.parametrize("example", VERIFIERS)
def test_a_wrong_total_is_not_asked_again(example, shop, monkeypatch):
    state, url = shop
    verifier = load_verifier(example, monkeypatch, url)
    ok, detail = verifier.check_total("alice", (3, 6000))
    assert (ok, detail) == (False, "app (3, 5000), database (3, 6000)")
    assert state["requests"] == 1
