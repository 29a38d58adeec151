"""Who is calling, and may they: a bearer token checked with a TokenReview (for the
gateway's audience), each method checked with a SubjectAccessReview for that caller.

Tokens are never logged or echoed; a successful review is remembered for a short time under
the token's SHA-256 (tokencache.py), a failed review is only a refusal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api import GROUP
from ..operator.kube.client import ApiError, KubeClient
from .tokencache import TokenCache

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True, slots=True)
class Caller:
    """A caller as the API server authenticated it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)


class Reviewer:
    """Asks the API server who a token is and what that caller may do."""

    def __init__(
        self, kube: KubeClient, audiences: tuple[str, ...], cache: TokenCache[Caller]
    ) -> None:
        self._kube = kube
        self._audiences = audiences
        self._cache = cache

    async def authenticate(self, token: str) -> Caller | None:
        """The caller `token` authenticates, or None (invalid, expired, wrong audience)."""
        caller = self._cache.get(token)
        if caller is None:
            caller = await self._review(token)
            if caller is not None:
                self._cache.put(token, caller)
        return caller

    async def _review(self, token: str) -> Caller | None:
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = list(self._audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        try:
            result = await self._kube.review(TOKEN_REVIEWS, body)
        except ApiError:
            return None
        status = result.get("status") or {}
        if not status.get("authenticated"):
            return None
        if self._audiences and not set(status.get("audiences") or []) & set(self._audiences):
            return None
        user = status.get("user") or {}
        name = user.get("username")
        if not isinstance(name, str) or not name:
            return None
        extra = user.get("extra") or {}
        return Caller(
            username=name,
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra={str(k): [str(v) for v in vs] for k, vs in extra.items()},
        )

    async def allowed(self, caller: Caller, namespace: str, verb: str) -> bool:
        """May `caller` `verb` Tasks in `namespace`? A failed review is a no."""
        spec: dict[str, Any] = {
            "user": caller.username,
            "groups": list(caller.groups),
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": GROUP,
                "resource": "tasks",
            },
        }
        if caller.uid:
            spec["uid"] = caller.uid
        if caller.extra:
            spec["extra"] = caller.extra
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        try:
            result = await self._kube.review(ACCESS_REVIEWS, body)
        except ApiError:
            return False
        return bool((result.get("status") or {}).get("allowed"))
