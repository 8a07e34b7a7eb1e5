"""The exec contract (``packages/spec/src/exec.ts``): the request, and the result decoded."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import InvalidRequestError

#: Per-stream output cap the control plane applies when the request gives none.
DEFAULT_OUTPUT_LIMIT = 10 * 1024 * 1024

#: Exit codes of the contract: a timeout, a command that could not run, one not found.
EXIT_TIMED_OUT = 124
EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command.

    Attributes:
        exit_code: The command's exit code; 124 when it timed out; 126/127 when it could
            not be started (not executable / not found).
        stdout: Standard output, as bytes.
        stderr: Standard error, as bytes.
        timed_out: True when the timeout expired and the process tree was killed.
        truncated: True when a stream went over ``output_limit`` (the rest was dropped).
        duration_ms: Wall time of the command.
    """

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    truncated: bool = False
    duration_ms: int = 0

    @property
    def ok(self) -> bool:
        """True when the command exited 0 in time."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def stdout_text(self) -> str:
        """Standard output decoded as UTF-8 (undecodable bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """Standard error decoded as UTF-8 (undecodable bytes replaced)."""
        return self.stderr.decode("utf-8", "replace")


def as_bytes(data: bytes | bytearray | memoryview | str) -> bytes:
    """Bytes of ``data`` (a str is encoded as UTF-8).

    Args:
        data: Text or bytes.

    Returns:
        The bytes.
    """
    if isinstance(data, str):
        return data.encode("utf-8")
    return bytes(data)


def exec_request(
    cmd: Sequence[str] | None = None,
    *,
    shell: str | None = None,
    service: str | None = None,
    user: str | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float | None = None,
    tty: bool | None = None,
    output_limit: int | None = None,
) -> dict[str, Any]:
    """Builds an ``ExecRequest`` body (snake_case JSON, stdin as base64).

    Args:
        cmd: argv form; exactly one of ``cmd`` and ``shell``.
        shell: Shell form, run with ``sh -c``.
        service: Service to run in (default: the agent service).
        user: User to run as (default: the agent user; root is refused on the agent service).
        cwd: Working directory (default: the agent's workdir).
        env: Extra environment variables.
        stdin: Standard input bytes (None: no standard input).
        timeout: Seconds; on expiry the whole process tree is killed.
        tty: Allocate a terminal.
        output_limit: Per-stream output cap in bytes (default 10 MiB).

    Returns:
        The JSON body.

    Raises:
        InvalidRequestError: Not exactly one of ``cmd`` and ``shell``, or ``cmd`` is a string.
    """
    if isinstance(cmd, (str, bytes)):
        raise InvalidRequestError(
            "'cmd' is an argv list such as ['ls', '-l']; pass a string as shell=... instead"
        )
    if (cmd is None) == (shell is None):
        raise InvalidRequestError(
            "give exactly one of 'cmd' (argv) and 'shell' (a string for sh -c)"
        )
    if cmd is not None and len(cmd) == 0:
        raise InvalidRequestError("'cmd' is empty: give at least the program to run")
    if timeout is not None and timeout <= 0:
        raise InvalidRequestError(f"timeout must be positive, not {timeout}")
    if output_limit is not None and output_limit <= 0:
        raise InvalidRequestError(f"output_limit must be positive, not {output_limit}")
    body: dict[str, Any] = {}
    if cmd is not None:
        body["cmd"] = [str(a) for a in cmd]
    if shell is not None:
        body["shell"] = shell
    if service is not None:
        body["service"] = service
    if user is not None:
        body["user"] = user
    if cwd is not None:
        body["cwd"] = cwd
    if env is not None:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if stdin is not None:
        body["stdin"] = base64.b64encode(stdin).decode("ascii")
    if timeout is not None:
        body["timeout"] = timeout
    if tty is not None:
        body["tty"] = tty
    if output_limit is not None:
        body["output_limit"] = int(output_limit)
    return body


def _decode_stream(value: Any, encoding: str, name: str) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, str):
        raise InvalidRequestError(f"exec result: '{name}' is not a string")
    if encoding == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidRequestError(f"exec result: '{name}' is not valid base64") from exc
    return value.encode("utf-8")


def decode_exec_response(
    body: Mapping[str, Any], *, stdout: bytes | None = None, stderr: bytes | None = None
) -> ExecResult:
    """Decodes an ``ExecResponse``.

    ``stdout`` and ``stderr`` are UTF-8 text, or base64 when ``encoding`` is ``"base64"``.

    Args:
        body: The response JSON.
        stdout: Output collected elsewhere (the streaming route), used instead of the body's.
        stderr: Likewise for standard error.

    Returns:
        The result, output as bytes.

    Raises:
        InvalidRequestError: The body is not an exec result.
    """
    encoding = str(body.get("encoding") or "utf8")
    if encoding not in ("utf8", "base64"):
        raise InvalidRequestError(f"exec result: unknown encoding '{encoding}'")
    exit_code = body.get("exit_code")
    if not isinstance(exit_code, int):
        raise InvalidRequestError("exec result: 'exit_code' is missing")
    out = _decode_stream(body.get("stdout"), encoding, "stdout")
    err = _decode_stream(body.get("stderr"), encoding, "stderr")
    return ExecResult(
        exit_code=exit_code,
        stdout=out if stdout is None else stdout,
        stderr=err if stderr is None else stderr,
        timed_out=bool(body.get("timed_out", False)),
        truncated=bool(body.get("truncated", False)),
        duration_ms=int(body.get("duration_ms") or 0),
    )


def request_size(body: Mapping[str, Any]) -> int:
    """Roughly how many bytes the JSON of an exec request takes.

    Args:
        body: An exec request body.

    Returns:
        An upper estimate of its encoded size.
    """
    size = 256
    for key, value in body.items():
        size += len(key) + 8
        if isinstance(value, str):
            size += len(value.encode("utf-8")) * 2
        elif isinstance(value, list):
            size += sum(len(str(v).encode("utf-8")) * 2 + 4 for v in value)
        elif isinstance(value, dict):
            size += sum(
                (len(str(k)) + len(str(v).encode("utf-8"))) * 2 + 8 for k, v in value.items()
            )
        else:
            size += 32
    return size


def format_result(result: ExecResult, limit: int) -> str:
    """A command's result as a model's tool answer: the exit code, then stdout and stderr.

    The ``bash`` tools of ``denv.verifiers`` and ``denv.hud`` answer with it.

    Args:
        result: The command's result.
        limit: Bytes of each stream to keep; the rest is cut and the cut is said.

    Returns:
        ``exit code: N`` (``(timed out)`` when it was killed), then ``stdout:`` and
        ``stderr:`` sections for the streams that are not empty.
    """
    lines = [f"exit code: {result.exit_code}" + (" (timed out)" if result.timed_out else "")]
    for name, data in (("stdout", result.stdout), ("stderr", result.stderr)):
        if not data:
            continue
        text = data[:limit].decode("utf-8", "replace")
        cut = len(data) > limit or result.truncated
        lines.append(f"{name}:\n{text}" + ("\n[output truncated]" if cut else ""))
    return "\n".join(lines)
