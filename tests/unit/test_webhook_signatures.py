"""TaskWebhook delivery signatures (gateway/signatures.py) and payload mapping
(gateway/payload.py): the HMAC tolerance edges against an injected clock, the GitHub
profile, JSON Pointers (RFC 6901), the size and depth caps."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from ordo.gateway.payload import PayloadRefused, depth, parse, read_capped, resolve, task_input
from ordo.gateway.signatures import sign_github, sign_hmac, verify_github, verify_hmac

SECRET = "s3cret-value"
BODY = b'{"action":"opened","issue":{"title":"a/b","n":7}}'
NOW = 1_800_000_000


def test_hmac_accepts_inside_the_tolerance_and_refuses_outside_it() -> None:
    for sent, ok in ((NOW, True), (NOW - 300, True), (NOW + 300, True)):
        header = sign_hmac(SECRET, sent, BODY)
        assert (verify_hmac(header, SECRET, BODY, NOW, 300) is not None) is ok
    for sent in (NOW - 301, NOW + 301):
        assert verify_hmac(sign_hmac(SECRET, sent, BODY), SECRET, BODY, NOW, 300) is None


def test_hmac_signature_covers_the_timestamp_and_the_body() -> None:
    header = sign_hmac(SECRET, NOW, BODY)
    signature = header.split("v1=")[1]
    assert verify_hmac(header, SECRET, BODY, NOW, 300) == signature
    assert verify_hmac(header, "other-secret", BODY, NOW, 300) is None
    assert verify_hmac(header, SECRET, BODY + b" ", NOW, 300) is None
    # A captured signature with a fresh timestamp does not verify.
    assert verify_hmac(f"t={NOW + 1},v1={signature}", SECRET, BODY, NOW, 300) is None


def test_hmac_takes_any_matching_v1_and_refuses_malformed_headers() -> None:
    good = sign_hmac(SECRET, NOW, BODY).split("v1=")[1]
    assert verify_hmac(f"t={NOW},v1={'0' * 64},v1={good}", SECRET, BODY, NOW, 300) == good
    assert verify_hmac(f"t={NOW}, v1={good.upper()}", SECRET, BODY, NOW, 300) == good
    for header in (
        None,
        "",
        f"v1={good}",
        f"t={NOW}",
        f"t=-{NOW},v1={good}",
        f"t={NOW},v1={good[:-1]}",
        f"t={NOW},v0={good}",
        f"t={NOW},v1={good}" + ",x" * 600,
    ):
        assert verify_hmac(header, SECRET, BODY, NOW, 300) is None


def test_github_profile() -> None:
    header = sign_github(SECRET, BODY)
    assert header.startswith("sha256=")
    assert verify_github(header, SECRET, BODY) == header.removeprefix("sha256=")
    assert verify_github(header.upper().replace("SHA256=", "sha256="), SECRET, BODY)
    assert verify_github(header, SECRET, BODY + b"x") is None
    assert verify_github(header, "other", BODY) is None
    assert verify_github(header.replace("sha256=", "sha1="), SECRET, BODY) is None
    assert verify_github(None, SECRET, BODY) is None
    # GitHub's own documented example (docs.github.com, "Validating webhook deliveries").
    example = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert verify_github(example, "It's a Secret to Everybody", b"Hello, World!")


def test_json_pointers() -> None:
    doc = {"a/b": 1, "m~n": 2, "": 3, "list": [10, {"x": None}], "0": "zero"}
    assert resolve(doc, "") == doc
    assert resolve(doc, "/a~1b") == 1
    assert resolve(doc, "/m~0n") == 2
    assert resolve(doc, "/") == 3
    assert resolve(doc, "/list/0") == 10
    assert resolve(doc, "/list/1/x") is None
    assert resolve(doc, "/0") == "zero"
    for missing in ("/nope", "/list/2", "/list/01", "/list/-", "/list/0/x", "/a~1b/c"):
        with pytest.raises(PayloadRefused) as refused:
            resolve(doc, missing)
        assert refused.value.outcome == "invalid"


def test_task_input_is_the_fields_or_the_whole_body() -> None:
    doc = json.loads(BODY)
    assert task_input(doc, None) == doc
    assert task_input(doc, {"title": "/issue/title", "what": "/action"}) == {
        "title": "a/b",
        "what": "opened",
    }
    assert task_input([1, 2], None) == "[1, 2]"
    assert task_input("text", None) == '"text"'


def test_depth_cap_and_invalid_json() -> None:
    assert depth(1) == 0 and depth({}) == 1 and depth({"a": [[{}]]}) == 4
    assert parse(b'{"a": [[{}]]}', 4) == {"a": [[{}]]}
    for body, outcome in (
        (b'{"a": [[{}]]}', "too_large"),
        (b"[" * 100_000 + b"]" * 100_000, "too_large"),
        (b"{not json", "invalid"),
        (b"\xff\xfe", "invalid"),
    ):
        with pytest.raises(PayloadRefused) as refused:
            parse(body, 3)
        assert refused.value.outcome == outcome


async def test_read_capped_stops_reading_past_the_limit() -> None:
    pulled = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(1000):
            pulled += 1
            yield b"x" * 1024

    assert len(await read_capped(chunks(), 10**7)) == 1024 * 1000
    pulled = 0
    with pytest.raises(PayloadRefused) as refused:
        await read_capped(chunks(), 4096)
    assert refused.value.outcome == "too_large"
    assert pulled == 5  # the fifth chunk crossed the cap; nothing after it was read
