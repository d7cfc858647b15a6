"""Send one HTTP POST to a hook URL without letting it reach the app's own network, or one e-mail; tell
failures that a retry may mend from those it cannot (PermanentError).

Every address a host name resolves to must be public (not loopback, private, link-local, CGNAT,
multicast, reserved or unspecified, nor an IPv6 address that wraps such an IPv4 address: 6to4, Teredo,
NAT64, IPv4-compatible or -mapped) unless `allow_private` is set; the check happens before any
connection, the connection goes to the address that was checked (no second lookup to rebind), and
redirects are followed by hand (at most 3), each target checked the same way.
"""
from __future__ import annotations

import http.client
import ipaddress
import smtplib
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from django.core.mail import BadHeaderError, send_mail

MAX_REDIRECTS = 3
TIMEOUT_S = 10.0


class PermanentError(Exception):
    """Sending failed in a way no retry can mend: the hook or the message itself is wrong."""


class UnsafeURL(PermanentError, ValueError):
    """The URL is malformed or points at an address hooks may not reach."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str
    address: str  # the checked IP the connection goes to


# IPv6 prefixes that carry an IPv4 address a relay or translator would deliver to (RFC 6052, 8215, 4291).
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # local use: where the IPv4 address sits varies
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address wraps: IPv4-mapped, 6to4, Teredo (server and client), NAT64 and
    IPv4-compatible addresses reach them through a relay, a translator or the host's own stack."""
    out = [a for a in (ip.ipv4_mapped, ip.sixtofour) if a is not None]
    out += list(ip.teredo or ())
    if ip in _NAT64 or ip in _IPV4_COMPATIBLE:
        out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return out


def _blocked(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return _blocked(ip.ipv4_mapped)
        if ip in _NAT64_LOCAL or any(_blocked(v4) for v4 in embedded_ipv4(ip)):
            return True
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_reserved
            or ip.is_unspecified or ip in ipaddress.ip_network("100.64.0.0/10") or not ip.is_global)


def resolve(url: str, *, allow_private: bool = False) -> Target:
    """Parse and resolve `url`; raise UnsafeURL when it is not http(s) or any address is refused."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeURL("Hook URLs must be http:// or https:// with a host name.")
    if parts.username or parts.password:
        raise UnsafeURL("Put credentials in the path or the secret, not user:password@ in the URL.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UnsafeURL("The URL's port is not a number.") from None
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise UnsafeURL(f"The host {parts.hostname!r} does not resolve.") from None
    addresses = sorted({info[4][0] for info in infos})
    if not allow_private:
        bad = [a for a in addresses if _blocked(ipaddress.ip_address(a.split("%")[0]))]
        if bad:
            raise UnsafeURL(f"The host {parts.hostname!r} resolves to a loopback, private or link-local address; "
                            "hooks may only reach public addresses (the site setting NOTIFY_ALLOW_PRIVATE_HOSTS "
                            "allows others).")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, path, addresses[0])


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout, context=ssl.create_default_context())
        self._address = target.address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post(url: str, body: bytes, headers: dict[str, str], *, allow_private: bool = False,
         timeout: float = TIMEOUT_S) -> int:
    """POST `body`; return the final HTTP status. Raises UnsafeURL or OSError / http.client errors."""
    for _ in range(MAX_REDIRECTS + 1):
        target = resolve(url, allow_private=allow_private)
        if target.scheme == "https":
            conn: http.client.HTTPConnection = _PinnedHTTPS(target, timeout)
        else:
            conn = http.client.HTTPConnection(target.address, target.port, timeout=timeout)
        try:
            conn.request("POST", target.path, body=body,
                         headers={"Host": target.host if target.port in (80, 443) else f"{target.host}:{target.port}",
                                  **headers})
            resp = conn.getresponse()
            resp.read(65536)
            location = resp.getheader("Location")
            if resp.status in (301, 302, 303, 307, 308) and location:
                url = urljoin(url, location)
                continue
            return resp.status
        finally:
            conn.close()
    raise UnsafeURL(f"More than {MAX_REDIRECTS} redirects.")


def redact(url: str) -> str:
    """The URL as shown back: scheme and host only (paths and queries of hook URLs often hold tokens)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return "…"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/…"


def send_email(subject: str, body: str, from_email: str, to: list[str]) -> None:
    """Send one e-mail through Django's backend. Raises PermanentError for what retrying cannot fix (a header
    with a line break, an address or sender the server refuses with a 5xx code), the backend's error otherwise."""
    try:
        send_mail(subject, body, from_email, to)
    except BadHeaderError as exc:
        raise PermanentError(f"The message cannot be built: {exc}") from exc
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        if codes and all(500 <= code < 600 for code in codes):
            raise PermanentError(f"The mail server refused every address: {exc.recipients}") from exc
        raise
    except smtplib.SMTPNotSupportedError as exc:
        raise PermanentError(f"The mail server does not support this: {exc}") from exc
    except smtplib.SMTPResponseException as exc:  # sender refused, data refused, authentication failed...
        if 500 <= exc.smtp_code < 600:
            raise PermanentError(f"The mail server refused the message ({exc.smtp_code}): {exc.smtp_error!r}") from exc
        raise
