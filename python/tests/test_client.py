"""The blocking client against the in-memory control plane: every route it calls."""

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import denv
from fakecp import FakeControlPlane, exec_response


@pytest.fixture
def fake() -> FakeControlPlane:
    fake = FakeControlPlane()
    fake.add_project("shop")
    vid = fake.add_version("shop", 1)
    fake.add_environment("shop/alpha", vid)
    return fake


@pytest.fixture
def client(fake: FakeControlPlane, isolated_config: Path) -> Iterator[denv.Client]:
    with denv.Client("http://cp:7070/", "t0k", "shop", transport=fake.transport()) as c:
        yield c


def last(fake: FakeControlPlane) -> httpx.Request:
    return fake.requests[-1]


def test_health_and_whoami(client: denv.Client, fake: FakeControlPlane) -> None:
    assert client.health()
    assert client.whoami()["role"] == "admin"
    assert last(fake).headers["authorization"] == "Bearer t0k"
    assert last(fake).url == httpx.URL("http://cp:7070/v1/whoami")


def test_projects(client: denv.Client, fake: FakeControlPlane) -> None:
    assert [p.name for p in client.list_projects()] == ["shop"]
    assert client.get_project().name == "shop"
    made = client.create_project("lab", kind="service", compose_path="docker-compose.yml")
    assert (made.name, made.kind, made.compose_path) == ("lab", "service", "docker-compose.yml")
    assert json.loads(fake.bodies[-1]) == {
        "name": "lab",
        "kind": "service",
        "compose_path": "docker-compose.yml",
    }
    with pytest.raises(denv.ConflictError):
        client.create_project("lab")
    client.delete_project("lab")
    assert (last(fake).method, last(fake).url.path) == ("DELETE", "/v1/projects/lab")


