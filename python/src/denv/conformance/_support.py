"""Helpers of the conformance suite."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .._client import Client
from .._models import Environment


@dataclass
class DenvSandbox:
    """The environment under test and a client of its control plane.

    Attributes:
        client: The client.
        id: ``PROJECT/ENV`` of the environment.
        environment: The environment as the control plane described it.
    """

    client: Client
    id: str
    environment: Environment

    @property
    def project(self) -> str:
        """The environment's project."""
        return self.environment.project

    @property
    def agent_service(self) -> str:
        """The agent service."""
        assert self.environment.agent is not None, f"{self.id} names no agent service"
        return self.environment.agent.service

    @property
    def agent_user(self) -> str:
        """The agent user."""
        assert self.environment.agent is not None, f"{self.id} names no agent user"
        return self.environment.agent.user

    @property
    def workdir(self) -> str:
        """The agent's working directory."""
        assert self.environment.agent is not None, f"{self.id} names no agent workdir"
        return self.environment.agent.workdir

    def other_services(self) -> list[str]:
        """The services other than the agent's."""
        return [s for s in self.environment.service_names if s != self.agent_service]

    def scratch(self, name: str) -> str:
        """A fresh path under the agent's workdir for one test.

        Args:
            name: What the test calls it.

        Returns:
            ``WORKDIR/conformance-<random>/<name>``.
        """
        return f"{self.workdir.rstrip('/')}/conformance-{random.randrange(16**8):08x}/{name}"


def unique_seconds() -> int:
    """A sleep duration no other process in the environment is likely to use.

    Returns:
        Seconds (about 35 days, distinct per call).
    """
    return 3_000_000 + random.randrange(1_000_000)


#: Counts processes whose command line is ``sleep N`` where N is ``$1 + 1``. The number is
#: computed inside the script, so the counting shell's own command line never matches.
COUNT_SLEEPERS = (
    "n=$(($1 + 1)); c=0; for f in /proc/[0-9]*/cmdline; do "
    'l=$(tr "\\000" " " < "$f" 2>/dev/null) || continue; '
    'case "$l" in "sleep $n"*) c=$((c + 1));; esac; done; echo "$c"'
)


def sleepers(sb: DenvSandbox, seconds: int, service: str | None = None) -> int:
    """How many ``sleep SECONDS`` processes run in a service.

    Args:
        sb: The sandbox.
        seconds: The unique duration.
        service: The service (default: the agent's).

    Returns:
        The count.
    """
    res = sb.client.exec(
        sb.id, ["sh", "-c", COUNT_SLEEPERS, "sh", str(seconds - 1)], service=service, timeout=60
    )
    assert res.exit_code == 0, res.stderr_text
    return int(res.stdout_text.strip() or "0")
