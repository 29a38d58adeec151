"""The `Ready` verdict of a Guardrail (the readiness reconciler, reconciler.py, evaluates it):

- pattern: every pattern compiles with RE2 (the API model already refuses one that does not,
  so an object that slipped past admission is `InvalidSpec`);
- http: the URL names a host that the SSRF guard allows (`DestinationRefused`,
  `Unreachable` when it does not resolve), and its credential is usable for that host
  (verdicts.credential: `SecretNotFound`, `CredentialNotAllowed`);
- model: the judge's ModelEndpoint exists (`ModelEndpointNotFound`) with a usable credential.

Nothing is sent to a check service or a judge: a probe must not spend tokens or leak text.
Messages name objects, keys and host:port, never a URL path, a Secret value or a pattern.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ...api.guardrail import Guardrail, HttpGuardrail
from ...api.modelendpoint import ModelEndpoint
from ...credentials import destination
from ...providers import endpoint_destination
from ...runtime.store import ObjectStore
from ...tools import netguard
from .verdicts import DEFAULT_PORTS, Credential, Verdict, credential


async def _http_verdict(guardrail: Guardrail, store: ObjectStore) -> Verdict:
    spec = guardrail.spec.http
    assert spec is not None
    checked = Credential()
    if spec.secret_ref is not None:
        where = destination(spec.url)
        checked = await credential(store, guardrail.namespace, spec.secret_ref, where)
        if checked.problem:
            return checked.problem
    return checked.noted(await _http_probe(spec))


async def _http_probe(spec: HttpGuardrail) -> Verdict:
    try:
        parts = urlsplit(spec.url)
        host, port = parts.hostname, parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        host, port = None, None
    if not host or port is None:
        return Verdict("False", "InvalidSpec", "spec.http.url names no host")
    try:
        await netguard.check(host, port, allow_private_network=spec.allow_private_network)
    except netguard.BlockedDestination as exc:
        return Verdict("False", "DestinationRefused", str(exc))
    except OSError:
        return Verdict("False", "Unreachable", f"host name {host!r} did not resolve")
    return Verdict("True", "Configured", f"http check service at {host}:{port}")


async def _model_verdict(guardrail: Guardrail, store: ObjectStore) -> Verdict:
    spec = guardrail.spec.model
    assert spec is not None
    body = await store.get("ModelEndpoint", guardrail.namespace, spec.model_ref)
    if body is None:
        return Verdict(
            "False", "ModelEndpointNotFound", f"ModelEndpoint {spec.model_ref!r} not found"
        )
    endpoint = ModelEndpoint.model_validate(body)
    creds = endpoint.spec.credentials
    checked = Credential()
    if creds is not None:
        where = endpoint_destination(endpoint)
        prefix = f"ModelEndpoint/{endpoint.name}: "
        checked = await credential(store, guardrail.namespace, creds.secret_ref, where, prefix)
        if checked.problem:
            return checked.problem
    verdict = Verdict("True", "Configured", f"model judge via ModelEndpoint {spec.model_ref!r}")
    return checked.noted(verdict)


async def guardrail_verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
    guardrail = Guardrail.model_validate(body)  # patterns compile with RE2, or InvalidSpec
    spec = guardrail.spec
    if spec.http is not None:
        return await _http_verdict(guardrail, store)
    if spec.model is not None:
        return await _model_verdict(guardrail, store)
    count = len(spec.pattern.patterns) if spec.pattern is not None else 0
    return Verdict("True", "Compiled", f"{count} pattern(s) compile with RE2")
