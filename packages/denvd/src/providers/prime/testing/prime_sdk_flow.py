"""Drives the Prime double with the official SDK (prime-sandboxes 0.5.1), for prime-server.test.ts.

The environment points the SDK at the double (PRIME_API_BASE_URL, PRIME_API_KEY, HOME for its
auth cache). Prints one JSON object of what it saw on stdout; the test asserts on it. Deletes
what it created, also on failure.
"""

import asyncio
import contextlib
import json
import os
import sys
import tarfile
import tempfile
import time

import httpx
from prime_sandboxes import (
    APIClient,
    APIError,
    AsyncAPIClient,
    AsyncSandboxClient,
    BuildImageRequest,
    BuildImageResponse,
    CommandTimeoutError,
    CreateSandboxRequest,
    ImageClient,
    SandboxClient,
    SandboxFileNotFoundError,
    UnauthorizedError,
)

LISTENER = (
    "nohup perl -MIO::Socket::INET -e '$| = 1; $s = IO::Socket::INET->new(Listen => 5, "
    'LocalPort => 7777, ReuseAddr => 1) or die; print "up\\n"; '
    'while ($c = $s->accept) { print "accepted\\n"; close $c }\' > /tmp/listener.log 2>&1 &'
)


def probe(client: SandboxClient, sandbox_id: str, ip: str) -> str:
    """Whether the sandbox reaches port 7777 of `ip`: "reached" or "blocked"."""
    connect = f"timeout 5 bash -c 'echo hi > /dev/tcp/{ip}/7777' 2>/dev/null"
    command = f"{connect} && echo reached || echo blocked"
    return client.execute_command(sandbox_id, command).stdout.strip()


async def live_process(sandbox_id: str) -> dict:
    """Feeds stdin to a live process and kills it: only the async client's open_process can."""
    client = AsyncSandboxClient(AsyncAPIClient())
    try:
        process = await client.open_process(sandbox_id, 'read line; echo "got $line"; sleep 60')
        await process.write_stdin(b"ping\n")
        first = await anext(process.stdout)
        await process.kill()
        return {"pid": process.pid, "echo": first.decode(), "killed": await process.wait()}
    finally:
        await client.aclose()


# The name `prime images push` gives the Dockerfile inside the context it uploads.
PACKAGED_DOCKERFILE = ".__prime_dockerfile__"
DOCKERFILE = "FROM debian:bookworm-slim\nRUN useradd -m -u 1000 agent\nCOPY motd.txt /etc/flow-motd\n"


