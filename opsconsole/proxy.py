"""Who the client is when requests arrive through our own proxies."""

from django.conf import settings


def client_ip(request) -> str:
    """The client's address: REMOTE_ADDR, or, while that is one of OPSCONSOLE_TRUSTED_PROXIES, the
    address that proxy appended to X-Forwarded-For (walking right to left). Addresses further left
    were written by the client itself and could be anything, so they are never believed: login
    throttling keys on this address, and a client that could choose it could guess without end.
    No proxy is trusted unless named (not even 127.0.0.1: any local process connects from there)."""
    address = request.META.get("REMOTE_ADDR", "")
    forwarded = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    while address in settings.OPSCONSOLE_TRUSTED_PROXIES and forwarded:
        address = forwarded.pop()
    return address
