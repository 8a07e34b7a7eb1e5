"""The options of ``DenvEnvironment`` (``--ek key=value``), parsed once (no Harbor import)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails

from ._task import VERIFIER_UID, is_root

#: ``public_network=``: what to do with a task that asks for internet access.
PUBLIC_NETWORK = ("mirrors", "refuse", "deny")
#: ``agent_sandbox=``: how the agent, root in Harbor's tasks, is confined.
AGENT_SANDBOX = ("gvisor", "none")

_Options = TypeVar("_Options", bound=BaseModel)


class DenvHarborOptions(BaseModel):
    """The options of ``denv.harbor:DenvEnvironment``, as ``harbor run --ek key=value`` gives them.

    Harbor parses ``--ek`` values as JSON where they are (``ttl_sec=60`` is a number,
    ``verifier_user=1001`` too); numbers given for text options are taken as text, and an
    empty ``url``, ``token`` or ``project`` is the same as leaving it out.

    Attributes:
        url: Control plane URL (default: ``DENV_URL`` / the config file).
        token: API token (default: ``DENV_TOKEN`` / the config file); never logged.
        project: The denv project of the task (default ``harbor-<task name>``).
        ttl_sec: Seconds until a trial's sandbox is destroyed even if nothing cleans it up.
        agent_sandbox: ``gvisor`` (default): the agent is root in ``main`` as in Harbor, inside
            gVisor (``x-denv.agent.sandbox``), with no privilege on the host; ``none``: the
            agent is uid 1000 (for hosts without gVisor; tasks whose solution needs root fail).
        verifier_user: The user the verifier's commands run as, on their own fork (default:
            root with ``agent_sandbox=gvisor``, as Harbor runs tests; uid 1001 otherwise;
            root is refused with ``agent_sandbox=none``).
        public_network: A task asking for ``network_mode = "public"``: ``mirrors`` (default:
            the episode reaches the host's package mirrors through denvd's proxy and nothing
            else), ``refuse`` it before anything is deployed, or ``deny`` (no egress at all).
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", coerce_numbers_to_str=True, hide_input_in_errors=True
    )

    url: str | None = None
    token: str | None = Field(default=None, repr=False)
    project: str | None = None
    ttl_sec: int = 3600
    agent_sandbox: str = "gvisor"
    verifier_user: str | None = None
    public_network: str = "mirrors"

    @field_validator("url", "token", "project", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("agent_sandbox")
    @classmethod
    def _known_sandbox(cls, value: str) -> str:
        if value not in AGENT_SANDBOX:
            raise ValueError(f"expected one of {', '.join(AGENT_SANDBOX)}")
        return value

    @field_validator("verifier_user")
    @classmethod
    def _root_only_sandboxed(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Without a sandbox the verifier's fork is a plain container, where root is refused;
        # said here, in one line, rather than at the verifier's first exec after the agent run.
        if value is not None and is_root(value) and info.data.get("agent_sandbox") == "none":
            raise ValueError(
                f"root needs agent_sandbox=gvisor; give another uid (default {VERIFIER_UID})"
            )
        return value

    @property
    def verifier(self) -> str:
        """The verifier's user: as given, else root in a gVisor sandbox, else uid 1001."""
        if self.verifier_user is not None:
            return self.verifier_user
        return "root" if self.agent_sandbox == "gvisor" else VERIFIER_UID

    @field_validator("public_network")
    @classmethod
    def _known_public_network(cls, value: str) -> str:
        if value not in PUBLIC_NETWORK:
            raise ValueError(f"expected one of {', '.join(PUBLIC_NETWORK)}")
        return value


def parse_ek_options(model: type[_Options], kwargs: Mapping[str, Any] | None) -> _Options:
    """Parses the environment kwargs into the options model, once.

    Args:
        model: :class:`DenvHarborOptions` or a model extending it (with Harbor's own options).
        kwargs: The ``--ek`` options (Harbor's runtime inputs already taken out).

    Returns:
        The options.

    Raises:
        ValueError: An unknown option, or a value that does not fit; one line naming it.
    """
    try:
        return model.model_validate(dict(kwargs or {}))
    except ValidationError as exc:
        errors = exc.errors()
        problems = "; ".join(_problem(error, kwargs or {}) for error in errors)
        if any(error["type"] == "extra_forbidden" for error in errors):
            problems += f" (the options: {', '.join(DenvHarborOptions.model_fields)})"
        raise ValueError(f"denv.harbor:DenvEnvironment --ek: {problems}") from None


def _problem(error: ErrorDetails, kwargs: Mapping[str, Any]) -> str:
    name = ".".join(str(part) for part in error["loc"]) or "options"
    if error["type"] == "extra_forbidden":
        return f"unknown option {name!r}"
    ctx = error.get("ctx") or {}
    reason = (
        str(ctx["error"]) if error["type"] == "value_error" and "error" in ctx else error["msg"]
    )
    shown = "***" if name == "token" else repr(kwargs.get(name))
    return f"{name}={shown}: {reason}"
