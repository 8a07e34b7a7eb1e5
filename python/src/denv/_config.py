"""Client configuration, shared with the ``denv`` CLI.

Precedence, lowest first: the config file (``$DENV_CONFIG``, else
``$XDG_CONFIG_HOME/denv/config.json``, else ``~/.config/denv/config.json``), then the
environment variables ``DENV_URL``, ``DENV_TOKEN``, ``DENV_PROJECT``, then the arguments given
in code (the CLI's flags).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import ConfigError


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The config file the client reads.

    Args:
        environ: Environment variables (default: ``os.environ``).

    Returns:
        ``$DENV_CONFIG`` when set, else ``$XDG_CONFIG_HOME/denv/config.json``, else
        ``~/.config/denv/config.json``.
    """
    env = os.environ if environ is None else environ
    explicit = env.get("DENV_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "denv" / "config.json"


@dataclass(frozen=True)
class Config:
    """Where the control plane is and who the client is.

    Attributes:
        url: The control plane's base URL, without a trailing slash (None: not configured).
        token: The API token (None: requests go without one).
        project: The default project for calls that name none.
        path: The config file that was consulted (it may not exist).
    """

    url: str | None
    token: str | None = field(repr=False)
    project: str | None
    path: Path

    def require_url(self) -> str:
        """The URL, or a :class:`ConfigError` saying how to set it.

        Returns:
            The control plane URL.

        Raises:
            ConfigError: No URL is configured anywhere.
        """
        if not self.url:
            raise ConfigError(
                "no denv control plane URL: pass url=..., set DENV_URL, "
                f'or write {{"url": "..."}} to {self.path}'
            )
        return self.url

    def require_project(self, project: str | None = None) -> str:
        """The project named, else the configured default.

        Args:
            project: A project named by the caller.

        Returns:
            The project.

        Raises:
            ConfigError: Neither is given.
        """
        name = project or self.project
        if not name:
            raise ConfigError(
                "no project: pass project=..., set DENV_PROJECT, "
                f'or write {{"project": "..."}} to {self.path}'
            )
        return name


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read the denv config file {path}: {exc}") from exc
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object with url, token and project")
    for key in ("url", "token", "project"):
        if key in data and data[key] is not None and not isinstance(data[key], str):
            raise ConfigError(f"{path}: '{key}' is not a string")
    return data


def load_config(
    url: str | None = None,
    token: str | None = None,
    project: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    path: str | os.PathLike[str] | None = None,
) -> Config:
    """Resolves the configuration: file, then environment, then these arguments.

    Empty strings count as unset at every level.

    Args:
        url: Control plane URL given in code.
        token: API token given in code.
        project: Default project given in code.
        environ: Environment variables (default: ``os.environ``).
        path: Config file to read instead of the default location.

    Returns:
        The resolved configuration.

    Raises:
        ConfigError: The config file exists but cannot be read or parsed.
    """
    env = os.environ if environ is None else environ
    file_path = Path(path).expanduser() if path is not None else config_path(env)
    data = _read_file(file_path)

    def pick(arg: str | None, var: str, key: str) -> str | None:
        for value in (arg, env.get(var), data.get(key)):
            if value:
                return str(value)
        return None

    resolved_url = pick(url, "DENV_URL", "url")
    return Config(
        url=resolved_url.rstrip("/") if resolved_url else None,
        token=pick(token, "DENV_TOKEN", "token"),
        project=pick(project, "DENV_PROJECT", "project"),
        path=file_path,
    )
