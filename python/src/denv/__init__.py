"""The denv Python package: a client of the denv control plane, and adapters for frameworks.

``denv.Client`` (blocking) and ``denv.AsyncClient`` (asyncio) cover the REST API: projects,
deploys, deployments, environments, versions, sandboxes, exec, files, tunnels, probes and
logs. ``denv.inspect`` is the Inspect sandbox provider (``sandbox="denv"``);
``denv.conformance`` is the framework conformance suite (``pytest --pyargs denv.conformance``).
"""

from . import messages
from ._async_client import AsyncClient
from ._client import Client
from ._config import Config, config_path, load_config
from ._errors import (
    AgentRootError,
    AgentSurvivedError,
    ConfigError,
    ConflictError,
    DenvConnectionError,
    DenvError,
    DenvTimeoutError,
    DockerError,
    EgressLeakError,
    ForbiddenError,
    InternalError,
    InvalidComposeError,
    InvalidRequestError,
    NotFoundError,
    SpecialFileError,
    UnauthorizedError,
    VerifierFailedError,
    error_for,
)
from ._exec import ExecResult
from ._models import (
    AgentInfo,
    Deployment,
    DeploymentEvent,
    Environment,
    EpisodeLog,
    EpisodeStep,
    FilesResult,
    GithubConnection,
    Logs,
    Phase,
    Pool,
    ProbeResult,
    Project,
    ReplayResult,
    ReplayStep,
    ReplayStepStatus,
    ReplaySummary,
    ServiceRef,
    Target,
    TargetKind,
    VerifyResult,
    Version,
)
from ._tar import source_hash
from ._tunnel import AsyncPortForward, AsyncTunnel, PortForward, Tunnel

__version__ = "0.1.0"

__all__ = [
    "AgentInfo",
    "AgentRootError",
    "AgentSurvivedError",
    "AsyncClient",
    "AsyncPortForward",
    "AsyncTunnel",
    "Client",
    "Config",
    "ConfigError",
    "ConflictError",
    "DenvConnectionError",
    "DenvError",
    "DenvTimeoutError",
    "Deployment",
    "DeploymentEvent",
    "DockerError",
    "EgressLeakError",
    "Environment",
    "EpisodeLog",
    "EpisodeStep",
    "ExecResult",
    "FilesResult",
    "ForbiddenError",
    "InternalError",
    "InvalidComposeError",
    "InvalidRequestError",
    "Logs",
    "NotFoundError",
    "Phase",
    "Pool",
    "PortForward",
    "Target",
    "TargetKind",
    "ProbeResult",
    "GithubConnection",
    "Project",
    "ReplayResult",
    "ReplayStepStatus",
    "ReplaySummary",
    "ReplayStep",
    "ServiceRef",
    "SpecialFileError",
    "Tunnel",
    "UnauthorizedError",
    "VerifierFailedError",
    "Version",
    "VerifyResult",
    "__version__",
    "config_path",
    "error_for",
    "load_config",
    "messages",
    "source_hash",
]
