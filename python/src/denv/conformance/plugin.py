"""The pytest plugin of the conformance suite: options and the ``denv_sandbox`` fixture.

Registered through the ``pytest11`` entry point, so the options exist wherever ``denv`` is
installed. Without a control plane URL the suite skips, saying how to give one.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from .._client import Client
from .._errors import ConfigError, DenvConnectionError, DenvError, NotFoundError
from ._support import DenvSandbox


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds the ``--denv-*`` options.

    Args:
        parser: pytest's option parser.
    """
    group = parser.getgroup("denv", "denv conformance suite")
    group.addoption("--denv-url", default=None, help="control plane URL (default: DENV_URL)")
    group.addoption("--denv-token", default=None, help="API token (default: DENV_TOKEN)")
    group.addoption("--denv-project", default=None, help="project to fork (default: DENV_PROJECT)")
    group.addoption(
        "--denv-version",
        default=None,
        help="version to fork, PROJECT@vN (default: the project's current version)",
    )
    group.addoption(
        "--denv-environment",
        default=None,
        help="run against this existing PROJECT/ENV instead of a new sandbox",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Registers the suite's marker.

    Args:
        config: pytest's configuration.
    """
    config.addinivalue_line(
        "markers", "denv_conformance: a test of the denv conformance suite (needs a denv)"
    )


@pytest.fixture(scope="session")
def denv_client(request: pytest.FixtureRequest) -> Iterator[Client]:
    """A client of the control plane under test (options, then DENV_* and the config file).

    Args:
        request: The fixture request.

    Yields:
        The client.
    """
    opt = request.config.getoption
    try:
        client = Client(opt("--denv-url"), opt("--denv-token"), opt("--denv-project"))
    except ConfigError as exc:
        pytest.skip(
            "no denv to test: pass --denv-url/--denv-token/--denv-project "
            f"or set DENV_URL/DENV_TOKEN/DENV_PROJECT ({exc})"
        )
    with client:
        try:
            client.health()
        except DenvConnectionError as exc:
            pytest.fail(str(exc))
        yield client


@pytest.fixture(scope="session")
def denv_sandbox(request: pytest.FixtureRequest, denv_client: Client) -> Iterator[DenvSandbox]:
    """The environment under test: a new sandbox of the project, destroyed at the end.

    With ``--denv-environment`` the suite uses that environment as it is.

    Args:
        request: The fixture request.
        denv_client: The client.

    Yields:
        The sandbox and its client.
    """
    existing = request.config.getoption("--denv-environment")
    if existing:
        env = denv_client.get_environment(existing)
        yield DenvSandbox(denv_client, env.id, env)
        return
    project = denv_client.config.project
    if not project:
        pytest.fail("no project to fork: pass --denv-project or set DENV_PROJECT")
    try:
        env = denv_client.create_sandbox(
            project,
            version=request.config.getoption("--denv-version"),
            name=f"conformance-{secrets.token_hex(4)}",
            ttl_sec=3600,
        )
    except NotFoundError as exc:
        pytest.fail(
            f"cannot fork project {project}: {exc} (deploy the project first, "
            "e.g. denv.Client().deploy('examples/quickstart'))"
        )
    try:
        yield DenvSandbox(denv_client, env.id, env)
    finally:
        try:
            denv_client.destroy_sandbox(env.id)
        except DenvError as exc:
            print(f"denv conformance: could not destroy {env.id}: {exc}")
