"""A server-sent events decoder (the deployment log stream, ``text/event-stream``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._errors import InvalidRequestError
from ._models import Deployment, DeploymentEvent, Phase


@dataclass(frozen=True)
class SSEMessage:
    """One dispatched event.

    Attributes:
        event: The event type (``message`` when the stream names none).
        data: The data lines, joined with newlines.
        id: The last event id seen, if any.
    """

    event: str
    data: str
    id: str | None = None


class SSEDecoder:
    """Turns lines of an event stream into messages (the WHATWG algorithm, line by line)."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._last_id: str | None = None

    def feed(self, line: str) -> SSEMessage | None:
        """Feeds one line (without its line ending).

        Args:
            line: The line.

        Returns:
            The message a blank line dispatched, else None.
        """
        if line == "":
            if not self._data and not self._event:
                return None
            msg = SSEMessage(self._event or "message", "\n".join(self._data), self._last_id)
            self._event = ""
            self._data = []
            return msg
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._last_id = value
        return None

    def flush(self) -> SSEMessage | None:
        """Dispatches what an unterminated stream left (the stream ended mid-event).

        Returns:
            The pending message, if any.
        """
        return self.feed("")


def deployment_event(msg: SSEMessage) -> DeploymentEvent | None:
    """Parses a deployment log message (events ``phase``, ``log`` and ``done``).

    Args:
        msg: One SSE message.

    Returns:
        The event, or None for events this client does not know.

    Raises:
        InvalidRequestError: A known event carries data that is not its JSON.
    """
    if msg.event not in ("phase", "log", "done"):
        return None
    try:
        data: Any = json.loads(msg.data) if msg.data else {}
    except ValueError as exc:
        raise InvalidRequestError(f"deployment log: '{msg.event}' data is not JSON") from exc
    if msg.event == "phase":
        return DeploymentEvent(type="phase", phase=Phase.model_validate(data))
    if msg.event == "log":
        line = data.get("line", "") if isinstance(data, dict) else str(data)
        return DeploymentEvent(type="log", line=str(line))
    return DeploymentEvent(type="done", deployment=Deployment.model_validate(data))