def test_deploy_streams_the_folder_with_its_hash(
    client: denv.Client, fake: FakeControlPlane, tmp_path: Path
) -> None:
    (tmp_path / "compose.yaml").write_text("services: {app: {image: x}}\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print(1)\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    events: list[str] = []
    dep = client.deploy(tmp_path, on_event=lambda e: events.append(e.type))
    assert dep.status == "succeeded"
    assert events[-1] == "done"
    post = next(r for r in fake.requests if r.url.path == "/v1/projects/shop/deploy")
    assert post.url.params["environment"] == "alpha"
    assert post.headers["content-type"] == "application/x-tar"
    assert post.headers["x-denv-source-sha256"] == denv.source_hash(tmp_path)
    body = fake.bodies[fake.requests.index(post)]
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        names = sorted(tar.getnames())
        assert all(m.uid == 0 and m.uname == "" for m in tar.getmembers())
    assert names == ["app", "app/main.py", "compose.yaml"]


def test_deploy_git_ref(client: denv.Client, fake: FakeControlPlane) -> None:
    client.deploy(git_ref="main", environment="beta", wait=False)
    post = next(r for r in fake.requests if r.url.path == "/v1/projects/shop/deploy")
    assert json.loads(fake.bodies[fake.requests.index(post)]) == {"git_ref": "main"}
    assert post.url.params["environment"] == "beta"
    with pytest.raises(denv.InvalidRequestError, match="not both"):
        client.deploy()


def test_connect_github(client: denv.Client, fake: FakeControlPlane) -> None:
    c = client.connect_github("Acme/Shop", branch="release")
    post = next(r for r in fake.requests if r.url.path == "/v1/projects/shop/github")
    assert json.loads(fake.bodies[fake.requests.index(post)]) == {
        "repository": "Acme/Shop",
        "branch": "release",
    }
    assert isinstance(c, denv.GithubConnection)
    assert (c.repository, c.branch, c.installation_id) == ("acme/shop", "release", 777)
    client.connect_github("acme/shop", project="shop")
    last = [r for r in fake.requests if r.url.path == "/v1/projects/shop/github"][-1]
    assert json.loads(fake.bodies[fake.requests.index(last)]) == {"repository": "acme/shop"}


def test_deploy_with_placement_labels(client: denv.Client, fake: FakeControlPlane) -> None:
    client.deploy(git_ref="main", wait=False, placement={"region": "eu", "gpu": "false"})
    post = [r for r in fake.requests if r.url.path == "/v1/projects/shop/deploy"][-1]
    assert post.url.params["placement"] == "region=eu,gpu=false"


def test_deployments(client: denv.Client, fake: FakeControlPlane) -> None:
    fake.deployment("deploy", "shop/alpha")
    deps = client.list_deployments()
    assert [d.id for d in deps] == ["d1"]
    assert client.get_deployment("d1").kind == "deploy"
    assert [e.type for e in client.deployment_events("d1")] == ["phase", "log", "done"]


def test_environments(client: denv.Client, fake: FakeControlPlane) -> None:
    assert [e.id for e in client.list_environments()] == ["shop/alpha"]
    env = client.get_environment("shop")  # PROJECT alone is PROJECT/alpha
    assert env.id == "shop/alpha"
    assert env.service_names == ["app", "db"]  # the agent service first
    assert env.agent is not None and env.agent.workdir == "/workspace"


def test_fork_snapshot_verify(client: denv.Client, fake: FakeControlPlane) -> None:
    fork = client.fork("shop/alpha", version=1, name="f1")
    assert fork.id == "shop/f1"
    fork_req = next(r for r in fake.requests if r.url.path.endswith("/fork"))
    assert json.loads(fake.bodies[fake.requests.index(fork_req)]) == {
        "version": "shop@v1",
        "name": "f1",
    }
    version = client.snapshot("shop/f1")
    assert version.id == "shop@v2"
    assert client.verify("shop/f1").reward == 1.0


def test_lifecycle_deployments_wait(client: denv.Client, fake: FakeControlPlane) -> None:
    assert client.rollback("shop/alpha", "shop@v1").status == "succeeded"
    rollback = next(r for r in fake.requests if r.url.path.endswith("/rollback"))
    assert json.loads(fake.bodies[fake.requests.index(rollback)]) == {"version": "shop@v1"}
    assert client.stop("shop/alpha").kind == "stop"
    assert client.start("shop/alpha").kind == "start"
    assert client.destroy("shop/alpha").kind == "destroy"
    assert (last(fake).method, last(fake).url.path) == ("DELETE", "/v1/environments/shop/alpha")


def test_versions(client: denv.Client, fake: FakeControlPlane) -> None:
    assert [v.id for v in client.list_versions()] == ["shop@v1"]
    assert client.get_version("shop@v1").number == 1
    assert client.get_version(1).id == "shop@v1"
    assert client.get_version("v1").id == "shop@v1"
    assert last(fake).url.path == "/v1/versions/shop/1"
    with pytest.raises(denv.InvalidRequestError, match="PROJECT@vN"):
        client.get_version("latest")
    client.delete_version("shop@v1")
    assert (last(fake).method, last(fake).url.path) == ("DELETE", "/v1/versions/shop/1")


def test_sandboxes(client: denv.Client, fake: FakeControlPlane) -> None:
    sb = client.create_sandbox(version="shop@v1", name="s1", ttl_sec=60)
    assert json.loads(fake.bodies[-1]) == {
        "project": "shop",
        "ttl_sec": 60,
        "version": "shop@v1",
        "name": "s1",
    }
    assert sb.sandbox and sb.expires_at
    assert [s.id for s in client.list_sandboxes()] == ["shop/s1"]
    client.destroy_sandbox(sb)
    assert (last(fake).method, last(fake).url.path) == ("DELETE", "/v1/sandboxes/shop/s1")
    with pytest.raises(denv.NotFoundError):
        client.destroy_sandbox("shop/s1")


def test_sandboxes_by_the_count(client: denv.Client, fake: FakeControlPlane) -> None:
    made = client.create_sandboxes(3, version="shop@v1", name="roll", ttl_sec=60)
    assert json.loads(fake.bodies[-1]) == {
        "project": "shop",
        "ttl_sec": 60,
        "count": 3,
        "version": "shop@v1",
        "name": "roll",
    }
    assert [s.id for s in made] == ["shop/roll-1", "shop/roll-2", "shop/roll-3"]
    assert all(s.sandbox for s in made)
    assert made[0].model_extra == {"placement": {"host": "h1", "reason": "fake"}}


def test_pools_are_listed_and_sized(client: denv.Client, fake: FakeControlPlane) -> None:
    pool = client.set_pool(2)
    assert json.loads(fake.bodies[-1]) == {"size": 2}
    assert (pool.project, pool.size, pool.source, pool.ready) == ("shop", 2, "set", 2)
    assert [p.project for p in client.list_pools()] == ["shop"]
    back = client.set_pool(None)
    assert json.loads(fake.bodies[-1]) == {"size": None}
    assert (back.size, back.source) == (0, "off")
    assert client.get_pool().project == "shop"


def test_exec_sends_the_contract(client: denv.Client, fake: FakeControlPlane) -> None:
    fake.on_exec = lambda env, req: exec_response(7, b"\xff\x00", b"err")
    res = client.exec(
        "shop/alpha",
        ["cat"],
        service="app",
        user="1000",
        cwd="/tmp",
        env={"K": "V"},
        stdin="héllo",
        timeout=5,
        output_limit=1024,
    )
    assert res == denv.ExecResult(7, b"\xff\x00", b"err", False, False, 3)
    sent = json.loads(fake.bodies[-1])
    assert sent == {
        "cmd": ["cat"],
        "service": "app",
        "user": "1000",
        "cwd": "/tmp",
        "env": {"K": "V"},
        "stdin": "aMOpbGxv",
        "timeout": 5,
        "output_limit": 1024,
    }
    assert last(fake).url.path == "/v1/environments/shop/alpha/exec"


def test_exec_agent_root(client: denv.Client) -> None:
    with pytest.raises(denv.AgentRootError) as caught:
        client.exec("shop/alpha", ["id"], user="root")
    assert caught.value.message == denv.messages.agent_root("app")
    assert caught.value.status == 403


def test_files(client: denv.Client, fake: FakeControlPlane) -> None:
    client.write_file("shop/alpha", "/workspace/a/b.txt", "hi", mode=0o600)
    put = last(fake)
    assert (put.method, put.url.params["path"]) == ("PUT", "/workspace/a")
    assert fake.files["shop/alpha"]["/workspace/a/b.txt"].mode == 0o600
    assert client.read_file("shop/alpha", "/workspace/a/b.txt") == b"hi"
    assert last(fake).url.params["path"] == "/workspace/a/b.txt"
    with pytest.raises(denv.InvalidRequestError, match="is a directory"):
        client.read_file("shop/alpha", "/workspace/a")
    with pytest.raises(denv.NotFoundError):
        client.read_file("shop/alpha", "/workspace/nope")
    with pytest.raises(denv.InvalidRequestError, match="absolute"):
        client.read_file("shop/alpha", "relative.txt")
    archive = client.get_files("shop/alpha", "/workspace/a", service="app", user="1000")
    assert (last(fake).url.params["service"], last(fake).url.params["user"]) == ("app", "1000")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert tar.getnames() == ["a", "a/b.txt"]
    written = client.put_files("shop/alpha", "/workspace/c", archive)
    assert (written.entries, written.bytes) == (2, 2)


def test_read_file_follows_symlinks(client: denv.Client, fake: FakeControlPlane) -> None:
    from fakecp import Node

    fake.put("shop/alpha", "/workspace/real.txt", b"real")
    fake.files["shop/alpha"]["/workspace/link"] = Node("symlink", target="real.txt")
    assert client.read_file("shop/alpha", "/workspace/link") == b"real"


def test_put_files_refuses_special_files(client: denv.Client) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("pipe")
        info.type = tarfile.FIFOTYPE
        tar.addfile(info)
    with pytest.raises(denv.SpecialFileError) as caught:
        client.put_files("shop/alpha", "/workspace", io.BytesIO(buf.getvalue()))
    assert caught.value.message == denv.messages.special_file(
        "pipe", denv.messages.SPECIAL_FILE_REASONS["fifo"]
    )


def test_probe_and_logs(client: denv.Client, fake: FakeControlPlane) -> None:
    probe = client.probe("shop/alpha")
    assert probe.ok and probe.findings == []
    assert probe.model_extra == {"durationMs": 5}
    logs = client.logs("shop/alpha", service="db", tail=5)
    assert logs.stdout == "hello\n"
    assert last(fake).url.params["tail"] == "5"


def test_environment_references() -> None:
    from denv._base import env_parts, version_parts

    assert env_parts("shop/beta") == ("shop", "beta")
    assert env_parts("shop") == ("shop", "alpha")
    with pytest.raises(denv.InvalidRequestError):
        env_parts("a/b/c")
    assert version_parts("shop@v3", None) == ("shop", 3)
    assert version_parts(3, "shop") == ("shop", 3)
    with pytest.raises(denv.InvalidRequestError, match="names no project"):
        version_parts(3, None)


def test_targets_are_created_listed_shown_and_removed(
    client: denv.Client, fake: FakeControlPlane
) -> None:
    kinds = client.target_kinds()
    assert [(k.kind, k.family, k.available) for k in kinds] == [
        ("hosts", "hosts", True),
        ("hetzner", "provisioned", True),
    ]
    assert kinds[1].credentials == [{"name": "token", "env": "HCLOUD_TOKEN"}]
    made = client.create_target(
        "fleet", "hetzner", settings={"location": "fsn1"}, credentials={"token": "s3cret"}
    )
    assert json.loads(fake.bodies[-1]) == {
        "name": "fleet",
        "kind": "hetzner",
        "settings": {"location": "fsn1"},
        "credentials": {"token": "s3cret"},
    }
    # The secret went up once and never comes back: the target names its credentials only.
    assert (made.name, made.kind, made.credentials) == ("fleet", "hetzner", ["token"])
    assert "s3cret" not in made.model_dump_json()
    assert [t.name for t in client.list_targets()] == ["fleet"]
    assert client.get_target("fleet").settings == {"location": "fsn1"}
    client.delete_target("fleet", force=True)
    assert last(fake).method == "DELETE"
    assert last(fake).url.params["force"] == "true"
    assert client.list_targets() == []
    with pytest.raises(denv.NotFoundError, match="no target fleet"):
        client.get_target("fleet")
