"""What the sync and the async client share: configuration, routes, parsing, error mapping."""

from __future__ import annotations

import base64
import json
import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any, TypeVar
from urllib.parse import quote, urlencode

import httpx
from pydantic import BaseModel

from ._config import Config, load_config
from ._errors import (
    DenvError,
    DenvTimeoutError,
    InternalError,
    InvalidRequestError,
    error_for,
    error_from_body,
    unreachable,
)
from ._models import Environment, Version

#: Header carrying the content hash of the uploaded source (see :func:`denv.source_hash`).
SOURCE_HASH_HEADER = "X-Denv-Source-Sha256"

#: Exec requests whose JSON would be larger than this go over the streaming route
#: (HTTP frameworks cap JSON bodies; the WebSocket route streams stdin in chunks).
REST_EXEC_LIMIT = 768 * 1024

#: Bytes of stdin per ``stdin`` frame (before base64), as the protocol's MAX_DATA_CHUNK.
STDIN_CHUNK = 64 * 1024

#: Largest WebSocket message accepted from the control plane.
WS_MAX_SIZE = 256 * 1024 * 1024

#: Default environment of a project (``PROJECT`` alone means ``PROJECT/alpha``).
DEFAULT_ENVIRONMENT = "alpha"

EnvRef = str | Environment
VersionRef = str | int | Version

M = TypeVar("M", bound=BaseModel)


def q(segment: str) -> str:
    """Quotes one path segment.

    Args:
        segment: The segment.

    Returns:
        The segment, percent-encoded (``/`` included).
    """
    return quote(str(segment), safe="")


def env_parts(ref: EnvRef) -> tuple[str, str]:
    """Splits an environment reference.

    Args:
        ref: ``PROJECT/ENV``, ``PROJECT`` (meaning ``PROJECT/alpha``) or an Environment.

    Returns:
        (project, environment name).

    Raises:
        InvalidRequestError: The reference has more than one ``/`` or an empty part.
    """
    if isinstance(ref, Environment):
        return ref.project, ref.name
    parts = str(ref).split("/")
    if len(parts) == 1:
        parts.append(DEFAULT_ENVIRONMENT)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise InvalidRequestError(f"invalid environment '{ref}': expected PROJECT/ENV")
    return parts[0], parts[1]


def env_id(ref: EnvRef) -> str:
    """The ``PROJECT/ENV`` id of a reference.

    Args:
        ref: An environment reference.

    Returns:
        ``PROJECT/ENV``.
    """
    project, name = env_parts(ref)
    return f"{project}/{name}"


def env_path(ref: EnvRef, suffix: str = "") -> str:
    """The route of an environment.

    Args:
        ref: An environment reference.
        suffix: What follows (``/exec``, ``/files``, ...).

    Returns:
        ``/v1/environments/PROJECT/ENV`` + suffix.
    """
    project, name = env_parts(ref)
    return f"/v1/environments/{q(project)}/{q(name)}{suffix}"


def version_parts(ref: VersionRef, default_project: str | None) -> tuple[str, int]:
    """Splits a version reference.

    Args:
        ref: ``PROJECT@vN``, ``vN``, ``N`` (of the default project) or a Version.
        default_project: The project for references without one.

    Returns:
        (project, number).

    Raises:
        InvalidRequestError: The reference is not one of those forms, or names no project.
    """
    if isinstance(ref, Version):
        return ref.project, ref.number
    text = str(ref)
    project, sep, rest = text.rpartition("@")
    if not sep:
        project, rest = "", text
    number = rest[1:] if rest.startswith("v") else rest
    if not number.isdigit():
        raise InvalidRequestError(f"invalid version '{ref}': expected PROJECT@vN")
    project = project or (default_project or "")
    if not project:
        raise InvalidRequestError(f"version '{ref}' names no project: write PROJECT@vN")
    return project, int(number)


def version_id(ref: VersionRef, default_project: str | None) -> str:
    """The ``PROJECT@vN`` id of a reference.

    Args:
        ref: A version reference.
        default_project: The project for references without one.

    Returns:
        ``PROJECT@vN``.
    """
    project, number = version_parts(ref, default_project)
    return f"{project}@v{number}"


