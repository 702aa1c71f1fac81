"""Reading ``corun fetch`` input: one URL per line, or one JSON object per line.

Every input line, blank ones included, yields exactly one item: a
``FetchRequest`` or a ``BadInput`` that says what is wrong with it. That is
what lets the output hold exactly one line per input line. A final newline
does not start another line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from yarl import URL

from corun.http import InvalidURL, parse_url

#: Input lines longer than this are bad input rather than a memory hazard.
MAX_LINE_BYTES: Final = 1024 * 1024
_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """One request to make.

    Attributes:
        line: the 1-based input line number.
        id: the caller's ``id`` (any JSON value), or None.
        url: the URL, checked by ``corun.http.parse_url``.
        method: the method, upper case.
        headers: request headers.
        body: the request body, or None.
        parsed: ``url`` as ``parse_url`` parsed it (None when built by
            hand), so that the client does not parse it again.
    """

    line: int
    id: Any
    url: str
    method: str
    headers: Mapping[str, str]
    body: str | None
    parsed: URL | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class BadInput:
    """An input line that cannot be fetched, and why.

    Attributes:
        line: the 1-based input line number.
        error: a message saying what is wrong.
        kind: ``invalid_json``, ``invalid_request``, ``invalid_url`` or
            ``unsupported_scheme``.
        id: the ``id`` of a JSON line, when it had one.
        url: the URL, when there was one.
    """

    line: int
    error: str
    kind: str
    id: Any = None
    url: str | None = None


def parse_line(number: int, raw: bytes) -> FetchRequest | BadInput:
    """One input line (without its newline) as a request or a bad-input record."""
    if len(raw) > MAX_LINE_BYTES:
        return BadInput(number, f"line is longer than {MAX_LINE_BYTES} bytes", "invalid_request")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        return BadInput(number, f"line is not UTF-8: {exc}", "invalid_request")
    if not text:
        return BadInput(number, "empty line: expected a URL or a JSON object", "invalid_request")
    if text.startswith("{"):
        return _parse_json(number, text)
    return _request(number, None, text, "GET", {}, None)


def _parse_json(number: int, text: str) -> FetchRequest | BadInput:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        return BadInput(number, f"invalid JSON: {exc}", "invalid_json")
    if not isinstance(obj, dict):
        return BadInput(number, "invalid JSON line: expected an object", "invalid_json")
    ident = obj.get("id")
    url = obj.get("url")
    if not isinstance(url, str):
        return BadInput(number, "invalid request: 'url' must be a string", "invalid_request", ident)
    method = obj.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in _METHODS:
        return BadInput(
            number, f"invalid request: unsupported method {method!r}", "invalid_request", ident, url
        )
    headers = obj.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        return BadInput(
            number,
            "invalid request: 'headers' must be an object of strings",
            "invalid_request",
            ident,
            url,
        )
    body = obj.get("body")
    if body is not None and not isinstance(body, str):
        body = json.dumps(body, separators=(",", ":"))
    return _request(number, ident, url, method.upper(), headers, body)


def _request(
    number: int, ident: Any, url: str, method: str, headers: Mapping[str, str], body: str | None
) -> FetchRequest | BadInput:
    try:
        parsed = parse_url(url)
    except InvalidURL as exc:
        return BadInput(number, str(exc), exc.kind, ident, url)
    return FetchRequest(number, ident, url, method, headers, body, parsed)


def read_requests(path: str) -> Iterator[FetchRequest | BadInput]:
    """Every line of the file at ``path``, parsed, in order; streams, so memory is bounded.

    ``corun fetch`` copies stdin (``-``) to a file first (see ``runner``), so
    that a re-run after a crash reads the same input.
    """
    with open(path, "rb") as stream:
        for number, raw in enumerate(stream, start=1):
            yield parse_line(number, raw.rstrip(b"\r\n"))


def count_lines(path: str) -> int:
    """The number of input lines in ``path`` (a last line without newline counts)."""
    count = 0
    last = b"\n"
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (0 if last == b"\n" else 1)
