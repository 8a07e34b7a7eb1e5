import builtins
import json
import re

import httpx
import pytest

import denv
from conftest import REPO
from denv import _errors as denv_errors
from denv._errors import ERROR_CLASSES, ERROR_STATUS, error_from_body
from fakecp import FakeControlPlane

ERRORS_TS = REPO / "packages" / "spec" / "src" / "errors.ts"


def test_codes_and_statuses_mirror_errors_ts() -> None:
    text = ERRORS_TS.read_text()
    block = text[text.index("ErrorCodes = {") : text.index("} as const")]
    ts = {m[1]: int(m[2]) for m in re.finditer(r"(\w+): (\d+)", block)}
    assert ts == ERROR_STATUS
    assert set(ERROR_CLASSES) == set(ts)


@pytest.mark.parametrize("code", sorted(ERROR_STATUS))
def test_each_code_maps_to_its_class(code: str) -> None:
    body = {"error": {"code": code, "message": "what and what to do", "details": ["a", "b"]}}
    err = error_from_body(ERROR_STATUS[code], json.dumps(body))
    assert type(err) is ERROR_CLASSES[code]
    assert isinstance(err, denv.DenvError)
    assert err.code == code
    assert err.status == ERROR_STATUS[code]
    assert err.message == "what and what to do"
    assert err.details == ("a", "b")
    assert str(err) == "what and what to do\n  a\n  b"


def test_class_names() -> None:
    assert ERROR_CLASSES["agent_root"] is denv.AgentRootError
    assert ERROR_CLASSES["special_file"] is denv.SpecialFileError
    assert ERROR_CLASSES["egress_leak"] is denv.EgressLeakError
    assert ERROR_CLASSES["not_found"] is denv.NotFoundError
    assert ERROR_CLASSES["timeout"] is denv.DenvTimeoutError
    assert issubclass(denv.DenvTimeoutError, builtins.TimeoutError)
    assert issubclass(denv.DenvConnectionError, builtins.ConnectionError)


def test_no_error_class_shadows_a_builtin() -> None:
    # `from denv import *` (or `from denv._errors import ...`) must leave the built-ins alone.
    assert denv.DenvTimeoutError is not builtins.TimeoutError
    assert denv.DenvConnectionError is not builtins.ConnectionError
    for old in ("TimeoutError", "ConnectionError"):
        assert not hasattr(denv, old)
        assert old not in denv.__all__
    builtin_names = set(dir(builtins))
    for module in (denv, denv_errors):
        shadowing = [
            name
            for name, value in vars(module).items()
            if isinstance(value, type)
            and issubclass(value, BaseException)
            and name in builtin_names
        ]
        assert shadowing == [], module.__name__


def test_unknown_code_keeps_the_code() -> None:
    err = error_from_body(418, '{"error": {"code": "teapot", "message": "short and stout"}}')
    assert type(err) is denv.DenvError
    assert (err.code, err.status, err.message) == ("teapot", 418, "short and stout")


def test_body_that_is_not_denvs_maps_by_status() -> None:
    err = error_from_body(404, "<html>nope</html>", what="GET /v1/x")
    assert isinstance(err, denv.NotFoundError)
    assert err.message == "GET /v1/x: <html>nope</html>"
    framework = json.dumps(
        {
            "statusCode": 413,
            "code": "FST_ERR_CTP_BODY_TOO_LARGE",
            "error": "Payload Too Large",
            "message": "Request body is too large",
        }
    )
    err = error_from_body(413, framework, what="POST /v1/x")
    assert isinstance(err, denv.InvalidRequestError)
    assert err.status == 413
    assert "Request body is too large" in err.message
    assert isinstance(error_from_body(503, ""), denv.InternalError)


def test_http_errors_raise_the_mapped_class() -> None:
    fake = FakeControlPlane()
    with (
        denv.Client("http://cp", "t0k", transport=fake.transport()) as client,
        pytest.raises(denv.NotFoundError, match="no environment shop/alpha"),
    ):
        client.get_environment("shop")


def test_wrong_token_is_unauthorized() -> None:
    fake = FakeControlPlane()
    with (
        denv.Client("http://cp", "wrong", transport=fake.transport()) as client,
        pytest.raises(denv.UnauthorizedError) as caught,
    ):
        client.whoami()
    assert caught.value.status == 401


def test_unreachable_control_plane_names_the_url() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with (
        denv.Client("http://127.0.0.1:9", "t", transport=httpx.MockTransport(refuse)) as client,
        pytest.raises(denv.DenvConnectionError) as caught,
    ):
        client.health()
    assert "http://127.0.0.1:9" in str(caught.value)
    assert isinstance(caught.value, builtins.ConnectionError)
    assert caught.value.status == 0


def test_unreachable_over_a_real_socket() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on the port any more.
    with (
        denv.Client(f"http://127.0.0.1:{port}", "t") as client,
        pytest.raises(denv.DenvConnectionError, match=str(port)),
    ):
        client.health()


def test_read_timeout_is_a_timeout_error() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with (
        denv.Client("http://cp", "t", transport=httpx.MockTransport(slow)) as client,
        pytest.raises(denv.DenvTimeoutError),
    ):
        client.whoami()
