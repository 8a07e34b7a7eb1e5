"""An in-memory stand-in for the control plane's REST routes, served through httpx.MockTransport.

It keeps just enough state (projects, deployments, environments, a file tree per environment)
for the client and the Inspect adapter to be exercised without a network. Exec is scripted:
a few commands the adapter issues are interpreted, the rest answered by ``on_exec``.
"""

from __future__ import annotations

import base64
import io
import json
import posixpath
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import httpx

WRITE_SCRIPT = 'd=$(dirname -- "$1") && mkdir -p -- "$d" && cat > "$1"'


def error(status: int, code: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}})


def exec_response(
    exit_code: int = 0,
    stdout: bytes = b"",
    stderr: bytes = b"",
    *,
    timed_out: bool = False,
    truncated: bool = False,
) -> dict[str, Any]:
    try:
        out, err = stdout.decode("utf-8"), stderr.decode("utf-8")
        encoding = "utf8"
    except UnicodeDecodeError:
        out = base64.b64encode(stdout).decode()
        err = base64.b64encode(stderr).decode()
        encoding = "base64"
    return {
        "exit_code": exit_code,
        "stdout": out,
        "stderr": err,
        "encoding": encoding,
        "timed_out": timed_out,
        "truncated": truncated,
        "duration_ms": 3,
    }


@dataclass
class Node:
    kind: str  # "file" | "dir" | "symlink"
    data: bytes = b""
    mode: int = 0o644
    target: str = ""


# GET /v1/targets/kinds as the control plane answers it, for two kinds.
FAKE_KINDS: list[dict[str, Any]] = [
    {
        "kind": "hosts",
        "family": "hosts",
        "available": True,
        "capabilities": {"multi_service": True, "snapshot": True, "fork": True},
        "settings": [],
        "credentials": [],
    },
    {
        "kind": "hetzner",
        "family": "provisioned",
        "available": True,
        "capabilities": {"multi_service": True, "snapshot": True, "fork": True},
        "settings": ["location", "server_type"],
        "credentials": [{"name": "token", "env": "HCLOUD_TOKEN"}],
    },
]


