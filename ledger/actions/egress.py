"""The egress policy: the addresses a call to a destination may connect to (docs/operations.md,
"Egress policy"). A destination's URL is a tenant-facing configuration, and the processes that call
it sit inside the deployment's network, beside its cloud metadata service and its private hosts.

| address                                                      | a call to it                         |
| ------------------------------------------------------------ | ------------------------------------ |
| the cloud metadata address (169.254.169.254, fd00:ec2::254)  | refused                              |
| link-local (169.254.0.0/16, fe80::/10), site-local (fec0::/10), unspecified, multicast, reserved | refused |
| loopback, private ranges, anything not globally routable     | refused, unless OPSCONSOLE_EGRESS_ALLOW_PRIVATE |
| the rest (public)                                            | allowed                              |

An IPv6 address that carries an IPv4 one is judged as the IPv4 one: IPv4-mapped (``::ffff:0:0/96``),
NAT64 (``64:ff9b::/96``, ``64:ff9b:1::/48``: the last 32 bits), IPv4-compatible (``::/96``), 6to4
(``2002::/16``) and Teredo (``2001::/32``: its server and its client, and the Teredo address itself,
which is not globally routable). A gateway or relay on the way would take the call to that IPv4
address. Checked twice: when a destination is saved (``destination_problem``: a name that does not
resolve then is taken), and at every new connection (``GuardedTransport``), where the host is
resolved once, every address it resolves to is checked (one refused address refuses the call), and
the connection is opened to a checked address, never by looking the name up again (a DNS answer
that changes between the check and the connection cannot move the call). A refused call raises
``EgressRefused``, a permanent failure: nothing was sent, and repeating it will not help.

Through an HTTP proxy named in the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, not
for ``NO_PROXY``'s hosts: ``ledger.actions.http``), the proxy connects to the destination: the host
is resolved and checked the same way before each request is handed to the proxy
(``ProxiedTransport``), and a name that does not resolve here is not sent. The proxy looks the name
up again itself, so it should refuse these addresses too.
"""

import ipaddress
import socket

import httpcore
import httpx
from django.conf import settings

from ledger.outcomes import PermanentError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})
ALLOW_PRIVATE = "OPSCONSOLE_EGRESS_ALLOW_PRIVATE"
WHERE = "docs/operations.md, Egress policy"


class EgressRefused(PermanentError):
    """A call the egress policy refuses: no connection was opened."""


def judged(address: IPAddress) -> str:
    """Why a call may not connect to ``address`` ("" when it may), as "<address> is <why>". An IPv6
    address that carries an IPv4 one is judged as that IPv4 address (``_carried``)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return _judged(address.ipv4_mapped)  # the IPv4 address itself, to a dual-stack socket
    carried = _carried(address)
    for ip in carried:
        if problem := _judged(ip):
            return f"{address} is {problem.replace(' is ', ', ', 1)}"
    if carried and not (isinstance(address, ipaddress.IPv6Address) and address.teredo):
        return ""
    return _judged(address)


def _judged(ip: IPAddress) -> str:
    always = _never_allowed(ip)
    if always:
        return f"{ip} is {always}"
    if getattr(settings, ALLOW_PRIVATE):
        return ""
    if ip.is_loopback:
        return f"{ip} is loopback, allowed only with {ALLOW_PRIVATE}=1"
    if not ip.is_global:
        return f"{ip} is private, allowed only with {ALLOW_PRIVATE}=1"
    return ""


NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))  # RFC 6052, RFC 8215
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated (RFC 4291), still routed by some stacks


def _carried(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a call to ``address`` reaches through a translator or a tunnel: a NAT64
    gateway (the last 32 bits), the IPv4-compatible form, a 6to4 relay, Teredo (its server and
    its client); none for any other address."""
    if address.version == 4:
        return []
    if any(address in network for network in NAT64) or (address in IPV4_COMPATIBLE and int(address) > 1):
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    if address.sixtofour:
        return [address.sixtofour]
    if address.teredo:
        return list(address.teredo)
    return []


