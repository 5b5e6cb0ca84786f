"""`wire.read_json` reads with orjson first: it must accept, read and refuse exactly as the
standard library reader it speeds up (same values, same refusals in the same words)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from the_loop.hooks.serving.jsonrpc import _DECODER
from the_loop.hooks.serving.wire import NotUnicode, read_json

TEXT = st.text(alphabet=st.sampled_from(list('ab"\\ \n\x00é🙂\ud800\udc00\u2028')), max_size=8)
SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**62)
           | st.integers(max_value=-(2**62)) | st.floats(allow_nan=False, allow_infinity=False)
           | TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8)


def stdlib(body: bytes | str) -> Any:
    """What the reader answered before orjson: the stdlib path alone (`options` given)."""
    return read_json(body, parse_constant=_reject)


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def outcome(read: Any, body: bytes | str) -> tuple[str, Any]:
    try:
        value = read(body)
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)
    return "value", json.dumps(value, sort_keys=True)  # 1 and 1.0, True and 1 kept apart


def fast(body: bytes | str) -> Any:
    return read_json(body, decoder=_DECODER)


def _encoded(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(JSON.map(_encoded) | JSON.map(lambda v: json.dumps(v).encode())
       | st.binary(max_size=40))
def test_read_json_reads_and_refuses_any_body_as_the_stdlib_does(body: bytes) -> None:
    assert outcome(fast, body) == outcome(stdlib, body)
    text = body.decode("utf-8", "surrogatepass") if _decodes(body) else None
    if text is not None:  # the str path too (a remote hook's answer is read as text)
        assert outcome(fast, text) == outcome(stdlib, text)


def _decodes(body: bytes) -> bool:
    try:
        body.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("body", [
    b'{"number": 18446744073709551616}',  # 2**64: orjson alone would read a float
    b'[-9223372036854775809, 9223372036854775808]',
    b'{"id": ' + b"9" * 400 + b"}",
])
def test_read_json_keeps_integers_past_64_bits_as_integers(body: bytes) -> None:
    value = fast(body)
    assert value == json.loads(body)
    assert all(type(v) is int for v in (value.values() if isinstance(value, dict) else value))


@pytest.mark.parametrize(("body", "words"), [
    (b'"\\ud800"', "lone surrogate"),
    (b"\xef\xbb\xbf\xff", "not UTF-8"),
    (b"NaN", "NaN is not JSON"),
    (b"[" * 100_000, "recursion"),
])
def test_read_json_refusals_keep_the_stdlib_words(body: bytes, words: str) -> None:
    with pytest.raises((NotUnicode, ValueError, RecursionError)) as caught:
        fast(body)
    assert words in str(caught.value)
    assert outcome(fast, body) == outcome(stdlib, body)


def test_read_json_takes_a_utf8_bom_as_the_stdlib_does() -> None:
    assert fast(b'\xef\xbb\xbf{"a": [1, 2.5, "\xc3\xa9"]}') == {"a": [1, 2.5, "é"]}


@pytest.mark.parametrize("depth", [511, 600, 1000, 1020])
def test_read_json_nesting_is_read_or_refused_as_the_stdlib_does(depth: int) -> None:
    body = b"[" * depth + b"]" * depth
    assert outcome(fast, body) == outcome(stdlib, body)


@pytest.mark.parametrize("body", [
    "\ufeff{}",  # a BOM in text (a remote hook's answer is read as text)
    b"\xef\xbb\xbf\xef\xbb\xbf{}",  # a second BOM behind the one bytes may start with
    "\ufeff",
])
def test_read_json_refuses_a_bom_in_text_in_the_stdlib_words(body: bytes | str) -> None:
    assert outcome(fast, body) == outcome(stdlib, body)
    assert "Unexpected UTF-8 BOM" in outcome(fast, body)[1]
