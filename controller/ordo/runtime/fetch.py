"""Reading referenced objects through the ObjectStore, mapping every failure to a Task
reason (ResolutionError) — no model is called when one of these fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..api import Memory, Resource
from ..api.task import Reason
from ..credentials import NOWHERE, CredentialRefused, Destination, destination
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
NOT_OPTED_IN = "or is not labelled ordo.dev/credential=true"
"""Said of every Secret that cannot be read: a Secret its owner did not opt in reads exactly
like a missing one (no key listing, no "exists" answer)."""


def memory_destination(memory: Memory) -> Destination | None:
    """Where a Memory's Secret is sent: its URL's host (NOWHERE for in-memory)."""
    return destination(memory.spec.url) if memory.spec.url else NOWHERE


async def credential(
    store: ObjectStore,
    namespace: str,
    name: str,
    key: str,
    owner: str,
    dest: Destination | None,
) -> str:
    """The value of a Secret key for sending to `dest`, through the store's
    `credentials.release`. SecretNotFound when the Secret or key is missing or the Secret is
    not opted in (one message for both; the key list only for an opted-in Secret) and, where
    the store knows one, how to provide it; CredentialNotAllowed when the Secret does not
    allow `dest`. Both before anything is sent."""
    try:
        released = await store.credential(namespace, name, key, dest)
    except StoreError as exc:
        raise ResolutionError(
            "SecretNotFound", f"Secret {name!r} for {owner} could not be read: {exc}"
        ) from None
    except CredentialRefused as refusal:
        raise ResolutionError("CredentialNotAllowed", f"{refusal.message} (for {owner})") from None
    if released.value is not None:
        return released.value
    message = (
        f"Secret {name!r} (key {key!r}) for {owner} does not exist in namespace "
        f"{namespace!r} {NOT_OPTED_IN}"
    )
    if isinstance(store, DescribesSecrets):
        try:
            keys = await store.secret_keys(namespace, name)
        except StoreError:
            keys = [""]  # cannot tell which: keep the plain message
        if keys is not None and keys != [""]:
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
