"""The console's Kubernetes access: every read and write with the user's kubeconfig
credentials, so the API server's RBAC decides what the console shows and does.

Which namespaces: the `--namespace` flags; else every namespace when the user may list Tasks
across all of them; else the namespaces the user may list (those where a
SelfSubjectAccessReview says Tasks may be listed); else the kubeconfig context's namespace.
The choice is made again when it is older than `REVIEW_TTL`, so a namespace the user gains
access to appears without a restart. What the user may do in each shown namespace comes from
a SelfSubjectRulesReview (console/rules.py; SelfSubjectAccessReviews where it is
incomplete): the pages say it, but the API server decides every action."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ..api import GROUP
from ..operator.kube.client import ApiError, KubeClient
from .rules import ABILITIES, CREATE_APPROVALS, SSRR_PATH, Permissions, grants, review_body

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
MAX_NAMESPACES = 2000
"""Namespaces probed one by one when the user may list namespaces but not Tasks everywhere
(the context's namespace first; beyond this the page says so: use --namespace)."""
PROBES_AT_ONCE = 16
"""Access reviews in flight at once while probing (each is an authorization check only)."""
TASKS = "tasks"
REVIEW_TTL = 60.0
"""Seconds an access or rules review's answer, and the namespaces chosen, are reused (RBAC
changes show within a minute)."""


@dataclass
class Scope:
    """The namespaces the console reads: `everywhere` (one request across all) or `names`."""

    names: list[str]
    everywhere: bool = False
    how: str = ""
    """How they were chosen (shown on the pages)."""


@dataclass
class Listing:
    """Objects read across the scope, the refusals met (a namespace the user may not read is
    reported, not fatal), and the newest resourceVersion of the lists (where a watch of the
    same objects starts: etcd's revisions are global to the API server)."""

    items: list[dict[str, Any]]
    problems: list[str]
    version: str


@dataclass
class Access:
    """The user's client and what the console learned about them (cached for the process)."""

    kube: KubeClient
    requested: list[str]
    default_namespace: str
    ttl: float = REVIEW_TTL
    _scope: tuple[Scope, float] | None = None
    _user: str | None = None
    _allowed: dict[tuple[str, str, str, str], tuple[bool, float]] = field(default_factory=dict)
    _rules: dict[str, tuple[Permissions, float]] = field(default_factory=dict)

    async def allowed(
        self, verb: str, resource: str, namespace: str = "", group: str = GROUP
    ) -> bool:
        """A SelfSubjectAccessReview (an answer is kept `ttl` seconds): may the user
        `verb` `resource` in `namespace` ("" for all namespaces, or a cluster-scoped
        resource)? False if the review fails."""
        key = (verb, group, resource, namespace)
        kept = self._allowed.get(key)
        if kept is None or time.monotonic() - kept[1] > self.ttl:
            attributes: dict[str, str] = {"verb": verb, "group": group, "resource": resource}
            if namespace:
                attributes["namespace"] = namespace
            body = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes},
            }
            try:
                answer = await self.kube.review(SSAR_PATH, body)
            except ApiError:
                return False
            allowed = bool((answer.get("status") or {}).get("allowed"))
            self._allowed[key] = kept = (allowed, time.monotonic())
        return kept[0]

    async def may_decide(self, namespace: str) -> bool:
        """May the user create ToolApprovals in `namespace` (approve and reject)?"""
        return (await self.permissions(namespace)).granted[CREATE_APPROVALS.label]

    async def permissions(self, namespace: str) -> Permissions:
        """What the user may do in `namespace` (kept `ttl` seconds): the rules of a
        SelfSubjectRulesReview; what they do not grant is asked with a
        SelfSubjectAccessReview when the review is incomplete or fails."""
        kept = self._rules.get(namespace)
        if kept is not None and time.monotonic() - kept[1] <= self.ttl:
            return kept[0]
        try:
            answer = await self.kube.review(SSRR_PATH, review_body(namespace))
            status = answer.get("status") or {}
            rules, complete = list(status.get("resourceRules") or []), not status.get("incomplete")
            source = (
                "the rules review"
                if complete
                else "the rules review (incomplete) and access reviews"
            )
        except ApiError:
            rules, complete, source = [], False, "access reviews (the rules review failed)"
        granted = {
            ability.label: grants(rules, ability)
            or (
                not complete
                and await self.allowed(ability.verb, ability.resource, namespace, ability.group)
            )
            for ability in ABILITIES
        }
        permissions = Permissions(namespace, granted, source)
        self._rules[namespace] = (permissions, time.monotonic())
        return permissions

    async def user(self) -> str:
        """The user's name as the API server knows it ("" if it does not say)."""
        if self._user is None:
            try:
                self._user = await self.kube.username()
            except ApiError:
                return ""
        return self._user

    async def scope(self) -> Scope:
        """The namespaces read, chosen again when the choice is older than `ttl`."""
        if self._scope is None or time.monotonic() - self._scope[1] > self.ttl:
            self._scope = (await self._choose(), time.monotonic())
        return self._scope[0]

    async def _choose(self) -> Scope:
        if self.requested:
            return Scope(sorted(set(self.requested)), how="the --namespace flags")
        if await self.allowed("list", TASKS):
            return Scope([], everywhere=True, how="you may list Tasks in all of them")
        if await self.allowed("list", "namespaces", group=""):
            try:
                every = await self.kube.namespaces()
            except ApiError:
                every = []
            # The context's namespace first: probed even in a cluster of more than the cap.
            first = [self.default_namespace] if self.default_namespace in every else []
            names = first + [ns for ns in every if ns not in first][: MAX_NAMESPACES - len(first)]
            gate = asyncio.Semaphore(PROBES_AT_ONCE)

            async def may_list(ns: str) -> bool:
                async with gate:
                    return await self.allowed("list", TASKS, ns)

            checks = await asyncio.gather(*(may_list(ns) for ns in names))
            readable = sorted(ns for ns, ok in zip(names, checks, strict=True) if ok)
            how = "the namespaces where you may list Tasks"
            if len(every) > len(names):
                how += f" (of the first {len(names)} of {len(every)} namespaces: use --namespace)"
            if readable:
                return Scope(readable, how=how)
        return Scope([self.default_namespace], how="your kubeconfig context's namespace")

    async def watched(self, namespace: str | None = None) -> list[str | None]:
        """The namespaces to read (None: all at once), for the scope or one of its namespaces
        ([] if `namespace` is not in the scope)."""
        scope = await self.scope()
        if namespace:
            return [namespace] if scope.everywhere or namespace in scope.names else []
        return [None] if scope.everywhere else list(scope.names)

    async def in_scope(self, kind: str, namespace: str | None = None) -> Listing:
        """Every object of an ordo `kind` in the scope (or in one of its namespaces)."""
        names = await self.watched(namespace)
        if not names:
            return Listing([], [f"namespace {namespace!r} is not one the console reads"], "")
        results = await asyncio.gather(
            *(self.kube.list_versioned(kind, ns) for ns in names), return_exceptions=True
        )
        listing = Listing([], [], "")
        for ns, result in zip(names, results, strict=True):
            if isinstance(result, ApiError):
                listing.problems.append(
                    f"{kind}s in {ns or 'all namespaces'}: {refusal_text(result)}"
                )
            elif isinstance(result, BaseException):
                raise result
            else:
                listing.items.extend(result[0])
                listing.version = newest(listing.version, result[1])
        return listing

    async def events_of(self, namespace: str, name: str) -> tuple[list[dict[str, Any]], str]:
        """The Events of Task `name`, oldest first, or why they could not be read."""
        selector = f"involvedObject.kind=Task,involvedObject.name={name}"
        try:
            items = await self.kube.list("Event", namespace, field_selector=selector)
        except ApiError as exc:
            return [], f"Events: {refusal_text(exc)}"
        return sorted(items, key=event_time), ""


def newest(a: str, b: str) -> str:
    """The newer of two resourceVersions ("" if neither is a number)."""
    numbers = [int(v) for v in (a, b) if v.isdigit()]
    return str(max(numbers)) if numbers else ""


def event_time(event: dict[str, Any]) -> str:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        value = event.get(key)
        if isinstance(value, str) and value:
            return value
    return str((event.get("metadata") or {}).get("creationTimestamp") or "")


def refusal_text(exc: ApiError) -> str:
    """The API server's answer, as the page shows it (its status and its own message)."""
    return str(exc)
