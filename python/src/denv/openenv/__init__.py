"""OpenEnv on denv: ``DenvProvider``, openenv-core's ``ContainerProvider`` backed by sandboxes.

``DenvProvider().start_container("PROJECT@vN")`` forks a version of a denv project into a
sandbox and returns a loopback URL tunnelled to its OpenEnv server (port 8000), so
``GenericEnvClient.from_docker_image("PROJECT@vN", provider=DenvProvider())`` runs an episode
on denv. :meth:`DenvProvider.fork` snapshots a running episode and starts a second one from the
same disk state. Needs the ``openenv`` extra (``pip install -e 'python[openenv]'``).
"""

from ._provider import OPENENV_PORT, DenvProvider, parse_image

__all__ = ["OPENENV_PORT", "DenvProvider", "parse_image"]