def sandbox_body(
    project: str,
    version: VersionRef | None,
    name: str | None,
    ttl_sec: int,
    count: int | None = None,
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/sandboxes`` (one sandbox, or ``count`` of them).

    Args:
        project: The project.
        version: The version (default: the project's current version).
        name: The sandbox's name (with ``count``: their names' stem).
        ttl_sec: Seconds until each is destroyed.
        count: How many, for a batch.

    Returns:
        The body.
    """
    body: dict[str, Any] = {"project": project, "ttl_sec": ttl_sec}
    if count is not None:
        body["count"] = count
    if version is not None:
        body["version"] = version_id(version, project)
    if name is not None:
        body["name"] = name
    return body


def files_params(path: str, service: str | None, user: str | None) -> dict[str, str]:
    """Query parameters of the files routes.

    Args:
        path: Absolute path in the container.
        service: Service (default: the agent service).
        user: User (default: the agent user).

    Returns:
        The parameters.

    Raises:
        InvalidRequestError: The path is not absolute.
    """
    if not path.startswith("/"):
        raise InvalidRequestError(f"path '{path}' must be absolute")
    params = {"path": path}
    if service is not None:
        params["service"] = service
    if user is not None:
        params["user"] = user
    return params


def split_file_path(path: str) -> tuple[str, str]:
    """Splits an absolute file path into its folder and base name.

    Args:
        path: Absolute path of a file.

    Returns:
        (folder, name).

    Raises:
        InvalidRequestError: The path is relative or names a folder.
    """
    if not path.startswith("/"):
        raise InvalidRequestError(f"path '{path}' must be absolute")
    norm = posixpath.normpath(path)
    folder, name = posixpath.split(norm)
    if not name or name in (".", ".."):
        raise InvalidRequestError(f"path '{path}' names a folder, not a file")
    return folder, name


def ws_url(base: str, path: str, params: Mapping[str, str] | None = None) -> str:
    """The WebSocket URL of a route.

    Args:
        base: The control plane URL (http or https).
        path: The route.
        params: Query parameters.

    Returns:
        The ws:// or wss:// URL.
    """
    if base.startswith("https://"):
        url = "wss://" + base[len("https://") :]
    elif base.startswith("http://"):
        url = "ws://" + base[len("http://") :]
    else:
        url = base
    url += path
    if params:
        url += "?" + urlencode(params)
    return url


def parse_model(model: type[M], data: Any, what: str) -> M:
    """Validates a response into a model.

    Args:
        model: The model class.
        data: The JSON.
        what: The route, for the message.

    Returns:
        The model.

    Raises:
        InternalError: The answer does not have the model's shape.
    """
    try:
        return model.model_validate(data)
    except ValueError as exc:
        raise InternalError(f"{what}: the answer is not a {model.__name__}: {exc}") from exc


def parse_list(model: type[M], data: Any, key: str, what: str) -> list[M]:
    """Validates ``{key: [...]}`` into a list of models.

    Args:
        model: The model class.
        data: The JSON.
        key: The list's key.
        what: The route, for the message.

    Returns:
        The models.

    Raises:
        InternalError: The answer has no such list.
    """
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise InternalError(f"{what}: the answer has no '{key}' list")
    return [parse_model(model, item, what) for item in items]


@contextmanager
def mapped_transport_errors(url: str, what: str) -> Iterator[None]:
    """Turns httpx transport failures into denv errors.

    Args:
        url: The control plane URL.
        what: The request, for messages.

    Yields:
        Nothing; the body runs inside.

    Raises:
        DenvConnectionError: The control plane could not be reached (or dropped the
            connection).
        DenvTimeoutError: It did not answer in time.
    """
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise unreachable(url, exc) from exc
    except httpx.TimeoutException as exc:
        raise DenvTimeoutError(
            f"{what}: no answer from {url} in time ({type(exc).__name__})"
        ) from exc
    except httpx.TransportError as exc:
        raise unreachable(url, exc) from exc


def timeout_for(seconds: float | None) -> httpx.Timeout:
    """An httpx timeout: ``seconds`` to read, at most 10 s to connect.

    Args:
        seconds: Read/write/pool timeout (None: no limit).

    Returns:
        The timeout.
    """
    connect = 10.0 if seconds is None else min(seconds, 10.0)
    return httpx.Timeout(seconds, connect=connect)


def exec_http_timeout(timeout: float | None) -> httpx.Timeout:
    """How long to wait for an exec's answer: the command's timeout plus a margin.

    Args:
        timeout: The command's timeout (None: it may run for ever).

    Returns:
        The httpx timeout.
    """
    return timeout_for(None if timeout is None else timeout + 60.0)


def stream_frame(message: str | bytes) -> dict[str, Any]:
    """Parses one server frame of the exec stream.

    Args:
        message: The WebSocket message.

    Returns:
        The frame.

    Raises:
        InternalError: The message is not a JSON object with a ``type``.
    """
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    try:
        frame = json.loads(text)
    except ValueError as exc:
        raise InternalError("exec stream: a frame is not JSON") from exc
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise InternalError("exec stream: a frame has no 'type'")
    return frame


def frame_data(frame: Mapping[str, Any]) -> bytes:
    """The bytes of a ``stdout``/``stderr`` frame.

    Args:
        frame: The frame.

    Returns:
        The decoded bytes.
    """
    data = frame.get("data") or ""
    return base64.b64decode(str(data))


def frame_error(frame: Mapping[str, Any]) -> DenvError:
    """The error an ``error`` frame (or a close reason) carries.

    Args:
        frame: ``{"type": "error", "error": {"code", "message"}}`` or ``{"error": {...}}``.

    Returns:
        The exception.
    """
    err = frame.get("error")
    if isinstance(err, dict) and isinstance(err.get("code"), str):
        details = err.get("details") if isinstance(err.get("details"), list) else []
        return error_for(err["code"], str(err.get("message", "")), details=details or ())
    return InternalError(f"exec stream: error frame without an error: {dict(frame)!r}")


def closed_error(what: str, code: int | None, reason: str) -> DenvError:
    """The error for a WebSocket the control plane closed before the end.

    Args:
        what: The route.
        code: The close code.
        reason: The close reason (a denv error body, or text).

    Returns:
        The exception.
    """
    if reason:
        try:
            parsed = json.loads(reason)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and "error" in parsed:
            return frame_error(parsed)
    return InternalError(
        f"{what}: the control plane closed the stream before the end "
        f"(close code {code}{': ' + reason if reason else ''})"
    )


def close_info(exc: Any) -> tuple[int | None, str]:
    """The close code and reason the control plane sent, from a ``ConnectionClosed``.

    Args:
        exc: The ``websockets.exceptions.ConnectionClosed``.

    Returns:
        (code, reason); (None, "") when no close frame arrived.
    """
    frame = getattr(exc, "rcvd", None)
    if frame is None:
        return None, ""
    return int(frame.code), str(frame.reason)


def stdin_frame(chunk: bytes) -> str:
    """A ``stdin`` frame.

    Args:
        chunk: Bytes of standard input.

    Returns:
        The JSON text.
    """
    return json.dumps({"type": "stdin", "data": base64.b64encode(chunk).decode("ascii")})


STDIN_END = json.dumps({"type": "stdin_end"})


def iter_stdin(stdin: bytes | str | IO[bytes] | Iterable[bytes] | None) -> Iterator[bytes]:
    """Standard input in chunks of at most :data:`STDIN_CHUNK` bytes.

    Args:
        stdin: Bytes, text (UTF-8), a binary file, or an iterable of byte chunks.

    Yields:
        The chunks.
    """
    if stdin is None:
        return
    if isinstance(stdin, str):
        stdin = stdin.encode("utf-8")
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        view = memoryview(stdin)
        for i in range(0, len(view), STDIN_CHUNK):
            yield bytes(view[i : i + STDIN_CHUNK])
        return
    read = getattr(stdin, "read", None)
    if callable(read):
        while chunk := read(STDIN_CHUNK):
            yield bytes(chunk)
        return
    for piece in stdin:
        view = memoryview(piece)
        for i in range(0, len(view), STDIN_CHUNK):
            yield bytes(view[i : i + STDIN_CHUNK])


class ClientBase:
    """Configuration and helpers shared by :class:`~denv.Client` and :class:`~denv.AsyncClient`."""

    def __init__(
        self,
        url: str | None,
        token: str | None,
        project: str | None,
        config_path: str | os.PathLike[str] | None,
    ) -> None:
        self._config: Config = load_config(url, token, project, path=config_path)
        self._url = self._config.require_url()

    @property
    def url(self) -> str:
        """The control plane's base URL."""
        return self._url

    @property
    def project(self) -> str | None:
        """The default project of calls that name none."""
        return self._config.project

    @property
    def config(self) -> Config:
        """The resolved configuration (file, environment, arguments)."""
        return self._config

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": "denv-python/0.1.0"}
        if self._config.token:
            headers["Authorization"] = f"Bearer {self._config.token}"
        return headers

    def _project(self, project: str | None) -> str:
        return self._config.require_project(project)

    def _ws_error(self, path: str, exc: BaseException) -> DenvError:
        from websockets.exceptions import InvalidStatus

        if isinstance(exc, InvalidStatus):
            return error_from_body(
                exc.response.status_code, bytes(exc.response.body), what=f"GET {path}"
            )
        if isinstance(exc, TimeoutError):
            return DenvTimeoutError(f"GET {path}: no WebSocket handshake from {self._url} in time")
        return unreachable(self._url, exc)
