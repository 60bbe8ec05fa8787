"""Reading a request's body as HTTP says (RFC 9110): from Django's stream when it has a
Content-Length, from the server's input when it is chunked, never more than the limit + 1 bytes,
and gzip decoded with the limit held to the decoded size. ``opsconsole.api.endpoints`` answers what goes wrong."""

import zlib

from django.http import HttpRequest

UTF_8 = ("utf-8", "utf8")
GZIP = ("gzip", "x-gzip")
# How much of a body is read at a time (counted against the limit as it arrives).
READ_SIZE = 64 * 1024


class TooLarge(Exception):
    """More bytes than the limit (sent, or decoded)."""


class BadGzip(Exception):
    """A body sent as gzip that is not, or is cut short."""


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
