"""DenvProvider's contract and error paths, against the in-memory control plane."""

from __future__ import annotations

import builtins
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("openenv.core.containers.runtime.providers")

from openenv.core.containers.runtime.providers import ContainerProvider

import denv
from denv.openenv import DenvProvider, parse_image
from fakecp import FakeControlPlane

# A loopback port nothing listens on: tunnels fail fast, as when the server is not up.
DEAD_URL = "http://127.0.0.1:9"


@pytest.fixture
def fake() -> FakeControlPlane:
    f = FakeControlPlane()
    f.add_project("counter")
    f.add_environment("counter/alpha", f.add_version("counter", 1))
    return f


@pytest.fixture
def client(fake: FakeControlPlane, isolated_config: Path) -> Iterator[denv.Client]:
    with denv.Client(DEAD_URL, fake.token, transport=fake.transport(), timeout=2) as c:
        yield c


def sandboxes(fake: FakeControlPlane) -> list[str]:
    return [e["id"] for e in fake.environments.values() if e["sandbox"]]


def test_it_is_an_openenv_container_provider() -> None:
    assert issubclass(DenvProvider, ContainerProvider)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("counter", ("counter", None)),
        ("counter@v3", ("counter", "counter@v3")),
        ("counter@3", ("counter", "counter@v3")),
    ],
)
def test_image_names_a_project_or_a_version(image: str, expected: tuple[str, str | None]) -> None:
    assert parse_image(image) == expected


@pytest.mark.parametrize("image", ["echo-env:latest", "org/echo", "", "Counter", "counter@vx"])
def test_a_docker_image_is_refused(image: str) -> None:
    with pytest.raises(ValueError, match="PROJECT or PROJECT@vN"):
        parse_image(image)


def test_start_forks_the_version_and_stop_destroys_it(
    client: denv.Client, fake: FakeControlPlane
) -> None:
    provider = DenvProvider(client)
    url = provider.start_container("counter@v1")
    assert url.startswith("http://127.0.0.1:")
    assert provider.base_url == url
    assert provider.sandbox is not None and provider.sandbox.sandbox
    assert provider.version == "counter@v1"
    assert sandboxes(fake) == [provider.sandbox.id]
    provider.stop_container()
    assert sandboxes(fake) == []
    assert provider.base_url is None and provider.sandbox is None
    provider.stop_container()  # a no-op once stopped


def test_stop_tolerates_a_sandbox_already_gone(client: denv.Client, fake: FakeControlPlane) -> None:
    provider = DenvProvider(client)
    provider.start_container("counter")
    assert provider.sandbox is not None
    del fake.environments[provider.sandbox.id]  # e.g. its TTL ended
    provider.stop_container()
    assert provider.sandbox is None


def test_one_provider_runs_one_sandbox(client: denv.Client, fake: FakeControlPlane) -> None:
    provider = DenvProvider(client)
    provider.start_container("counter")
    with pytest.raises(RuntimeError, match="already runs"):
        provider.start_container("counter")
    provider.stop_container()


def test_env_vars_and_unknown_options_are_refused(client: denv.Client) -> None:
    provider = DenvProvider(client)
    with pytest.raises(ValueError, match="compose file"):
        provider.start_container("counter", env_vars={"DEBUG": "1"})
    with pytest.raises(TypeError, match="workers"):
        provider.start_container("counter", workers=4)
    assert provider.sandbox is None


def test_a_missing_project_is_a_runtime_error_caused_by_denv(client: denv.Client) -> None:
    with pytest.raises(RuntimeError, match="could not fork nope") as info:
        DenvProvider(client).start_container("nope")
    assert isinstance(info.value.__cause__, denv.NotFoundError)


def test_a_missing_service_destroys_the_new_sandbox(
    client: denv.Client, fake: FakeControlPlane
) -> None:
    provider = DenvProvider(client, service="server")
    with pytest.raises(RuntimeError, match="no service 'server'"):
        provider.start_container("counter")
    assert sandboxes(fake) == []
    assert provider.sandbox is None


def test_fork_needs_a_running_sandbox(client: denv.Client) -> None:
    with pytest.raises(RuntimeError, match="start_container"):
        DenvProvider(client).fork()


def test_a_fork_that_never_gets_ready_is_cleaned_up(
    client: denv.Client, fake: FakeControlPlane
) -> None:
    provider = DenvProvider(client)
    provider.start_container("counter")
    with pytest.raises(builtins.TimeoutError, match="/health"):
        provider.fork(timeout_s=0.5)
    # The parent runs on; the fork's sandbox and its snapshot version are gone.
    assert provider.sandbox is not None
    assert sandboxes(fake) == [provider.sandbox.id]
    assert sorted(fake.versions) == ["counter@v1"]
    provider.stop_container()


class _Health(http.server.BaseHTTPRequestHandler):
    status = 503

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[tuple[str, type[_Health]]]:
    handler = type("Handler", (_Health,), {"status": 503})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_wait_for_ready_polls_health(health_server: tuple[str, type[_Health]]) -> None:
    url, handler = health_server
    provider = DenvProvider()
    started = time.monotonic()
    with pytest.raises(builtins.TimeoutError, match="HTTP 503"):
        provider.wait_for_ready(url, timeout_s=0.6)
    assert time.monotonic() - started < 5
    handler.status = 200
    provider.wait_for_ready(url, timeout_s=5)
