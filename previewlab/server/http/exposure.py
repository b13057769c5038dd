"""Who the server is exposed to, by the same rules for `previewlab serve` and `serve(watch)`: loopback by
default; any other address only when allowed explicitly, and then with a token; a token, once given, always
required (a local reverse proxy makes a loopback server reachable from anywhere), and generated when a proxy is
trusted (one is then in front, forwarding anyone who reaches it); and a URL to print that the Guard built from
these rules accepts."""
from __future__ import annotations

import re
import secrets
from typing import Sequence

from previewlab.server.http.forwarded import ProxyError, trusted_proxies
from previewlab.server.http.guard import Access, is_loopback

WILDCARDS = ("0.0.0.0", "::")
TOKEN = re.compile(r"^[A-Za-z0-9._~-]{8,256}$")


class ExposureError(ValueError):
    """A host, token or name that the rules refuse; str() is the one line that says what would do."""


def access_for(host: str, *, allow_remote: bool = False, token: str | None = None,
               allow_hosts: Sequence[str] = (), forwarded_allow_ips: str | Sequence[str] | None = None,
               cli: bool = True) -> Access:
    """The Access for a server bound to `host`; cli: name the options as the command line spells them
    (--allow-remote), else as serve() does (allow_remote=True). forwarded_allow_ips: the proxies to trust
    (forwarded.py); None reads FORWARDED_ALLOW_IPS, as uvicorn does, and trusts nobody where it is unset.
    Raises ExposureError."""
    where, allow, tok, fwd = ((f"--host {host}", "--allow-remote", "--token", "--forwarded-allow-ips") if cli else
                              (f"host={host!r}", "allow_remote=True", "token=", "forwarded_allow_ips="))
    try:
        proxies = trusted_proxies(forwarded_allow_ips, fwd)
    except ProxyError as e:
        raise ExposureError(str(e)) from None
    if not is_loopback(host):
        if not allow_remote:
            raise ExposureError(f"{where} is beyond loopback: anyone who can reach it could drive the model; add "
                                f"{allow} to do it anyway (a token is then required)")
        token = token or secrets.token_urlsafe(18)
    if proxies:  # a proxy in front forwards whoever reaches it, however the server is bound
        token = token or secrets.token_urlsafe(18)
    if token is not None and not TOKEN.match(token):  # it travels in a URL and a cookie
        raise ExposureError(f"{tok}: 8 to 256 letters, digits and - _ . ~")
    return Access(hosts=allowed_hosts(host, allow_hosts), token=token, proxies=proxies)


def allowed_hosts(host: str, extra: Sequence[str]) -> tuple[str, ...]:
    """Host names the Guard accepts besides loopback: --allow-host and a specific bind address. A wildcard
    bind is not a name anyone can use in a URL, so it adds nothing."""
    return tuple(extra) + (() if host in WILDCARDS else (host,))


def page_url(host: str, port: int, token: str | None, extra: Sequence[str]) -> tuple[str, str]:
    """The URL to print, one that the Guard built from allowed_hosts() accepts, and a note ("" if none).
    Bound to every address, it names the first --allow-host, or else loopback with a note on what other
    machines need."""
    note = ""
    name = host
    if host in WILDCARDS:
        name = extra[0] if extra else ("::1" if host == "::" else "127.0.0.1")
        if not extra:
            note = (f"bound to every address ({host}): this URL works on this machine; other machines need this "
                    "machine's name or address given with --allow-host NAME, then http://NAME:PORT/?token=...")
    shown = f"[{name}]" if ":" in name else name
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else ""), note