@dataclass
class FakeControlPlane:
    """The fake. ``requests`` records every request; ``on_exec`` answers exec requests."""

    token: str = "t0k"
    projects: dict[str, dict[str, Any]] = field(default_factory=dict)
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)
    deployments: list[dict[str, Any]] = field(default_factory=list)
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, dict[str, Node]] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    on_exec: Callable[[str, dict[str, Any]], dict[str, Any] | httpx.Response] | None = None
    unreadable: set[str] = field(default_factory=set)
    next_fork: int = 0
    pools: dict[str, int] = field(default_factory=dict)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The file tree a snapshot froze, by version: a sandbox of that version starts from it.
    version_files: dict[str, dict[str, Node]] = field(default_factory=dict)

    # -------------------------------------------------------------- setup helpers

    def add_project(self, name: str = "quickstart", compose_path: str = "compose.yaml") -> None:
        self.projects[name] = {
            "name": name,
            "kind": "rl-environment",
            "compose_path": compose_path,
            "created_at": "2026-01-01T00:00:00Z",
        }

    def add_environment(
        self, env_id: str, version: str | None = None, *, sandbox: bool = False
    ) -> dict[str, Any]:
        project, name = env_id.split("/")
        env = {
            "id": env_id,
            "project": project,
            "name": name,
            "status": "running",
            "host_id": "h1",
            "version": version,
            "parent_version": version,
            "sandbox": sandbox,
            "services": [
                {"name": "db", "container_id": "c1", "image": "db", "image_id": "sha256:1"},
                {"name": "app", "container_id": "c2", "image": "app", "image_id": "sha256:2"},
            ],
            "agent": {"service": "app", "user": "1000", "workdir": "/workspace"},
            "created_at": "2026-01-01T00:00:00Z",
        }
        self.environments[env_id] = env
        self.files[env_id] = {
            "/": Node("dir", mode=0o755),
            "/workspace": Node("dir", mode=0o755),
            "/etc": Node("dir", mode=0o755),
        }
        return env

    def add_version(self, project: str, number: int) -> str:
        vid = f"{project}@v{number}"
        self.versions[vid] = {
            "id": vid,
            "project": project,
            "number": number,
            "host_id": "h1",
            "source_environment": f"{project}/alpha",
            "digests": {},
            "volumes": {},
            "method": "btrfs",
            "sizes": {"layer_bytes": 0, "volume_bytes": 0},
            "timings": {},
            "created_at": "2026-01-01T00:00:00Z",
        }
        return vid

    def deployment(
        self,
        kind: str,
        env_id: str,
        *,
        result: Any = None,
        status: str = "succeeded",
        error: dict[str, str] | None = None,
        evidence: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        dep = {
            "id": f"d{len(self.deployments) + 1}",
            "kind": kind,
            "project": env_id.split("/")[0],
            "environment": env_id,
            "status": status,
            "phases": [{"name": "resolve source", "status": "succeeded", "evidence": evidence}],
            "result": result,
            "error": error,
            "created_at": "2026-01-01T00:00:00Z",
        }
        self.deployments.insert(0, dep)
        return dep

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def async_transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    # -------------------------------------------------------------- file tree

    def put(self, env_id: str, path: str, data: bytes, mode: int = 0o644) -> None:
        tree = self.files[env_id]
        parent = posixpath.dirname(path)
        while parent not in tree:
            tree[parent] = Node("dir", mode=0o755)
            parent = posixpath.dirname(parent)
        tree[path] = Node("file", data, mode)

    def tar_of(self, env_id: str, path: str) -> bytes:
        tree = self.files[env_id]
        buf = io.BytesIO()
        base = posixpath.dirname(path)
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for p in sorted(k for k in tree if k == path or k.startswith(path.rstrip("/") + "/")):
                node = tree[p]
                info = tarfile.TarInfo(posixpath.relpath(p, base))
                info.mode = node.mode
                if node.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif node.kind == "symlink":
                    info.type = tarfile.SYMTYPE
                    info.linkname = node.target
                    tar.addfile(info)
                else:
                    info.size = len(node.data)
                    tar.addfile(info, io.BytesIO(node.data))
        return buf.getvalue()

    # -------------------------------------------------------------- routing

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        body = request.read()
        self.bodies.append(body)
        path = request.url.path
        if path == "/healthz":
            return httpx.Response(200, json={"ok": True})
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return error(401, "unauthorized", "missing or unknown token")
        parts = [unquote(p) for p in path.split("/") if p]
        try:
            return self.route(request.method, parts, request, body)
        except KeyError as exc:
            return error(404, "not_found", f"no {exc.args[0]}")

    def route(
        self, method: str, parts: list[str], request: httpx.Request, body: bytes
    ) -> httpx.Response:
        params = request.url.params
        match (method, parts):
            case ("GET", ["v1", "whoami"]):
                return httpx.Response(200, json={"id": "t1", "name": "ci", "role": "admin"})
            case ("GET", ["v1", "projects"]):
                return httpx.Response(200, json={"projects": list(self.projects.values())})
            case ("POST", ["v1", "projects"]):
                data = json.loads(body)
                if data["name"] in self.projects:
                    return error(409, "conflict", f"project {data['name']} exists")
                self.add_project(data["name"], data.get("compose_path", "compose.yaml"))
                self.projects[data["name"]]["kind"] = data.get("kind", "rl-environment")
                return httpx.Response(201, json=self.projects[data["name"]])
            case ("GET", ["v1", "projects", p]):
                return httpx.Response(200, json=self.projects[p])
            case ("DELETE", ["v1", "projects", p]):
                del self.projects[p]
                return httpx.Response(204)
            case ("POST", ["v1", "projects", p, "github"]):
                self.projects[p]
                data = json.loads(body)
                connection = {
                    "project": p,
                    "repository": data["repository"].lower(),
                    "branch": data.get("branch", "main"),
                    "installation_id": 777,
                    "clone_url": f"https://github.com/{data['repository'].lower()}.git",
                    "created_at": "2026-01-01T00:00:00Z",
                }
                return httpx.Response(200, json=connection)
            case ("POST", ["v1", "projects", p, "deploy"]):
                self.projects[p]
                env_id = f"{p}/{params.get('environment', 'alpha')}"
                number = 1 + sum(1 for v in self.versions.values() if v["project"] == p)
                vid = self.add_version(p, number)
                env = self.environments.get(env_id) or self.add_environment(env_id)
                env["version"] = vid
                evidence = {"source_sha256": request.headers.get("x-denv-source-sha256")}
                dep = self.deployment(
                    "deploy", env_id, result=env, status="running", evidence=evidence
                )
                return httpx.Response(202, json=dep)
            case ("GET", ["v1", "projects", p, "deployments"]):
                deps = [d for d in self.deployments if d["project"] == p]
                return httpx.Response(200, json={"deployments": deps})
            case ("GET", ["v1", "projects", p, "environments"]):
                envs = [e for e in self.environments.values() if e["project"] == p]
                return httpx.Response(200, json={"environments": envs})
            case ("GET", ["v1", "projects", p, "versions"]):
                vs = [v for v in self.versions.values() if v["project"] == p]
                return httpx.Response(200, json={"versions": vs})
            case ("GET", ["v1", "deployments", d]):
                return httpx.Response(200, json=self.finish(d))
            case ("GET", ["v1", "deployments", d, "log"]):
                dep = self.finish(d)
                text = "".join(f"event: phase\ndata: {json.dumps(ph)}\n\n" for ph in dep["phases"])
                text += f"event: log\ndata: {json.dumps({'line': 'built'})}\n\n"
                text += f"event: done\ndata: {json.dumps(dep)}\n\n"
                return httpx.Response(
                    200, content=text.encode(), headers={"content-type": "text/event-stream"}
                )
            case ("GET", ["v1", "versions", p, n]):
                return httpx.Response(200, json=self.versions[f"{p}@v{n}"])
            case ("DELETE", ["v1", "versions", p, n]):
                del self.versions[f"{p}@v{n}"]
                return httpx.Response(204)
            case ("POST", ["v1", "sandboxes"]):
                data = json.loads(body)
                self.projects[data["project"]]
                version = (
                    data.get("version") or self.environments[f"{data['project']}/alpha"]["version"]
                )
                self.versions[version]
                count = data.get("count")
                made = []
                for i in range(count or 1):
                    name = data.get("name") or f"fork-{self.next_fork}"
                    if count is not None and data.get("name"):
                        name = f"{name}-{i + 1}"
                    self.next_fork += 1
                    env = self.add_environment(f"{data['project']}/{name}", version, sandbox=True)
                    env["expires_at"] = "2026-01-01T01:00:00Z"
                    if version in self.version_files:
                        self.files[env["id"]] = dict(self.version_files[version])
                    made.append(env)
                if count is None:
                    return httpx.Response(201, json=made[0])
                placed = [{**e, "placement": {"host": "h1", "reason": "fake"}} for e in made]
                return httpx.Response(201, json={"sandboxes": placed})
            case ("GET", ["v1", "sandboxes"]):
                sbs = [e for e in self.environments.values() if e["sandbox"]]
                return httpx.Response(200, json={"sandboxes": sbs})
            case ("DELETE", ["v1", "sandboxes", p, e]):
                del self.environments[f"{p}/{e}"]
                return httpx.Response(204)
            case ("GET", ["v1", "pools"]):
                pools = [self.pool(p) for p in sorted(self.pools)]
                return httpx.Response(200, json={"pools": pools})
            case ("GET", ["v1", "projects", p, "pool"]):
                return httpx.Response(200, json=self.pool(p))
            case ("PUT", ["v1", "projects", p, "pool"]):
                size = json.loads(body)["size"]
                if size is None:
                    self.pools.pop(p, None)
                else:
                    self.pools[p] = size
                return httpx.Response(200, json=self.pool(p))
            case ("GET", ["v1", "targets", "kinds"]):
                kinds = [{**k, "capabilities": dict(k["capabilities"])} for k in FAKE_KINDS]
                return httpx.Response(200, json={"kinds": kinds})
            case ("GET", ["v1", "targets"]):
                return httpx.Response(200, json={"targets": list(self.targets.values())})
            case ("POST", ["v1", "targets"]):
                req = json.loads(body)
                if req["name"] in self.targets:
                    return error(409, "conflict", f"target {req['name']} exists")
                target = {
                    "name": req["name"],
                    "kind": req["kind"],
                    "capabilities": dict(FAKE_KINDS[0]["capabilities"]),
                    "settings": req.get("settings", {}),
                    "credentials": sorted(req.get("credentials", {})),
                    "created_at": "2026-01-01T00:00:00Z",
                }
                self.targets[req["name"]] = target
                return httpx.Response(201, json=target)
            case ("GET", ["v1", "targets", t]):
                if t not in self.targets:
                    return error(404, "not_found", f"no target {t}")
                return httpx.Response(200, json=self.targets[t])
            case ("DELETE", ["v1", "targets", t]):
                if self.targets.pop(t, None) is None:
                    return error(404, "not_found", f"no target {t}")
                return httpx.Response(204)
            case (_, ["v1", "environments", p, e, *rest]):
                return self.environment_route(method, f"{p}/{e}", rest, request, body)
        return error(404, "not_found", f"no route {method} {'/'.join(parts)}")

    def pool(self, project: str) -> dict[str, Any]:
        size = self.pools.get(project)
        return {
            "project": project,
            "version": f"{project}@v1",
            "size": size or 0,
            "source": "off" if size is None else "set",
            "ready": size or 0,
            "filling": 0,
        }

    def finish(self, dep_id: str) -> dict[str, Any]:
        dep = next((d for d in self.deployments if d["id"] == dep_id), None)
        if dep is None:
            raise KeyError(f"deployment {dep_id}")
        if dep["status"] == "running":
            dep["status"] = "succeeded"
        return dep

    def environment_route(
        self, method: str, env_id: str, rest: list[str], request: httpx.Request, body: bytes
    ) -> httpx.Response:
        env = self.environments.get(env_id)
        if env is None:
            return error(404, "not_found", f"no environment {env_id}")
        params = request.url.params
        match (method, rest):
            case ("GET", []):
                return httpx.Response(200, json=env)
            case ("DELETE", []):
                del self.environments[env_id]
                return httpx.Response(202, json=self.deployment("destroy", env_id))
            case ("POST", ["fork"]):
                data = json.loads(body or b"{}")
                name = data.get("name") or f"fork-{self.next_fork}"
                self.next_fork += 1
                fork_id = f"{env['project']}/{name}"
                fork = self.add_environment(fork_id, data.get("version") or env["version"])
                return httpx.Response(202, json=self.deployment("fork", fork_id, result=fork))
            case ("POST", ["snapshot"]):
                number = 1 + sum(
                    1 for v in self.versions.values() if v["project"] == env["project"]
                )
                vid = self.add_version(env["project"], number)
                self.version_files[vid] = dict(self.files[env_id])
                dep = self.deployment("snapshot", env_id, result=self.versions[vid])
                return httpx.Response(202, json=dep)
            case ("POST", ["rollback" | "stop" | "start" as kind]):
                return httpx.Response(202, json=self.deployment(kind, env_id, status="running"))
            case ("POST", ["verify"]):
                result = {
                    "status": "graded",
                    "reward": 1.0,
                    "rewards": {"reward": 1.0},
                    "log": "ok",
                    "version": "quickstart@v9",
                    "fork": "quickstart/v",
                    "evidence": {},
                }
                return httpx.Response(202, json=self.deployment("verify", env_id, result=result))
            case ("GET", ["probe"]):
                return httpx.Response(200, json={"ok": True, "findings": [], "durationMs": 5})
            case ("GET", ["logs"]):
                return httpx.Response(200, json={"stdout": "hello\n", "stderr": ""})
            case ("POST", ["exec"]):
                return self.exec(env_id, json.loads(body))
            case ("PUT", ["files"]):
                return self.put_files(env_id, params["path"], body)
            case ("GET", ["files"]):
                path = posixpath.normpath(params["path"])
                if path in self.unreadable:
                    return error(403, "forbidden", f"{path}: permission denied")
                if path not in self.files[env_id]:
                    return error(404, "not_found", f"{path}: no such file or directory")
                return httpx.Response(200, content=self.tar_of(env_id, path))
        return error(404, "not_found", f"no route {method} {env_id} {rest}")

    def put_files(self, env_id: str, dest: str, body: bytes) -> httpx.Response:
        entries = 0
        total = 0
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            for m in tar.getmembers():
                if m.isfifo():
                    msg = (
                        f"refused: '{m.name}' is a FIFO; special files are refused in "
                        "uploads and submissions (protection 3)"
                    )
                    return error(422, "special_file", msg)
                entries += 1
                path = posixpath.normpath(posixpath.join(dest, m.name))
                if m.isdir():
                    self.files[env_id][path] = Node("dir", mode=m.mode)
                else:
                    f = tar.extractfile(m)
                    data = f.read() if f else b""
                    total += len(data)
                    self.put(env_id, path, data, m.mode)
        return httpx.Response(200, json={"entries": entries, "bytes": total})

    def exec(self, env_id: str, req: dict[str, Any]) -> httpx.Response:
        tree = self.files[env_id]
        cmd = req.get("cmd") or ["sh", "-c", req.get("shell", "")]
        stdin = base64.b64decode(req["stdin"]) if "stdin" in req else b""
        if req.get("user") in ("root", "0"):
            service = req.get("service", "app")
            if service == "app":
                msg = (
                    f"refused: exec as root in agent service '{service}' of an "
                    "rl-environment; the agent is never root (protection 1)"
                )
                return error(403, "agent_root", msg)
        if cmd[:3] == ["/bin/sh", "-c", WRITE_SCRIPT]:
            path = cmd[4]
            node = tree.get(path)
            if node is not None and node.kind == "dir":
                return httpx.Response(
                    200,
                    json=exec_response(
                        2, stderr=f"sh: 1: cannot create {path}: Is a directory\n".encode()
                    ),
                )
            if path in self.unreadable:
                return httpx.Response(
                    200,
                    json=exec_response(
                        2, stderr=f"sh: 1: cannot create {path}: Permission denied\n".encode()
                    ),
                )
            self.put(env_id, path, stdin)
            return httpx.Response(200, json=exec_response(0))
        if cmd[:2] == ["test", "-d"]:
            node = tree.get(cmd[2])
            return httpx.Response(200, json=exec_response(0 if node and node.kind == "dir" else 1))
        if cmd == ["sh", "-c", "pwd"]:
            return httpx.Response(200, json=exec_response(0, b"/srv\n"))
        if self.on_exec is not None:
            answer = self.on_exec(env_id, req)
            if isinstance(answer, httpx.Response):
                return answer
            return httpx.Response(200, json=answer)
        return httpx.Response(200, json=exec_response(0, stdin))
