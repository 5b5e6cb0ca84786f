"""How every JSON body is read — a hook server's request, `serve`'s control plane, a hook's
answer, `hooks run --context` — so text that is not Unicode (bytes that are not UTF-8, a lone
surrogate) is refused the same way everywhere (docs/security.md).

`read_json` reads with orjson first (3× faster on a served call's body) and gives the stdlib
reader every body orjson refuses or might read differently, so what is accepted, and each
refusal's words, are the stdlib's.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["NotUnicode", "read_json"]

#: A `\uD800`–`\uDFFF` escape: only a body holding one can parse to a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


#: Every digit as "0", `[` and `{` as "[", any other byte as " ": a body holding
#: `_LONG_DIGITS` may hold an integer orjson would read as a float (past 64 bits), and one
#: with `_DEEP` brackets may nest deeper than the stdlib reads (orjson reads 1,024 levels),
#: so the stdlib reads those. One C pass, one search, one count: under a microsecond.
_MARKED = bytes(0x30 if 0x30 <= b <= 0x39 else 0x5B if b in b"[{" else 0x20
                for b in range(256))
_LONG_DIGITS = b"0" * 19
_DEEP = 512


class NotUnicode(ValueError):
    """A JSON body that is not Unicode text; `str()` completes "the body …"."""


def read_json(body: bytes | str, *, decoder: json.JSONDecoder | None = None,
              **options: Any) -> Any:
    """`json.loads(body, **options)` for a body that must be Unicode text (issue 20, item 8).

    Refused with `NotUnicode`: bytes that are not UTF-8 (UTF-8-encoded surrogates included,
    which `json.loads` on bytes would let through), and a string holding a lone surrogate
    (`"\ud800"` with no partner: valid JSON syntax, but no character). Such a string cannot
    be stored, matched by RE2, written to a log or encoded again, so it is refused where it
    comes in instead of failing later in whatever touches it. A surrogate pair is a
    character and passes. Other errors are `json.loads`'s own (`ValueError`,
    `RecursionError`). A `decoder` built once stands for `options` (a served call reads
    with one instead of building `json.loads`'s per call); it may refuse more than the
    stdlib's defaults (NaN, as a served call's does) but not read anything differently,
    since a body orjson reads never reaches it. With `options`, the stdlib reads alone.
    """
    if not options:  # the fast path; the stdlib below decides every case it does not take
        try:
            raw = body.encode() if isinstance(body, str) else body
            marked = raw.translate(_MARKED)
            if _LONG_DIGITS not in marked and marked.count(b"[") < _DEEP:
                return orjson.loads(raw)
        except (UnicodeEncodeError, orjson.JSONDecodeError):
            pass  # not JSON, not UTF-8, a lone surrogate, a BOM, NaN, too deep: see below
    if isinstance(body, str):
        text = body
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _lone(exc) from None
    else:
        try:
            text = body.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise NotUnicode(f"is not UTF-8 (byte 0x{body[exc.start]:02x} at offset "
                             f"{exc.start}); send UTF-8 text") from None
    if decoder is None:
        doc = json.loads(text, **options)
    elif text.startswith("\ufeff"):  # what json.loads says before it decodes; decode() does not
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    else:
        doc = decoder.decode(text)
    if _SURROGATE_ESCAPE.search(text):  # rare: only then is the document walked again
        try:
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _lone(exc) from None
    return doc


def _lone(exc: UnicodeEncodeError) -> NotUnicode:
    code = ord(exc.object[exc.start])
    return NotUnicode(f"holds a lone surrogate (\\u{code:04x}), which is not a character; "
                      "a character is written as itself or as a surrogate pair")
