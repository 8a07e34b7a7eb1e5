"""The exact user-facing strings of the protections, as ``packages/spec/src/messages.ts`` has them.

The conformance suite asserts them verbatim.

``python/tests/test_messages.py`` checks this module against the TypeScript source.
"""

from __future__ import annotations

#: Reasons of a special-file refusal (``SpecialFileReasons``).
SPECIAL_FILE_REASONS: dict[str, str] = {
    "device": "a device node",
    "fifo": "a FIFO",
    "symlink_escapes": "a symlink that escapes the destination",
    "hardlink_escapes": "a hard link that escapes the archive",
    "setid": "a file with the setuid or setgid bit",
    "climbs": "a path that climbs out (..)",
    "absolute": "an absolute path",
    "too_deep": "in a tree deeper than the limit",
    "too_large": "in a tree larger than the limit",
    "unsupported": "an entry of an unsupported type",
}


def agent_root(service: str) -> str:
    """Protection 1: exec or files as root in the agent service.

    Args:
        service: The agent service.

    Returns:
        The exact message.
    """
    return (
        f"refused: exec as root in agent service '{service}' of an rl-environment; "
        "the agent is never root (protection 1)"
    )


def agent_survived(count: int) -> str:
    """Protection 2: agent processes survived the kill.

    Args:
        count: How many survived.

    Returns:
        The exact message.
    """
    return (
        f"refused: {count} agent process(es) still running after the kill; "
        "the verifier does not start (protection 2)"
    )


def special_file(path: str, reason: str) -> str:
    """Protection 3: a special file in an upload or submission.

    Args:
        path: The entry, as the archive spells it.
        reason: One of :data:`SPECIAL_FILE_REASONS`' values.

    Returns:
        The exact message.
    """
    return (
        f"refused: '{path}' is {reason}; "
        "special files are refused in uploads and submissions (protection 3)"
    )


def egress_leak(environment: str, finding: str) -> str:
    """Protection 5: the egress probe found a way out.

    Args:
        environment: ``PROJECT/ENV``.
        finding: What the probe found.

    Returns:
        The exact message.
    """
    return (
        f"refused: the egress probe of '{environment}' found a way out ({finding}); "
        "the episode does not start (protection 5)"
    )


def harbor_public_network(task: str) -> str:
    """denv.harbor refuses a task that asks for internet access (``HarborTaskMessages``).

    Args:
        task: The task's name.

    Returns:
        The exact message.
    """
    return (
        f"refused: task '{task}' asks for network_mode \"public\", and public_network=refuse "
        "is set; an rl-environment reaches at most the host's package mirrors (protection 5): "
        "pass --ek public_network=mirrors for those, or deny to run it without internet"
    )


def harbor_missing_file(file: str) -> str:
    """``denv import harbor``: a file the Harbor task needs is missing (``HarborTaskMessages``).

    Args:
        file: The file, as the user named the task folder.

    Returns:
        The exact message.
    """
    return f"{file}: missing; a Harbor task needs it"


def harbor_no_environment(dir: str) -> str:
    """``denv import harbor``: the task has nothing to build or pull (``HarborTaskMessages``).

    Args:
        dir: The task folder, as the user named it.

    Returns:
        The exact message.
    """
    return (
        f"{dir}/environment: no Dockerfile, no docker-compose.yaml and no [environment] "
        "docker_image in task.toml"
    )


def import_unsupported(file: str, key: str, reason: str) -> str:
    """``denv import``: a key denv cannot map (``ImportMessages``).

    Args:
        file: The file that has the key.
        key: The key, dotted.
        reason: Why.

    Returns:
        The exact message.
    """
    return f"{file}: '{key}' cannot be mapped: {reason}"


def import_not_empty(dir: str) -> str:
    """``denv import``: the folder to write holds something (``ImportMessages``).

    Args:
        dir: The folder, as the user named it.

    Returns:
        The exact message.
    """
    return f"{dir} is not empty: write into a new or empty directory"


def verifiers_host_shell(harness: str) -> str:
    """``denv.verifiers``: a harness would run the model's commands on the host.

    ``VerifiersMessages.hostShell`` in messages.ts.

    Args:
        harness: The harness's id.

    Returns:
        The exact message.
    """
    return (
        f"refused: harness '{harness}' would run the model's commands in verifiers' subprocess "
        "runtime, on the machine running the rollouts, outside the denv sandbox; the agent acts "
        "only in its sandbox (protection 1): keep the default harness (null) or give it a "
        "container runtime (--env.agent.runtime.type docker)"
    )


def trl_environment_type(value: str) -> str:
    """``denv.trl``: ``environment_type`` names a Harbor backend instead of an import path.

    ``TrlMessages.environmentType`` in messages.ts.

    Args:
        value: The ``environment_type`` given.

    Returns:
        The exact message.
    """
    return (
        f"refused: environment_type '{value}' is a Harbor backend name; denv.trl runs each "
        "rollout on a Harbor environment given by import path: "
        'environment_type="denv.harbor:DenvEnvironment"'
    )


def karotte_missing_file(file: str) -> str:
    """``denv import karotte``: a file the environment needs is missing (``KarotteMessages``).

    Args:
        file: The file, as the user named the environment folder.

    Returns:
        The exact message.
    """
    return f"{file}: missing; a Karotte environment needs it"
