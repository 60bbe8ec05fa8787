"""Reading a request's body as HTTP says (RFC 9110): from Django's stream when it has a
Content-Length, from the server's input when it is chunked, never more than the limit + 1 bytes,
and gzip decoded with the limit held to the decoded size. What is wrong with a body is raised as
an ``ApiProblem``, which the API's handler records and answers."""

import zlib

from django.http import HttpRequest

from opsconsole.api.problems import ApiProblem

UTF_8 = ("utf-8", "utf8")
GZIP = ("gzip", "x-gzip")
# How much of a body is read at a time (counted against the limit as it arrives).
READ_SIZE = 64 * 1024


class TooLarge(Exception):
    """More bytes than the limit (sent, or decoded)."""


class BadGzip(Exception):
    """A body sent as gzip that is not, or is cut short."""


def read_body(request: HttpRequest, limit: int) -> bytes:
    """The body's bytes as sent (decompressed). A signed webhook is checked on these bytes before
    anything reads them.

    Read as HTTP says (RFC 9110, RFC 8259): a body must say it is JSON (one sent without a
    Content-Type, or as a form, what ``curl -d`` sends unless told otherwise, is refused with 415
    rather than guessed at), in UTF-8 (any other charset: 415), either as it is or gzip-compressed
    (decoded, its decoded size held to the limit; any other Content-Encoding: 415). A chunked body
    (no Content-Length; the server decodes the chunks) is read as it comes. Either way at most
    ``limit`` + 1 bytes are read before a body is refused as too large.
    """
    _require_json(request)
    encoding = _content_encoding(request)
    declared = _declared_length(request)
    body = _read(request, declared, limit)
    return _gunzipped(body, limit) if encoding in GZIP else body


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


def _require_json(request: HttpRequest) -> None:
    if not _is_json(request.content_type or ""):
        raise ApiProblem(415, reason="unsupported_media_type", field="Content-Type", message="must be application/json")
    charset = (request.content_params or {}).get("charset")
    if charset is not None and charset.strip().lower() not in UTF_8:
        raise ApiProblem(
            415,
            reason="unsupported_charset",
            field="Content-Type",
            message="must be UTF-8 (charset=utf-8, or none)",
        )


def _content_encoding(request: HttpRequest) -> str:
    encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    if encoding not in ("", "identity", *GZIP):
        raise ApiProblem(
            415,
            reason="unsupported_encoding",
            field="Content-Encoding",
            message="must be gzip, or none",
            headers={"Accept-Encoding": "gzip"},
        )
    return encoding


def _declared_length(request: HttpRequest) -> str:
    """The Content-Length as sent ("" for none), refused where this server cannot read the body."""
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared and not (declared.isascii() and declared.isdigit()):
        # Django's own reading of the body would fail on it.
        raise ApiProblem(
            400, reason="malformed_request", field="Content-Length", message="must be a whole number of bytes"
        )
    chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    if chunked and not declared and not request.META.get("wsgi.input_terminated"):
        # runserver (wsgiref) passes the chunks undecoded and cannot say where they end.
        raise ApiProblem(
            400,
            reason="malformed_request",
            field="Transfer-Encoding",
            message="this server cannot read a chunked body: send a Content-Length",
        )
    return declared


def _read(request: HttpRequest, declared: str, limit: int) -> bytes:
    declared = declared.lstrip("0") or "0"
    try:
        if len(declared) > len(str(limit)) or int(declared) > limit:
            raise TooLarge
        return read_limited(body_stream(request), limit)
    except TooLarge:
        raise _too_large(limit, f"the body is larger than the limit of {limit} bytes") from None


def _gunzipped(body: bytes, limit: int) -> bytes:
    try:
        return gunzip_limited(body, limit)
    except TooLarge:
        raise _too_large(limit, f"the body, decoded, is larger than the limit of {limit} bytes") from None
    except BadGzip:
        raise ApiProblem(
            400, reason="malformed_request", field="Content-Encoding", message="the body is not valid gzip"
        ) from None


def _too_large(limit: int, message: str) -> ApiProblem:
    return ApiProblem(413, reason="too_large", message=message, extra={"limit_bytes": limit})


def body_stream(request: HttpRequest):
    """Where the body is read from. With a Content-Length, Django's stream (it stops there); with
    none, a chunked body from the server's own input, but only from a server that says its input
    ends where the body ends (``wsgi.input_terminated``: gunicorn does); else there is no body."""
    meta = request.META
    if meta.get("CONTENT_LENGTH"):
        return request
    if "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower() and meta.get("wsgi.input_terminated"):
        return meta["wsgi.input"]
    return None


def read_limited(stream, limit: int) -> bytes:
    """At most ``limit`` bytes of ``stream``; ``TooLarge`` as soon as there are more."""
    if stream is None:
        return b""
    parts, size = [], 0
    while chunk := stream.read(min(READ_SIZE, limit + 1 - size)):
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            raise TooLarge
    return b"".join(parts)


def gunzip_limited(data: bytes, limit: int) -> bytes:
    """The decoded body of gzip ``data`` (one member or several, RFC 1952), decoding no more than
    ``limit`` + 1 bytes: a small body that would decode to gigabytes (a gzip bomb) is ``TooLarge``."""
    decoded = bytearray()
    try:
        while True:
            member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            # max_length is at least 1 here (0 would mean no limit).
            decoded += member.decompress(data, limit + 1 - len(decoded))
            if len(decoded) > limit:
                raise TooLarge
            if not member.eof:
                raise BadGzip  # cut short
            data = member.unused_data
            if not data:
                return bytes(decoded)
    except zlib.error:
        raise BadGzip from None
