"""The http tool over real HTTP: methods, auth header, response cap, errors, the SSRF guard."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tests.support.http_tool_server import HttpToolServer
from tests.support.wire import resolved

from ordo.engine.tooling import ToolExecutor, ToolFailure
from ordo.tools import build_executor, netguard, session
from ordo.tools.http import MAX_RESPONSE_BYTES, TRUNCATED_NOTE, query_params


def executor(url: str, secret: str | None = None, **http: Any) -> ToolExecutor:
    timeout = http.pop("timeout", "5s")
    return build_executor(
        resolved(
            "probe", {"type": "http", "http": {"url": url, **http}, "timeout": timeout}, secret
        )
    )


async def test_post_sends_the_arguments_as_json_with_the_auth_header(
    http_tool_server: HttpToolServer,
) -> None:
    call = executor(
        http_tool_server.url + "/echo",
        secret="tool-secret",
        headers={"X-Team": "search"},
    )
    out = await call({"q": "ordo", "n": 3, "nested": {"a": [1, 2]}})
    assert not out.is_error
    assert json.loads(out.content)["json"] == {"q": "ordo", "n": 3, "nested": {"a": [1, 2]}}
    request = http_tool_server.requests[0]
    assert request["method"] == "POST"
    assert request["headers"]["authorization"] == "Bearer tool-secret"
    assert request["headers"]["x-team"] == "search"
    assert request["headers"]["content-type"] == "application/json"


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_get_and_delete_send_query_parameters(
    http_tool_server: HttpToolServer, method: str
) -> None:
    call = executor(http_tool_server.url + "/echo", method=method)
    out = await call({"q": "a b", "tags": ["x", "y"], "on": True, "obj": {"k": 1}, "none": None})
    echoed = json.loads(out.content)
    assert echoed["method"] == method and echoed["json"] is None
    assert echoed["query"] == {
        "q": ["a b"],
        "tags": ["x", "y"],
        "on": ["true"],
        "obj": ['{"k":1}'],
    }


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_put_and_patch_send_json(http_tool_server: HttpToolServer, method: str) -> None:
    out = await executor(http_tool_server.url + "/echo", method=method)({"a": 1})
    echoed = json.loads(out.content)
    assert (echoed["method"], echoed["json"], echoed["query"]) == (method, {"a": 1}, {})


async def test_custom_auth_header_and_empty_scheme(http_tool_server: HttpToolServer) -> None:
    call = executor(
        http_tool_server.url + "/echo", secret="k-123", authHeader="X-Api-Key", authScheme=""
    )
    await call({})
    headers = http_tool_server.requests[0]["headers"]
    assert headers["x-api-key"] == "k-123" and "authorization" not in headers


async def test_response_is_capped_at_64_kib(http_tool_server: HttpToolServer) -> None:
    out = await executor(http_tool_server.url + "/big?size=300000")({})
    assert out.content.endswith(TRUNCATED_NOTE)
    assert len(out.content) == MAX_RESPONSE_BYTES + len(TRUNCATED_NOTE)


async def test_cap_does_not_split_a_character(http_tool_server: HttpToolServer) -> None:
    out = await executor(http_tool_server.url + "/big?size=200000&char=%E2%82%AC")({})  # "€"
    body = out.content.removesuffix(TRUNCATED_NOTE)
    assert set(body) == {"€"} and len(body.encode()) <= MAX_RESPONSE_BYTES


async def test_small_response_is_not_marked(http_tool_server: HttpToolServer) -> None:
    out = await executor(http_tool_server.url + "/big?size=1000")({})
    assert out.content == "x" * 1000


@pytest.mark.parametrize("status", [400, 401, 404, 500, 503])
async def test_non_2xx_is_a_tool_failure_with_the_status_only(
    http_tool_server: HttpToolServer, status: int
) -> None:
    with pytest.raises(ToolFailure) as caught:
        await executor(http_tool_server.url + f"/status/{status}")({})
    assert str(caught.value) == f"the tool endpoint answered HTTP {status}"


async def test_redirects_are_not_followed(http_tool_server: HttpToolServer) -> None:
    with pytest.raises(ToolFailure, match="HTTP 302"):
        await executor(http_tool_server.url + "/redirect")({})
    assert http_tool_server.count == 1


async def test_timeout_is_a_tool_failure(http_tool_server: HttpToolServer) -> None:
    with pytest.raises(ToolFailure, match=r"did not answer within 0\.2s"):
        await executor(http_tool_server.url + "/slow?seconds=3", timeout="200ms")({})


async def test_connection_refused_is_a_tool_failure() -> None:
    with pytest.raises(ToolFailure, match="ConnectError"):
        await executor("http://127.0.0.1:1/nothing")({})


async def test_host_name_is_kept_while_connecting_to_the_checked_address(
    http_tool_server: HttpToolServer,
) -> None:
    out = await executor(f"http://localhost:{http_tool_server.port}/echo")({})
    assert json.loads(out.content)["host"] == f"localhost:{http_tool_server.port}"


async def test_unresolvable_host_is_a_tool_failure() -> None:
    with pytest.raises(ToolFailure, match="did not resolve"):
        await executor("http://no-such-host.invalid/x")({})


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.10.1:8080/",
        "http://[fe80::1]/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://100.100.100.200/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://METADATA.google.internal./computeMetadata/v1/",
    ],
)
async def test_link_local_and_metadata_destinations_are_refused(url: str) -> None:
    with pytest.raises(ToolFailure, match="refused: the destination"):
        await executor(url)({})


async def test_a_name_resolving_to_a_metadata_address_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ordo's own resolver stands in for DNS here (no DNS server in the test environment);
    # every address is checked, so one bad address among good ones refuses the call.
    import ipaddress

    async def fake_resolve(host: str, port: int) -> tuple[Any, ...]:
        return (ipaddress.ip_address("10.0.0.5"), ipaddress.ip_address("169.254.169.254"))

    monkeypatch.setattr(netguard, "resolve", fake_resolve)
    with pytest.raises(ToolFailure, match="cloud metadata address"):
        await executor("http://tools.example.internal/search")({})


async def test_every_checked_address_is_tried_in_order(
    http_tool_server: HttpToolServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name with two addresses, the first refusing connections (nothing listens on
    # 127.0.0.2): the call reaches the second, with the original Host header.
    import ipaddress

    async def two_addresses(host: str, port: int) -> tuple[Any, ...]:
        return (ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1"))

    monkeypatch.setattr(netguard, "resolve", two_addresses)
    out = await executor(f"http://dual.example:{http_tool_server.port}/echo")({"q": 1})
    assert json.loads(out.content)["host"] == f"dual.example:{http_tool_server.port}"
    assert http_tool_server.count == 1


async def test_allow_private_network_lets_link_local_through() -> None:
    # Allowed: the guard does not refuse, the (unreachable) address just does not answer.
    with pytest.raises(ToolFailure) as caught:
        await executor("http://169.254.0.1:9/", allowPrivateNetwork=True, timeout="200ms")({})
    assert "refused" not in str(caught.value)


async def test_loopback_and_private_addresses_are_allowed() -> None:
    for address in ("127.0.0.1", "::1", "10.1.2.3", "192.168.0.1", "172.16.0.1", "fd12::1"):
        assert netguard.address_problem(netguard.ipaddress.ip_address(address)) is None


def test_query_params_encoding() -> None:
    assert query_params({"a": 1, "b": 1.5, "c": False, "d": [1, "x"], "e": None}) == [
        ("a", "1"),
        ("b", "1.5"),
        ("c", "false"),
        ("d", "1"),
        ("d", "x"),
    ]


# Hostile cases of the transport (one shared aiohttp session per event loop).


async def test_a_body_dripping_in_past_the_timeout_is_a_timeout(
    http_tool_server: HttpToolServer,
) -> None:
    # Headers at once, then a byte every 50 ms for 3 s: each read is quick, the whole answer
    # is not. The Tool's timeout bounds the whole request.
    with pytest.raises(ToolFailure, match=r"did not answer within 0\.3s"):
        await executor(http_tool_server.url + "/drip?seconds=3", timeout="300ms")({})


async def test_an_endless_body_is_cut_at_the_cap_and_not_read_further(
    http_tool_server: HttpToolServer,
) -> None:
    out = await executor(http_tool_server.url + "/endless")({})
    assert out.content == "y" * MAX_RESPONSE_BYTES + TRUNCATED_NOTE
    # The connection is closed (by the loop: waited for off it).
    assert await asyncio.to_thread(http_tool_server.endless_done.wait, 30)


async def test_a_redirect_to_a_metadata_address_is_not_followed(
    http_tool_server: HttpToolServer,
) -> None:
    call = executor(http_tool_server.url + "/redirect?to=http://169.254.169.254/latest/")
    with pytest.raises(ToolFailure, match="HTTP 302"):
        await call({})
    assert http_tool_server.count == 1


async def test_cookies_never_travel_from_one_call_to_the_next(
    http_tool_server: HttpToolServer,
) -> None:
    await executor(http_tool_server.url + "/set-cookie")({})
    await executor(http_tool_server.url + "/echo")({})
    assert "cookie" not in http_tool_server.requests[1]["headers"]


async def test_a_keep_alive_connection_the_server_closed_is_not_reused(
    http_tool_server: HttpToolServer,
) -> None:
    # The first call leaves its connection in the pool; the server closes it while idle. The
    # next POST (never retried: it may not be idempotent) must go over a new connection.
    call = executor(http_tool_server.url + "/then-close")
    assert (await call({"n": 1})).content == "ok"
    await asyncio.sleep(0.5)
    assert (await call({"n": 2})).content == "ok"
    assert http_tool_server.count == 2


async def test_concurrent_calls_share_the_loop_session_and_it_closes_when_idle(
    http_tool_server: HttpToolServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "IDLE_SECONDS", 0.2)
    call = executor(http_tool_server.url + "/echo")
    outs = await asyncio.gather(*(call({"n": n}) for n in range(5)))
    assert [json.loads(o.content)["json"] for o in outs] == [{"n": n} for n in range(5)]
    shared = session._SESSIONS[asyncio.get_running_loop()]
    assert shared.users == 0 and not shared.session.closed
    await asyncio.sleep(0.5)
    assert shared.session.closed
    assert asyncio.get_running_loop() not in session._SESSIONS