def push_image(images: ImageClient, tmp: str) -> tuple[str, dict]:
    """Builds an image as `prime images push` does: tar.gz context, PUT, start, poll.

    Returns the reference POST /images/build answered and what the flow saw.
    """
    context = os.path.join(tmp, "context")
    os.makedirs(context)
    with open(os.path.join(context, "motd.txt"), "w") as f:
        f.write("built through the image API\n")
    dockerfile = os.path.join(tmp, "Dockerfile")
    with open(dockerfile, "w") as f:
        f.write(DOCKERFILE)
    archive = os.path.join(tmp, "context.tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(context, arcname=".")
        tar.add(dockerfile, arcname=PACKAGED_DOCKERFILE)
    build = images.initiate_build(
        BuildImageRequest(
            image_name="flow-image", image_tag="v1", dockerfile_path=PACKAGED_DOCKERFILE
        )
    )
    assert isinstance(build, BuildImageResponse) and build.upload_url
    with open(archive, "rb") as f:
        data = f.read()
    seen: dict = {
        "wrong_type": httpx.put(
            build.upload_url, content=data, headers={"Content-Type": "application/x-tar"}
        ).status_code
    }
    httpx.put(
        build.upload_url, content=data, headers={"Content-Type": "application/octet-stream"}
    ).raise_for_status()
    statuses = [images.start_build(build.build_id)["status"]]
    deadline = time.monotonic() + 120
    while statuses[-1] not in ("COMPLETED", "FAILED", "CANCELLED") and time.monotonic() < deadline:
        time.sleep(0.2)
        status = images.get_build_status(build.build_id)["status"]
        if status != statuses[-1]:
            statuses.append(status)
    seen["statuses"] = statuses
    seen["listed"] = [(i.display_ref, i.status.value) for i in images.list().data]
    return build.full_image_path, seen


def main() -> None:
    """Runs the flow and prints what it saw."""
    seen: dict = {}
    client = SandboxClient(APIClient())
    created: list[str] = []
    try:
        label = f"flow-{os.getpid()}"
        a = client.create(
            CreateSandboxRequest(
                name="flow-a",
                docker_image="debian:bookworm-slim",
                environment_vars={"FROM_CREATE": "sandbox-wide"},
                labels=[label],
            )
        )
        created.append(a.id)
        seen["created_status"] = a.status
        client.wait_for_creation(a.id)
        seen["status"] = client.get(a.id).status
        seen["listed"] = [s.id for s in client.list(labels=[label]).sandboxes]
        seen["listed_other_label"] = len(client.list(labels=["no-such-label"]).sandboxes)

        r = client.execute_command(a.id, "echo out; echo err >&2; exit 3")
        seen["exec"] = {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code}
        r = client.execute_command(
            a.id,
            'echo "$FROM_CREATE $FROM_CALL $(pwd) $(id -un)"',
            working_dir="/tmp",
            env={"FROM_CALL": "per-call"},
            user="nobody",
        )
        seen["exec_as_nobody"] = r.stdout.strip()
        seen["exec_as_root"] = client.execute_command(a.id, "id -u").stdout.strip()
        try:
            client.execute_command(a.id, "sleep 30", timeout=2)
            seen["timeout"] = "no error"
        except CommandTimeoutError as e:
            seen["timeout"] = type(e).__name__

        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "up.bin")
            with open(src, "wb") as f:
                f.write(b"checkpointed\x00\xff bytes\n")
            seen["upload"] = client.upload_file(a.id, "/srv/data/up.bin", src).size
            back = os.path.join(tmp, "back.bin")
            client.download_file(a.id, "/srv/data/up.bin", back)
            with open(back, "rb") as f:
                seen["download_matches"] = f.read() == b"checkpointed\x00\xff bytes\n"
        seen["read_file"] = client.read_file(a.id, "/srv/data/up.bin").size
        try:
            client.read_file(a.id, "/srv/none")
            seen["read_missing"] = "no error"
        except SandboxFileNotFoundError as e:
            seen["read_missing"] = type(e).__name__

        seen["live"] = asyncio.run(live_process(a.id))

        checkpoint = client.checkpoint(a.id)
        seen["checkpoint_state"] = checkpoint.state
        checkpoint = client.wait_for_checkpoint(checkpoint.id, timeout_seconds=120)
        seen["checkpoint_durable"] = checkpoint.state
        seen["checkpoints_listed"] = [c.id for c in client.list_checkpoints(a.id)] == [
            checkpoint.id
        ]
        b = client.create(CreateSandboxRequest(name="flow-b", checkpoint_id=checkpoint.id))
        created.append(b.id)
        client.wait_for_creation(b.id)
        seen["restored_image"] = client.get(b.id).docker_image
        seen["restored_file"] = client.execute_command(
            b.id, "cat /srv/data/up.bin | head -c 12"
        ).stdout

        c = client.create(
            CreateSandboxRequest(
                name="flow-c", docker_image="debian:bookworm-slim", network_allowlist=[]
            )
        )
        created.append(c.id)
        client.wait_for_creation(c.id)
        seen["closed_allowlist"] = client.get(c.id).network_allowlist
        client.execute_command(a.id, LISTENER)
        ip = client.execute_command(a.id, "hostname -i").stdout.split()[0]
        seen["probe_open"] = probe(client, b.id, ip)
        seen["probe_closed"] = probe(client, c.id, ip)
        seen["egress_closed"] = client.get_network(c.id).policy.allowlist

        with tempfile.TemporaryDirectory() as tmp:
            image, seen["image"] = push_image(ImageClient(APIClient()), tmp)
        d = client.create(CreateSandboxRequest(name="flow-d", docker_image=image))
        created.append(d.id)
        client.wait_for_creation(d.id)
        seen["image"]["ref"] = client.get(d.id).docker_image
        seen["image"]["ran"] = client.execute_command(
            d.id, "cat /etc/flow-motd; id -u", user="agent"
        ).stdout
        client.delete(d.id)

        client.delete(b.id)
        seen["deleted_status"] = client.get(b.id).status
        try:
            client.delete_checkpoint(checkpoint.id)
            seen["delete_tip"] = "no error"
        except APIError as e:
            seen["delete_tip"] = str(e)
        client.delete(a.id)
        client.delete_checkpoint(checkpoint.id)
        seen["checkpoint_deleted"] = True
    finally:
        for sandbox_id in created:
            # The flow deleted them already unless it failed on the way.
            with contextlib.suppress(APIError):
                client.delete(sandbox_id)

    try:
        SandboxClient(APIClient(api_key="pit_wrong")).list()
        seen["wrong_key"] = "no error"
    except UnauthorizedError as e:
        seen["wrong_key"] = type(e).__name__
    json.dump(seen, sys.stdout)


if __name__ == "__main__":
    main()
