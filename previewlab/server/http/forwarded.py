"""Which peers may say who their client is: reverse proxies the user names, by uvicorn's forwarded-allow-ips
convention (`--forwarded-allow-ips 127.0.0.1,10.0.0.0/8`, or FORWARDED_ALLOW_IPS); nobody by default.

A reverse proxy opens previewlab's connections for every client it serves, so behind one every client has the
proxy's address, and shares its per-address limits. A proxy named here is trusted to name its client in
X-Forwarded-For (and its scheme in X-Forwarded-Proto); from any other peer both headers are ignored, so no
client can pick the address its limits are counted against. uvicorn's own middleware trusted 127.0.0.1 by
default, so any loopback client could; previewlab turns it off and applies this one rule instead, in the ASGI
scope (RealClient) and in the HTTP protocol's connection count (http11.py).
"""
from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass
from typing import Sequence, TypeVar, Union

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("previewlab.server")
ENV = "FORWARDED_ALLOW_IPS"
Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
OneVersion = TypeVar("OneVersion", ipaddress.IPv4Network, ipaddress.IPv6Network)
SCHEMES = {"http": ("http", "ws"), "https": ("https", "wss"), "ws": ("http", "ws"), "wss": ("https", "wss")}


class ProxyError(ValueError):
    """A proxy address that cannot be trusted as given; str() is the one line saying what would do."""


def _address(text: str) -> Address | None:
    """An X-Forwarded-For entry as an address: '10.0.0.5', '10.0.0.5:4711', '[::1]:4711' or '::1'; None if it
    names none (RFC 7239's 'unknown' and obfuscated names, or junk)."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.split(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class TrustedProxies:
    """The networks whose peers are believed when they name their client, and where they were named (the flag,
    the environment variable or the keyword), for the lines that quote them. Empty: nobody is."""
    networks: tuple[Network, ...] = ()
    named_by: str = ""

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, host: str | Address | None) -> bool:
        ip = _address(host) if isinstance(host, str) else host
        if ip is None:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # a dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d
        return any(ip in net for net in self.networks)

    def client(self, peer: str, forwarded_for: Sequence[str]) -> str:
        """The client's address: `peer`'s own, unless the peer is trusted and its X-Forwarded-For values name
        one. Each proxy appends the peer it saw, so the list is read from its end: a trusted proxy's entry is
        believed, and the entry before it is believed only if that one is a trusted proxy too. The first
        untrusted address so reached is the client; an entry that names no address stops the walk there."""
        current = peer
        entries = [e for value in forwarded_for for e in value.split(",")]
        for entry in reversed(entries):
            if not self.trusts(current):
                break
            ip = _address(entry)
            if ip is None:
                break
            current = ip.compressed
        return current

    def describe(self) -> str:
        return ",".join(str(n.network_address) if n.num_addresses == 1 else str(n) for n in self.networks)


NOBODY = TrustedProxies()


def parse(text: str, named_by: str) -> TrustedProxies:
    """'127.0.0.1,10.0.0.0/8,::1' (uvicorn's forwarded-allow-ips form) as TrustedProxies; '' trusts nobody.
    Raises ProxyError naming the entry and what is allowed: '*' and every other spelling of all addresses
    (0.0.0.0/0, ::/0, networks that together hold them all) are refused alike."""
    networks: list[Network] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        if entry == "*":
            raise _everyone(named_by, entry)
        try:
            net = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ProxyError(f"{named_by} {entry[:60]!r}: not an IP address or network; give the addresses or "
                             "networks of the proxies, comma-separated (127.0.0.1,10.0.0.0/8)") from None
        if net.prefixlen == 0:  # 0.0.0.0/0, ::/0, 0.0.0.0/0.0.0.0, ::0/0: every address, as '*'
            raise _everyone(named_by, entry)
        networks.append(net)
    v4 = [n for n in networks if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in networks if isinstance(n, ipaddress.IPv6Network)]
    if _whole(v4) or _whole(v6):  # networks that together hold every address (0.0.0.0/1,128.0.0.0/1): '*' too
        raise _everyone(named_by, text.strip())
    return TrustedProxies(tuple(networks), named_by if networks else "")


def _whole(networks: Sequence[OneVersion]) -> bool:
    """Networks of one IP version that, merged, hold every address of it."""
    return any(n.prefixlen == 0 for n in ipaddress.collapse_addresses(networks))


def _everyone(named_by: str, entry: str) -> ProxyError:
    """'*', or any network (or set of them) that holds every address: every client could name its own address."""
    shown = "'*'" if entry == "*" else f"{entry[:60]!r} (every address, as '*')"
    return ProxyError(f"{named_by} {shown}: it would let every client name its own address; give the addresses "
                      "or networks of the proxies, comma-separated (127.0.0.1,10.0.0.0/8)")


def trusted_proxies(given: str | Sequence[str] | None, named_by: str) -> TrustedProxies:
    """What `given` names (a string as the flag takes it, or a list of entries); None: the environment's
    FORWARDED_ALLOW_IPS as uvicorn reads it, or nobody when it is unset. Raises ProxyError."""
    if given is None:
        env = os.environ.get(ENV)
        return parse(env, ENV) if env is not None else NOBODY
    return parse(given if isinstance(given, str) else ",".join(given), named_by)


class RealClient:
    """ASGI middleware: a request from a trusted proxy gets its client's address (X-Forwarded-For) and
    scheme (X-Forwarded-Proto) in its scope; from any other peer the headers change nothing. The first header
    ignored is logged once, since a proxy the user forgot to name shares one address among its clients."""

    def __init__(self, app: ASGIApp, proxies: TrustedProxies) -> None:
        self.app, self.proxies = app, proxies
        self._told = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("client"):
            peer = scope["client"][0]
            forwarded = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"x-forwarded-for"]
            if not self.proxies.trusts(peer):
                if forwarded and not self._told:
                    self._told = True
                    log.info("ignored X-Forwarded-For from %s, not a trusted proxy (--forwarded-allow-ips names "
                             "the proxies to trust)", peer)
            else:
                scope = dict(scope)
                if forwarded:
                    scope["client"] = (self.proxies.client(peer, forwarded), 0)
                proto = [v.decode("latin-1").strip().lower() for k, v in scope.get("headers", [])
                         if k == b"x-forwarded-proto"]
                if proto and proto[-1] in SCHEMES:
                    scope["scheme"] = SCHEMES[proto[-1]][scope["type"] == "websocket"]
        await self.app(scope, receive, send)
