"""Reading referenced objects through the ObjectStore, mapping every failure to a Task
reason (ResolutionError) — no model is called when one of these fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..api import Resource
from ..api.task import Reason
from ..errors import ResolutionError, StoreError
from .parsecache import CACHE
from .store import DescribesSecrets, ObjectStore

R = TypeVar("R", bound=Resource)


async def get(
    store: ObjectStore,
    model: type[R],
    namespace: str,
    name: str,
    reason: Reason,
    what: str,
    check: Callable[[R], None] | None = None,
) -> R:
    """The object, or `reason` when it is missing or cannot be read (InvalidSpec when it does
    not parse, or what `check` raises). Parsed and checked once per uid and resourceVersion
    (parsecache): the model is shared, never mutate it."""
    try:
        body = await store.get(model.model_fields["kind"].default, namespace, name)
    except StoreError as exc:
        raise ResolutionError(reason, f"{what} could not be read: {exc}") from None
    if body is None:
        raise ResolutionError(reason, f"{what} does not exist in namespace {namespace!r}")
    return CACHE.parse(model, body, what, check)


MAX_LISTED_KEYS = 20


async def secret(store: ObjectStore, namespace: str, name: str, key: str, owner: str) -> str:
    """The value of a Secret key, or SecretNotFound naming the Secret, the key and the owner,
    saying whether the Secret or only the key is missing (listing the keys it has: names,
    never values) and, where the store knows one, how to provide it."""
    try:
        value = await store.secret_value(namespace, name, key)
    except StoreError as exc:
        raise ResolutionError(
            "SecretNotFound", f"Secret {name!r} for {owner} could not be read: {exc}"
        ) from None
    if value is not None:
        return value
    message = f"Secret {name!r} key {key!r} for {owner} does not exist"
    if isinstance(store, DescribesSecrets):
        try:
            keys = await store.secret_keys(namespace, name)
        except StoreError:
            keys = [""]  # cannot tell which: keep the plain message
        if keys is None:
            message = (
                f"Secret {name!r} (key {key!r}) for {owner} does not exist in namespace "
                f"{namespace!r}"
            )
        elif keys != [""]:
            listed = ", ".join(sorted(keys)[:MAX_LISTED_KEYS]) or "none"
            if len(keys) > MAX_LISTED_KEYS:
                listed += ", ..."
            message = (
                f"Secret {name!r} for {owner} has no key {key!r} (its keys: {listed}); "
                "check secretRef.key"
            )
        hint = store.secret_hint(name, key)
        if hint:
            message = f"{message}; {hint}"
    raise ResolutionError("SecretNotFound", message)
