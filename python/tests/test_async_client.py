"""The asyncio client against the in-memory control plane."""

import io
import json
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

import denv
from fakecp import FakeControlPlane, exec_response


@pytest.fixture
def fake() -> FakeControlPlane:
    fake = FakeControlPlane()
    fake.add_project("shop")
    fake.add_environment("shop/alpha", fake.add_version("shop", 1))
    return fake


@pytest_asyncio.fixture
async def client(fake: FakeControlPlane, isolated_config: Path) -> AsyncIterator[denv.AsyncClient]:
    async with denv.AsyncClient("http://cp", "t0k", "shop", transport=fake.transport()) as c:
        yield c


async def test_service_projects_versions(client: denv.AsyncClient) -> None:
    assert await client.health()
    assert (await client.whoami())["name"] == "ci"
    assert [p.name for p in await client.list_projects()] == ["shop"]
    assert (await client.get_project()).compose_path == "compose.yaml"
    assert (await client.create_project("lab")).name == "lab"
    await client.delete_project("lab")
    assert [v.id for v in await client.list_versions()] == ["shop@v1"]
    assert (await client.get_version(1)).id == "shop@v1"
    await client.delete_version("shop@v1")


async def test_deploy(client: denv.AsyncClient, fake: FakeControlPlane, tmp_path: Path) -> None:
    (tmp_path / "compose.yaml").write_text("services: {app: {image: x}}\n")
    dep = await client.deploy(tmp_path, extra_files={"extra.txt": b"x"})
    assert dep.status == "succeeded"
    post = next(r for r in fake.requests if r.url.path.endswith("/deploy"))
    body = fake.bodies[fake.requests.index(post)]
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert sorted(tar.getnames()) == ["compose.yaml", "extra.txt"]
    assert post.headers["x-denv-source-sha256"] == denv.source_hash(tmp_path, {"extra.txt": b"x"})
    assert [d.id for d in await client.list_deployments()] == [dep.id]
    assert (await client.get_deployment(dep.id)).kind == "deploy"


async def test_environments(client: denv.AsyncClient, fake: FakeControlPlane) -> None:
    assert [e.id for e in await client.list_environments()] == ["shop/alpha"]
    fork = await client.fork("shop/alpha", name="f1")
    assert fork.id == "shop/f1"
    assert (await client.snapshot(fork)).id == "shop@v2"
    assert (await client.verify(fork)).status == "graded"
    assert (await client.rollback(fork, 1)).kind == "rollback"
    assert (await client.stop(fork)).kind == "stop"
    assert (await client.start(fork)).kind == "start"
    assert (await client.destroy(fork)).kind == "destroy"
    with pytest.raises(denv.NotFoundError):
        await client.get_environment(fork)


async def test_sandboxes_exec_files(client: denv.AsyncClient, fake: FakeControlPlane) -> None:
    sb = await client.create_sandbox(ttl_sec=30)
    assert [s.id for s in await client.list_sandboxes()] == [sb.id]
    fake.on_exec = lambda env, req: exec_response(0, b"\x00\xfe", b"")
    res = await client.exec(sb, ["printf", "x"], stdin=b"\x01")
    assert res.stdout == b"\x00\xfe"
    assert json.loads(fake.bodies[-1])["stdin"] == "AQ=="
    with pytest.raises(denv.AgentRootError):
        await client.exec(sb, ["id"], user="0")

    await client.write_file(sb, "/workspace/n.txt", b"\x00data")
    assert await client.read_file(sb, "/workspace/n.txt") == b"\x00data"

    async def chunks() -> AsyncIterator[bytes]:
        archive = await client.get_files(sb, "/workspace/n.txt")
        yield archive[:100]
        yield archive[100:]

    written = await client.put_files(sb, "/workspace/copy", chunks())
    assert written.entries == 1
    assert await client.read_file(sb, "/workspace/copy/n.txt") == b"\x00data"
    with pytest.raises(denv.InvalidRequestError, match="directory"):
        await client.read_file(sb, "/workspace/copy")
    assert (await client.probe(sb)).ok
    assert (await client.logs(sb)).stdout == "hello\n"
    await client.destroy_sandbox(sb)


async def test_iter_files_can_stop_early(client: denv.AsyncClient, fake: FakeControlPlane) -> None:
    import contextlib

    fake.put("shop/alpha", "/workspace/big", b"x" * 100_000)
    async with contextlib.aclosing(client.iter_files("shop/alpha", "/workspace/big")) as it:
        async for chunk in it:
            assert chunk
            break
