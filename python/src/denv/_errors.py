"""The errors of denv: one base class with a stable ``code``, one subclass per code.

The codes and their HTTP statuses mirror ``packages/spec/src/errors.ts``; the control plane
answers every error with ``{"error": {"code", "message", "details?"}}`` and
:func:`error_from_response` turns that into the matching subclass. A class whose plain name
would be a built-in exception's carries the ``Denv`` prefix (``DenvTimeoutError``) and also
subclasses that built-in, so ``except TimeoutError`` still catches it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

#: Code -> HTTP status, as ``ErrorCodes`` in packages/spec/src/errors.ts.
ERROR_STATUS: dict[str, int] = {
    "invalid_compose": 400,
    "invalid_request": 400,
    "not_found": 404,
    "conflict": 409,
    "agent_root": 403,
    "special_file": 422,
    "egress_leak": 412,
    "verifier_failed": 422,
    "agent_survived": 500,
    "timeout": 504,
    "docker": 502,
    "unauthorized": 401,
    "forbidden": 403,
    "internal": 500,
}


class DenvError(Exception):
    """An error reported by denv (or by this client on its behalf).

    Callers branch on the subclass (or on ``code``, which is stable); ``message`` is for
    people: what was wrong and what to do.

    Attributes:
        code: The stable error code (``not_found``, ``agent_root``, ...).
        status: The HTTP status the control plane answered with (0 when nothing answered).
        message: What was wrong and what to do.
        details: Further lines (e.g. every refusal of a compose file).
        deployment: The failed deployment, when the error is a deployment's outcome.
    """

    default_code = "internal"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        details: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: str = code if code is not None else type(self).default_code
        self.status: int = status if status is not None else ERROR_STATUS.get(self.code, 500)
        self.details: tuple[str, ...] = tuple(details)
        self.deployment: Any = None

    def __str__(self) -> str:
        if not self.details:
            return self.message
        return self.message + "".join(f"\n  {line}" for line in self.details)

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(code={self.code!r}, status={self.status}, message={self.message!r})"


class InvalidComposeError(DenvError):
    """The compose file is refused (``invalid_compose``); ``details`` lists every refusal."""

    default_code = "invalid_compose"


class InvalidRequestError(DenvError):
    """The request is malformed or names something impossible (``invalid_request``)."""

    default_code = "invalid_request"


class ConfigError(InvalidRequestError):
    """The client configuration is incomplete or unreadable (raised locally, never sent)."""


class NotFoundError(DenvError):
    """The project, environment, version, deployment, service or path does not exist."""

    default_code = "not_found"


class ConflictError(DenvError):
    """The resource exists already, or is still in use (``conflict``)."""

    default_code = "conflict"


class AgentRootError(DenvError):
    """Protection 1: exec or files as root in the agent service were refused (``agent_root``)."""

    default_code = "agent_root"


class SpecialFileError(DenvError):
    """Protection 3: an upload or submission held a special file (``special_file``)."""

    default_code = "special_file"


class EgressLeakError(DenvError):
    """Protection 5: the egress probe found a way out; the episode does not start."""

    default_code = "egress_leak"


class VerifierFailedError(DenvError):
    """The verifier itself failed (it could not grade), ``verifier_failed``."""

    default_code = "verifier_failed"


class AgentSurvivedError(DenvError):
    """Protection 2: agent processes survived the kill; the verifier does not start."""

    default_code = "agent_survived"


class DenvTimeoutError(DenvError, TimeoutError):
    """An operation ran out of time (``timeout``); also a built-in ``TimeoutError``."""

    default_code = "timeout"


class DockerError(DenvError):
    """The Docker Engine on the host failed (``docker``)."""

    default_code = "docker"


class UnauthorizedError(DenvError):
    """No token, or a token the control plane does not know (``unauthorized``)."""

    default_code = "unauthorized"


class ForbiddenError(DenvError):
    """The token may not do this, or the user in the environment may not (``forbidden``)."""

    default_code = "forbidden"


class InternalError(DenvError):
    """The control plane failed (``internal``)."""

    default_code = "internal"


class DenvConnectionError(DenvError, ConnectionError):
    """The control plane could not be reached; the message names the URL tried.

    Also a built-in ``ConnectionError``. ``status`` is 0: nothing answered.
    """

    default_code = "unavailable"

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message, status=0)
        self.url = url


ERROR_CLASSES: dict[str, type[DenvError]] = {
    "invalid_compose": InvalidComposeError,
    "invalid_request": InvalidRequestError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "agent_root": AgentRootError,
    "special_file": SpecialFileError,
    "egress_leak": EgressLeakError,
    "verifier_failed": VerifierFailedError,
    "agent_survived": AgentSurvivedError,
    "timeout": DenvTimeoutError,
    "docker": DockerError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "internal": InternalError,
}

# Statuses answered without denv's error body (a proxy, a body-size limit): the closest code.
_STATUS_CODES: dict[int, str] = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "invalid_request",
    422: "invalid_request",
    502: "docker",
    504: "timeout",
}


def error_for(
    code: str, message: str, *, status: int | None = None, details: Sequence[str] = ()
) -> DenvError:
    """Builds the exception of one error code.

    Args:
        code: The error code (unknown codes give a plain :class:`DenvError`).
        message: The message for people.
        status: The HTTP status; default: the code's status.
        details: Further lines.

    Returns:
        An instance of the code's subclass.
    """
    cls = ERROR_CLASSES.get(code)
    if cls is None:
        return DenvError(message, code=code, status=status, details=details)
    return cls(message, code=code, status=status, details=details)


def error_from_body(status: int, body: bytes | str, *, what: str = "") -> DenvError:
    """Maps an error answer (status and body) onto the matching exception.

    Args:
        status: The HTTP status.
        body: The response body; denv's ``{"error": {...}}`` or anything else.
        what: The request, for messages when the body says nothing (``GET /v1/...``).

    Returns:
        The exception to raise.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body
    parsed: Any = None
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        err = parsed.get("error")
        if isinstance(err, dict) and isinstance(err.get("code"), str):
            details = err.get("details") or ()
            return error_for(
                err["code"],
                str(err.get("message", "")),
                status=status,
                details=[str(d) for d in details] if isinstance(details, list) else (),
            )
        # Answers of the HTTP framework itself (e.g. a body over its size limit).
        if isinstance(parsed.get("message"), str):
            text = parsed["message"]
    code = _STATUS_CODES.get(status, "internal")
    message = text.strip() or f"HTTP {status}"
    if what:
        message = f"{what}: {message}"
    return error_for(code, message, status=status)


def error_from_response(response: httpx.Response) -> DenvError:
    """Maps an httpx error response onto the matching exception (the body must be read).

    Args:
        response: A response with status >= 400.

    Returns:
        The exception to raise.
    """
    what = f"{response.request.method} {response.request.url.path}"
    return error_from_body(response.status_code, response.content, what=what)


def unreachable(url: str, exc: BaseException) -> DenvConnectionError:
    """The error for a control plane that could not be reached.

    Args:
        url: The control plane URL tried.
        exc: The transport error.

    Returns:
        A :class:`DenvConnectionError` naming the URL.
    """
    reason = str(exc) or type(exc).__name__
    return DenvConnectionError(
        f"cannot reach the denv control plane at {url}: {reason} "
        "(check DENV_URL, the url in ~/.config/denv/config.json, or that denv-cp is running)",
        url=url,
    )
