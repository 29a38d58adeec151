"""The credential choke point (credentials.py): allowed-hosts matching, hostile cases first;
`release` under Enforce and Warn; and every caller that hands a Secret value to the network
going through it (resolve, http Guardrails, readiness probes, `ordo run`, the Task store)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from tests.support.engine_fakes import (
    NS,
    DictStore,
    agent,
    endpoint,
    memory,
    obj,
    task,
)

from ordo.api import ModelEndpoint
from ordo.credentials import (
    ALLOWED_HOSTS_ANNOTATION,
    CREDENTIAL_LABEL,
    NOWHERE,
    CredentialRefused,
    Destination,
    Release,
    destination,
    host_allowed,
    parse_allowed_hosts,
    release,
    visible_keys,
)
from ordo.errors import ResolutionError
from ordo.operator.kube.store import KubeStore
from ordo.operator.readiness import verdicts
from ordo.operator.tasks.taskstore import SecretsReadOnce
from ordo.providers import endpoint_destination
from ordo.runtime import fetch
from ordo.runtime.resolve import resolve

CANARY = "sk-canary-creds-41d7"


def secret(
    name: str = "key",
    *,
    labelled: bool = True,
    hosts: str | None = None,
    **values: str,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if labelled:
        meta["labels"] = {CREDENTIAL_LABEL: "true"}
    if hosts is not None:
        meta["annotations"] = {ALLOWED_HOSTS_ANNOTATION: hosts}
    data = {k: base64.b64encode(v.encode()).decode() for k, v in (values or {"k": CANARY}).items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": data}


def allows(hosts: str, url: str) -> bool:
    dest = destination(url)
    return dest is not None and host_allowed(hosts, dest)


# -- destinations: URLs a credential must never follow ---------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com\\@evil.example/",  # parsers disagree on the backslash
        "https://api.example.com @evil.example/",
        "https://a@b@evil.example/",
        "https://api.example.com%2eevil.example/",
        "https:///nohost",
        "not a url",
        "https://api.example.com:99999/",
        "https://exa_mple.com/",
        "https://-bad.example.com/",
    ],
)
def test_a_url_parsers_may_read_differently_has_no_destination(url: str) -> None:
    assert destination(url) is None


def test_userinfo_does_not_fool_the_host() -> None:
    assert destination("https://api.example.com@evil.example/") == Destination("evil.example", 443)
    assert not allows("api.example.com", "https://api.example.com@evil.example/")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://API.Example.COM./v1", Destination("api.example.com", 443)),
        ("http://api.example.com/", Destination("api.example.com", 80)),
        ("redis://cache:6380/0", Destination("cache", 6380)),
        ("postgres://db/x", Destination("db", 5432)),
        ("http://[::1]:8080/", Destination("::1", 8080)),
        ("http://[0:0::1]/", Destination("::1", 80)),
        ("https://bücher.example/", Destination("xn--bcher-kva.example", 443)),
        ("unknown://host/", Destination("host", None)),
    ],
)
def test_destination_is_the_normalised_host_and_effective_port(
    url: str, expected: Destination
) -> None:
    assert destination(url) == expected


# -- allowed-hosts matching ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hosts", "url"),
    [
        ("api.example.com", "https://api.example.com.evil.example/"),
        ("api.example.com", "https://evilapi.example.com/"),
        ("api.example.com", "https://example.com/"),
        ("*.example.com", "https://example.com/"),  # a wildcard needs one more label
        ("*.example.com", "https://a.b.example.com/"),  # exactly one
        ("*.example.com", "https://example.com.evil.example/"),
        ("*.example.com", "https://evil-example.com/"),
        ("*.com", "https://evil.com/"),  # refused entry: allows nothing
        ("*", "https://evil.example/"),
        ("*example.com", "https://evilexample.com/"),
        ("a.*.com", "https://a.b.com/"),
        ("api.example.com:443", "http://api.example.com/"),  # effective port 80
        ("api.example.com:443", "https://api.example.com:8443/"),
        ("api.example.com:0", "https://api.example.com/"),
        ("api.example.com:x", "https://api.example.com/"),
        ("*.0.0.1", "http://127.0.0.1/"),  # a wildcard never matches an address
        ("127.0.0.1", "http://127.0.0.2/"),
        ("[::1]", "http://[::2]/"),
        ("[::1]:80", "http://[::1]:81/"),
        ("", "https://api.example.com/"),  # present but empty: nothing
        (" , ,", "https://api.example.com/"),
        ("xn--bcher-kva.example", "https://bucher.example/"),
        ("api.example.com", "unknown://api.example.com:1/x"),  # still the host that counts
    ],
)
def test_hostile_destinations_are_not_allowed(hosts: str, url: str) -> None:
    if url.startswith("unknown://"):
        assert allows(hosts, url)  # any port: only the host counts here
        assert not allows(hosts + ":443", url)
        return
    assert not allows(hosts, url)


@pytest.mark.parametrize(
    ("hosts", "url"),
    [
        ("api.example.com", "https://api.example.com/v1"),
        ("API.EXAMPLE.COM.", "https://api.example.com/"),  # case, trailing dot
        ("api.example.com", "https://api.example.com.:8443/"),  # no port: every port
        ("other.example, api.example.com", "https://api.example.com/"),
        ("*.example.com", "https://a.example.com/"),
        ("*.Example.COM:443", "https://A.example.com/"),
        ("api.example.com:8443", "https://api.example.com:8443/"),
        ("api.example.com:443", "https://api.example.com/"),
        ("127.0.0.1:9000", "http://127.0.0.1:9000/"),
        ("[::1]:8080", "http://[::1]:8080/"),
        ("[0:0::1]", "http://[::1]/"),
        ("::1", "http://[::1]:7/"),  # a bare IPv6 literal: no port
        ("bücher.example", "https://xn--bcher-kva.example/"),
        ("xn--bcher-kva.example", "https://BÜCHER.example/"),
        ("bad entry!, api.example.com", "https://api.example.com/"),
    ],
)
def test_listed_destinations_are_allowed(hosts: str, url: str) -> None:
    assert allows(hosts, url)


def test_entries_that_do_not_parse_are_reported() -> None:
    patterns, bad = parse_allowed_hosts("api.example.com, *.com, a b, x:99999, [::1]x")
    assert len(patterns) == 1
    assert bad == ["*.com", "a b", "x:99999", "[::1]x"]


# -- the choke point -------------------------------------------------------------------------

HERE = Destination("api.example.com", 443)
ELSEWHERE = Destination("evil.example", 443)


def test_enforce_an_unlabelled_secret_reads_like_a_missing_one() -> None:
    unlabelled = secret(labelled=False, k=CANARY)
    assert release(unlabelled, "key", "k", HERE, "Enforce") == Release(None)
    assert release(None, "key", "k", HERE, "Enforce") == Release(None)
    assert visible_keys(unlabelled, "Enforce") is None  # no key listing either
    assert visible_keys(secret(k=CANARY, other="x"), "Enforce") == ["k", "other"]


def test_enforce_refuses_a_host_the_secret_does_not_list() -> None:
    body = secret(hosts="api.example.com", k=CANARY)
    assert release(body, "key", "k", HERE, "Enforce") == Release(CANARY)
    with pytest.raises(CredentialRefused) as refused:
        release(body, "key", "k", ELSEWHERE, "Enforce")
    assert refused.value.message == (
        "Secret 'key' may not be sent to evil.example:443: its ordo.dev/allowed-hosts "
        "annotation does not list that host"
    )
    assert CANARY not in str(refused.value) and "api.example.com" not in str(refused.value)
    with pytest.raises(CredentialRefused):  # a URL parsers disagree on: no Secret allows it
        release(secret(k=CANARY), "key", "k", None, "Enforce")


def test_without_the_annotation_any_host_and_nowhere_needs_only_the_label() -> None:
    assert release(secret(k=CANARY), "key", "k", ELSEWHERE, "Enforce") == Release(CANARY)
    body = secret(hosts="api.example.com", k=CANARY)
    assert release(body, "key", "k", NOWHERE, "Enforce") == Release(CANARY)
    unlabelled = secret(labelled=False, k=CANARY)
    assert release(unlabelled, "key", "k", NOWHERE, "Enforce") == Release(None)


def test_a_label_value_other_than_true_is_not_an_opt_in() -> None:
    body = secret(k=CANARY)
    body["metadata"]["labels"][CREDENTIAL_LABEL] = "yes"
    assert release(body, "key", "k", HERE, "Enforce") == Release(None)


def test_warn_releases_and_says_what_enforce_would_refuse() -> None:
    unlabelled = secret(labelled=False, k=CANARY)
    got = release(unlabelled, "key", "k", HERE, "Warn")
    assert got.value == CANARY and got.violation == "unlabelled"
    assert got.warning == "Secret 'key' is not labelled ordo.dev/credential=true"
    elsewhere = release(secret(hosts="api.example.com", k=CANARY), "key", "k", ELSEWHERE, "Warn")
    assert (elsewhere.value, elsewhere.violation) == (CANARY, "host")
    assert elsewhere.warning is not None and "evil.example:443" in elsewhere.warning
    assert CANARY not in (got.warning or "") + (elsewhere.warning or "")
    assert release(secret(k=CANARY), "key", "k", HERE, "Warn") == Release(CANARY)
    assert visible_keys(unlabelled, "Warn") == ["k"]


def test_the_endpoint_destination_is_the_providers_default_without_base_url() -> None:
    def dest(**spec: Any) -> Destination | None:
        creds = {"secretRef": {"name": "key", "key": "k"}}
        return endpoint_destination(
            ModelEndpoint.model_validate(endpoint(credentials=creds, **spec))
        )

    assert dest(provider="openai", model="m") == Destination("api.openai.com", 443)
    assert dest(provider="anthropic", model="m") == Destination("api.anthropic.com", 443)
    assert dest(provider="ollama", model="m") == Destination("localhost", 11434)
    assert dest(provider="openai", model="m", baseUrl="http://127.0.0.1:9/v1") == Destination(
        "127.0.0.1", 9
    )
    assert dest(provider="mock") == NOWHERE
    assert dest(provider="azure-openai", model="m", baseUrl="https://r.openai.azure.com") == (
        Destination("r.openai.azure.com", 443)
    )


def test_the_kube_store_hands_out_no_secret_through_get() -> None:
    store = KubeStore(client=None)  # type: ignore[arg-type]  # refused before any request
    with pytest.raises(Exception, match="credential"):
        asyncio.run(store.get("Secret", NS, "key"))


# -- the callers -----------------------------------------------------------------------------


def keyed(**spec: Any) -> dict[str, Any]:
    creds = {"secretRef": {"name": "key", "key": "k"}}
    return endpoint(provider="openai", model="gpt-4o", credentials=creds, **spec)


async def resolution_error(store: DictStore) -> ResolutionError:
    with pytest.raises(ResolutionError) as caught:
        await resolve(task(), store)
    assert CANARY not in caught.value.message
    return caught.value


async def test_resolve_refuses_a_model_key_for_another_host() -> None:
    store = DictStore(agent(), keyed(), secret(hosts="api.example.com"))
    error = await resolution_error(store)
    assert error.reason == "CredentialNotAllowed"
    assert "api.openai.com:443" in error.message and "ModelEndpoint 'model'" in error.message
    allowed = DictStore(agent(), keyed(), secret(hosts="api.openai.com:443"))
    assert (await resolve(task(), allowed)).api_key == CANARY


async def test_resolve_an_unlabelled_secret_is_a_missing_one() -> None:
    missing = await resolution_error(DictStore(agent(), keyed()))
    unlabelled = await resolution_error(DictStore(agent(), keyed(), secret(labelled=False)))
    assert (unlabelled.reason, unlabelled.message) == (missing.reason, missing.message)
    assert missing.reason == "SecretNotFound"
    assert "not labelled ordo.dev/credential=true" in missing.message


async def test_resolve_checks_tool_and_memory_destinations() -> None:
    tool = obj(
        "Tool",
        "fetch",
        {
            "type": "http",
            "http": {"url": "https://evil.example/x", "secretRef": {"name": "key", "key": "k"}},
        },
    )
    store = DictStore(agent(tools=["fetch"]), endpoint(), tool, secret(hosts="api.example.com"))
    error = await resolution_error(store)
    assert (error.reason, "Tool 'fetch'" in error.message) == ("CredentialNotAllowed", True)
    mem = memory(
        provider="redis",
        url="redis://cache.evil.example:6379",
        secretRef={"name": "key", "key": "k"},
    )
    store = DictStore(
        agent(memory={"ref": "mem"}), endpoint(), mem, secret(hosts="cache.example.com")
    )
    error = await resolution_error(store)
    assert (error.reason, "Memory 'mem'" in error.message) == ("CredentialNotAllowed", True)


async def test_resolve_checks_http_guardrail_destinations() -> None:
    guard = obj(
        "Guardrail",
        "pii",
        {
            "type": "http",
            "points": ["input"],
            "http": {
                "url": "https://check.evil.example/",
                "secretRef": {"name": "key", "key": "k"},
            },
        },
    )
    store = DictStore(
        agent(guardrails=["pii"]), endpoint(), guard, secret(hosts="check.example.com")
    )
    error = await resolution_error(store)
    assert (error.reason, "Guardrail 'pii'" in error.message) == ("CredentialNotAllowed", True)


async def test_fetch_lists_keys_only_of_an_opted_in_secret() -> None:
    store = DictStore()
    store.secret_bodies["key"] = secret(labelled=False, other=CANARY)
    with pytest.raises(ResolutionError) as caught:
        await fetch.credential(store, NS, "key", "k", "Tool 't'", HERE)
    assert "its keys" not in caught.value.message
    store.secret_bodies["key"] = secret(other=CANARY)
    with pytest.raises(ResolutionError) as caught:
        await fetch.credential(store, NS, "key", "k", "Tool 't'", HERE)
    assert "(its keys: other)" in caught.value.message


async def test_the_task_store_reports_warn_once_per_read_and_caches_per_destination() -> None:
    inner = DictStore()
    inner.policy = "Warn"
    inner.secret_bodies["key"] = secret(labelled=False)
    reported: list[Release] = []

    async def on_warning(released: Release) -> None:
        reported.append(released)

    store = SecretsReadOnce(inner, on_warning)
    for _ in range(2):
        assert (await store.credential(NS, "key", "k", HERE)).value == CANARY
    assert [r.violation for r in reported] == ["unlabelled"]
    inner.policy = "Enforce"  # a cached release is for its destination only
    assert (await store.credential(NS, "key", "k", ELSEWHERE)).value is None


# -- readiness: a probe never sends a credential the Secret does not allow --------------------


class Counting:
    def __init__(self) -> None:
        self.connections = 0
        self.port = 0

    async def __aenter__(self) -> Counting:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            writer.close()

        self._server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.close()
        await self._server.wait_closed()


def mcp_tool(port: int) -> dict[str, Any]:
    mcp = {"url": f"http://127.0.0.1:{port}/mcp", "secretRef": {"name": "key", "key": "k"}}
    return obj("Tool", "search", {"type": "mcp", "mcp": mcp})


async def test_the_mcp_probe_does_not_connect_with_a_credential_for_another_host() -> None:
    async with Counting() as server:
        tool = mcp_tool(server.port)
        refused = DictStore(tool, secret(hosts="mcp.example.com"))
        verdict = await verdicts.tool_verdict(tool, refused)
        assert (verdict.status, verdict.reason) == ("False", "CredentialNotAllowed")
        assert verdict.message.startswith("Secret 'key' may not be sent to 127.0.0.1:")
        unlabelled = DictStore(tool, secret(labelled=False))
        verdict = await verdicts.tool_verdict(tool, unlabelled)
        assert (verdict.status, verdict.reason) == ("False", "SecretNotFound")
        assert verdict.message == (
            "Secret 'key' not found or is not labelled ordo.dev/credential=true"
        )
        assert server.connections == 0
        warned = DictStore(tool, secret(hosts="mcp.example.com"))
        warned.policy = "Warn"  # migration: the probe runs, the message says why it would not
        verdict = await verdicts.tool_verdict(tool, warned)
        assert server.connections >= 1
        assert "WARNING (enforced by default): Secret 'key' may not be sent" in verdict.message
        assert CANARY not in verdict.message


async def test_endpoint_and_memory_ready_name_the_refused_host() -> None:
    store = DictStore(keyed(), secret(hosts="api.example.com"))
    verdict = await verdicts.endpoint_verdict(keyed(), store)
    assert (verdict.reason, "api.openai.com:443" in verdict.message) == (
        "CredentialNotAllowed",
        True,
    )
    mem = memory(provider="redis", url="redis://127.0.0.1:1", secretRef={"name": "key", "key": "k"})
    verdict = await verdicts.memory_verdict(mem, DictStore(mem, secret(hosts="cache.example.com")))
    assert (verdict.status, verdict.reason) == ("False", "CredentialNotAllowed")