def _never_allowed(ip: IPAddress) -> str:
    if ip in METADATA:
        return "the cloud metadata address"
    if ip.is_link_local:
        return "link-local"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if ip.version == 6 and ip.is_site_local:  # fec0::/10, deprecated (RFC 3879): private in all but name
        return "site-local (deprecated)"
    if ip.version == 4 and ip.is_reserved:  # 240.0.0.0/4 and the broadcast address
        return "reserved"
    return ""


def host_problem(host: str, addresses: list[IPAddress]) -> str:
    """Why a call to ``host``, which resolved to ``addresses``, is refused ("" when it is not)."""
    for address in addresses:
        if problem := judged(address):
            if _literal(host) is not None:
                return problem
            ip, _, why = problem.partition(" is ")
            return f"{host} resolves to {ip}, which is {why}"
    return ""


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to now (an address given as such, itself). ``socket.gaierror``
    when it resolves to none."""
    if (literal := _literal(host)) is not None:
        return [literal]
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    # sockaddr[0]: the address; an IPv6 one may carry a zone ("fe80::1%eth0"), which is kept.
    return list(dict.fromkeys(ipaddress.ip_address(sockaddr[0]) for *_, sockaddr in found))


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def destination_problem(base_url: str) -> str:
    """What the policy says of a destination's URL as it resolves now ("" when allowed): what a
    destination's configuration is refused for. A name that does not resolve now is taken (its
    calls are checked as they connect). ``base_url`` is one httpx reads, with a host."""
    url = httpx.URL(base_url)
    host = url.host
    try:
        addresses = resolve(host, url.port or (443 if url.scheme == "https" else 80))
    except (socket.gaierror, UnicodeError):
        return ""
    return host_problem(host, addresses)


# --- at each connection ----------------------------------------------------------------------------------


def allowed(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to now, when the policy allows each of them. ``EgressRefused``
    when it refuses one; ``socket.gaierror`` when ``host`` resolves to none."""
    try:
        addresses = resolve(host, port)
    except UnicodeError as exc:
        raise socket.gaierror(str(exc)) from exc
    if problem := host_problem(host, addresses):
        raise EgressRefused(f"refused by the egress policy: {problem} ({WHERE})")
    return addresses


class _GuardedBackend(httpcore.SyncBackend):
    """httpcore's network backend, opening a connection only to an address the policy allows: the
    host resolved once, every address checked, then connected to by address."""

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            addresses = allowed(host, port)
        except socket.gaierror as exc:
            raise httpcore.ConnectError(f"{host} does not resolve: {exc}") from exc
        failure: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(str(address), port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        raise failure or httpcore.ConnectError(f"{host}: no address to connect to")


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport, its connections opened through ``_GuardedBackend``. TLS still checks the
    certificate against the URL's host name (httpcore sends it as SNI), not against the address."""

    def __init__(self, *, ssl_context, limits: httpx.Limits):
        super().__init__(verify=ssl_context, limits=limits)
        # httpx builds its pool with the default backend and offers no argument for another one.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_GuardedBackend(),
        )


class ProxiedTransport(httpx.HTTPTransport):
    """httpx's transport through an HTTP proxy named in the environment (``HTTPS_PROXY``...). The
    proxy, not this process, connects to the destination, so the destination's host is checked
    here, on the addresses it resolves to now, before the request is handed to the proxy (a refused
    one never reaches it). The proxy's own address is the operator's choice and is not checked."""

    def __init__(self, *, proxy: str, ssl_context, limits: httpx.Limits):
        super().__init__(verify=ssl_context, limits=limits, proxy=proxy)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        try:
            allowed(url.host, url.port or (443 if url.scheme == "https" else 80))
        except socket.gaierror as exc:
            # Where the proxy would take it cannot be judged: not sent, as when it does not resolve directly.
            raise httpx.ConnectError(f"{url.host} does not resolve: {exc}", request=request) from exc
        return super().handle_request(request)
