import json

import httpx
import pytest

import denv
from denv._sse import SSEDecoder, SSEMessage, deployment_event


def feed(text: str) -> list[SSEMessage]:
    dec = SSEDecoder()
    out = [m for line in text.split("\n") if (m := dec.feed(line)) is not None]
    if (m := dec.flush()) is not None:
        out.append(m)
    return out


def test_events_data_lines_and_comments() -> None:
    msgs = feed(
        ": keep-alive\n"
        'event: phase\ndata: {"a":\ndata: 1}\nid: 7\n\n'
        "data:no space\n\n"
        "event: done\ndata: {}"  # unterminated at the end of the stream
    )
    assert msgs == [
        SSEMessage("phase", '{"a":\n1}', "7"),
        SSEMessage("message", "no space", "7"),
        SSEMessage("done", "{}", "7"),
    ]


def test_blank_lines_alone_dispatch_nothing() -> None:
    assert feed("\n\n\n") == []


def dep(status: str = "succeeded", **extra: object) -> dict[str, object]:
    return {
        "id": "d1",
        "kind": "deploy",
        "project": "p",
        "environment": "p/alpha",
        "status": status,
        "phases": [],
        "created_at": "",
        **extra,
    }


def test_deployment_events() -> None:
    phase = deployment_event(
        SSEMessage("phase", json.dumps({"name": "build", "status": "running"}))
    )
    assert phase is not None and phase.phase is not None and phase.phase.name == "build"
    log = deployment_event(SSEMessage("log", json.dumps({"line": "step 1/4"})))
    assert log is not None and log.line == "step 1/4"
    done = deployment_event(SSEMessage("done", json.dumps(dep())))
    assert done is not None and done.deployment is not None and done.deployment.finished
    assert deployment_event(SSEMessage("heartbeat", "")) is None
    with pytest.raises(denv.InvalidRequestError):
        deployment_event(SSEMessage("phase", "not json"))


def sse_transport(streams: list[str], final: dict[str, object]) -> httpx.MockTransport:
    calls = {"log": 0}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/log"):
            text = streams[min(calls["log"], len(streams) - 1)]
            calls["log"] += 1
            return httpx.Response(
                200, content=text.encode(), headers={"content-type": "text/event-stream"}
            )
        return httpx.Response(200, json=final)

    return httpx.MockTransport(handle)


def test_wait_follows_the_stream_to_done() -> None:
    stream = (
        f"event: phase\ndata: {json.dumps({'name': 'build', 'status': 'succeeded'})}\n\n"
        f"event: log\ndata: {json.dumps({'line': 'hello'})}\n\n"
        f"event: done\ndata: {json.dumps(dep())}\n\n"
    )
    seen: list[str] = []
    with denv.Client("http://cp", "t", transport=sse_transport([stream], dep("running"))) as c:
        final = c.wait_deployment("d1", on_event=lambda e: seen.append(e.type))
    assert final.status == "succeeded"
    assert seen == ["phase", "log", "done"]


def test_wait_raises_the_deployments_error() -> None:
    failed = dep("failed", error={"code": "egress_leak", "message": "refused: way out"})
    stream = f"event: done\ndata: {json.dumps(failed)}\n\n"
    with denv.Client("http://cp", "t", transport=sse_transport([stream], failed)) as c:
        with pytest.raises(denv.EgressLeakError, match="way out") as caught:
            c.wait_deployment("d1")
        assert caught.value.deployment is not None
        assert caught.value.deployment.id == "d1"
        assert c.wait_deployment("d1", check=False).status == "failed"


def test_wait_reopens_a_stream_that_ended_early() -> None:
    cut = f"event: phase\ndata: {json.dumps({'name': 'build', 'status': 'running'})}\n\n"
    done = f"event: done\ndata: {json.dumps(dep())}\n\n"
    with denv.Client("http://cp", "t", transport=sse_transport([cut, done], dep("running"))) as c:
        assert c.wait_deployment("d1").status == "succeeded"


def test_wait_fetches_the_deployment_when_the_stream_has_no_done() -> None:
    with denv.Client("http://cp", "t", transport=sse_transport([""], dep())) as c:
        assert c.wait_deployment("d1").status == "succeeded"


async def test_async_wait_follows_the_stream() -> None:
    stream = f"event: done\ndata: {json.dumps(dep())}\n\n"
    seen: list[str] = []

    async def record(event: denv.DeploymentEvent) -> None:
        seen.append(event.type)

    async with denv.AsyncClient("http://cp", "t", transport=sse_transport([stream], dep())) as c:
        final = await c.wait_deployment("d1", on_event=record)
    assert final.status == "succeeded"
    assert seen == ["done"]
