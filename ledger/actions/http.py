"""Calling an external destination over HTTP, and what each failure means (docs/design.md rule 6).

| what happened                                   | outcome   | why                                   |
| ----------------------------------------------- | --------- | ------------------------------------- |
| no connection, connect timeout, pool timeout    | transient | the request never left                |
| read/write timeout, reset, no answer            | ambiguous | it may have reached the destination   |
| 2xx                                             | success   |                                       |
| 429, 503, 408                                   | transient | refused before acting; Retry-After    |
| 500, 502, 504                                   | ambiguous | the destination may have acted        |
| other 4xx                                       | permanent | repeating the same request won't help |
| an address the egress policy refuses            | permanent | nothing was sent; a person must look  |

Connections: each thread keeps one ``httpx.Client`` (``thread_client``), whose pool keeps a
destination's connection open between that thread's calls (HTTP/1.1 keep-alive), so a second call
skips the TCP and TLS handshakes. Only one thread uses a client, so no call waits on another's
connection. A kept connection is not reused once idle for httpx's keep-alive expiry (5 s) or once
the destination has closed it (httpcore looks before each reuse); a destination closing it in the
instant between that look and our request fails the call as "no answer" (ambiguous), as a reset does. A
call that fails in transport closes its thread's client (the next call starts on a new one), and a
thread's client is closed when the thread ends. The threads that make a worker's external calls
(``ledger.engine.processing.call_threads``) and the worker's main thread, where django-q2 runs its
tasks, last as long as the worker process, and their clients with them: the system closes their
sockets when the worker exits (django-q2's workers end without running ``atexit``). A forked child starts without
its parent's clients.
"""

import os
import ssl
import threading
import weakref
from email.utils import parsedate_to_datetime
from functools import cache

import httpx
from django.conf import settings
from django.utils import timezone
from httpx._utils import get_environment_proxies

from ledger.actions import answers, egress
from ledger.outcomes import AmbiguousError, PermanentError, TransientError

NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
MAYBE_SENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
REFUSED_STATUSES = {408, 429, 503}
AMBIGUOUS_STATUSES = {500, 502, 504}


_threads = threading.local()
_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)  # httpx's own


class _ThreadClient:
    """One thread's client. Held only by that thread's ``_threads``: when the thread ends, its
    thread-local values go, and with this holder the client is closed (the finalizer)."""

    def __init__(self) -> None:
        # Its timeouts are set per request (``send``), from the settings of the moment; its
        # connections open only where the egress policy allows (``ledger.actions.egress``), and
        # through a proxy the environment names, to a destination the policy allows.
        transport = egress.GuardedTransport(ssl_context=_ssl_context(), limits=_LIMITS)
        self.client = httpx.Client(transport=transport, mounts=_environment_proxies())
        self.close = weakref.finalize(self, self.client.close)


def _environment_proxies() -> dict[str, httpx.BaseTransport | None]:
    """The proxies the environment names (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY), as the client's
    mounts: a client given its own transport reads none itself. NO_PROXY's hosts are mounted on
    None, the client's own transport (called directly)."""
    # httpx's own reading of the variables, so they mean what they meant before the egress policy.
    proxies = get_environment_proxies()
    return {
        pattern: egress.ProxiedTransport(proxy=proxy, ssl_context=_ssl_context(), limits=_LIMITS) if proxy else None
        for pattern, proxy in proxies.items()
    }


def thread_client() -> httpx.Client:
    """This thread's client, made by its first call; closed when the thread ends."""
    held = getattr(_threads, "held", None)
    if held is None:
        held = _threads.held = _ThreadClient()
    return held.client


def close_thread_client() -> None:
    """Close this thread's client, if it has one; its next call makes a new one."""
    held = _threads.__dict__.pop("held", None)
    if held is not None:
        held.close()


def _forget_clients() -> None:
    # In a forked child the parent's clients (their sockets shared with the parent) are not used:
    # each thread makes its own again.
    global _threads
    _threads = threading.local()


os.register_at_fork(after_in_child=_forget_clients)


_ssl_lock = threading.Lock()


@cache
def _ssl_context() -> ssl.SSLContext:
    # Building one loads the CA bundle: ~20 ms of CPU, which every call paid when each client built
    # its own. One per process, shared by the clients of every thread (an SSLContext is thread-safe).
    # Built under a lock: a batch's first calls start together, and 25 threads each building one
    # (the cache does not stop that) cost half a second of CPU.
    with _ssl_lock:
        return _build_ssl_context()


@cache
def _build_ssl_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: the destination its calls share."""
    parsed = httpx.URL(url)
    return f"{parsed.scheme}://{parsed.host}:{parsed.port or (443 if parsed.scheme == 'https' else 80)}"


def send(method: str, url: str, **request) -> httpx.Response:
    """Send one request; return a 2xx response or raise the classified outcome error."""
    return classify_response(deliver(method, url, **request))


def deliver(
    method: str,
    url: str,
    *,
    json: dict | None = None,
    data: list | dict | None = None,
    content: bytes | None = None,
    headers: dict | None = None,
    params: dict | None = None,
    timeout: httpx.Timeout | float | None = None,
) -> httpx.Response:
    """Send one request; return its answer whatever the status (a transport failure raises its
    classified error). ``content``: the body's exact bytes (a signed one). ``timeout``: the
    destination's, else OPSCONSOLE_HTTP_TIMEOUT_SECONDS."""
    try:
        return _request(
            method, url, json=json, data=data, content=content, headers=headers, params=params, timeout=timeout
        )
    except NOT_SENT as exc:
        raise TransientError(f"{type(exc).__name__}: the request did not reach {_host(url)}") from exc
    except MAYBE_SENT as exc:
        raise AmbiguousError(f"{type(exc).__name__}: no answer from {_host(url)}") from exc


def _request(method: str, url: str, *, timeout=None, **kwargs) -> httpx.Response:
    http = thread_client()
    try:
        return http.request(method, url, timeout=timeout or settings.OPSCONSOLE_HTTP_TIMEOUT_SECONDS, **kwargs)
    except BaseException:
        # Whatever the failure left in the pool (a connection cut mid-answer) goes with the client.
        close_thread_client()
        raise


def classify_response(response: httpx.Response, *, code_path: str = "", message_path: str = "") -> httpx.Response:
    """``response`` if it is a 2xx, else the classified error it is, carrying the destination's
    answer (``ledger.actions.answers``; the paths find its code and words in a JSON body)."""
    status = response.status_code
    if 200 <= status < 300:
        return response
    answer = answers.answer_of(response, code_path=code_path, message_path=message_path)
    message = answers.failure_message(answer, _host(str(response.request.url)))
    if status in REFUSED_STATUSES:
        retry_after = retry_after_seconds(response.headers.get("Retry-After"))
        raise TransientError(message, retry_after=retry_after, answer=answer)
    if status in AMBIGUOUS_STATUSES or status >= 500:
        raise AmbiguousError(message, answer=answer)
    raise PermanentError(message, answer=answer)


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now: a number of seconds or an HTTP date; None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (moment - timezone.now()).total_seconds())


def _host(url: str) -> str:
    return httpx.URL(url).host or "the destination"
