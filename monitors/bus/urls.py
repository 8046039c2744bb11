"""Bus URLs: parsed once, checked fully, so a typo in a node config fails at start with the URL
and the accepted forms in the message rather than as a socket error later."""

from __future__ import annotations

import ssl
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

ACCEPTED = (
    "memory://[name], redis://[[user]:password@]host[:port][/db] or "
    "amqp://[user:password@]host[:port][/vhost] (vhost URL-encoded: %2F is '/'); "
    "rediss:// and amqps:// for TLS, with ?cafile=..&certfile=..&keyfile=.."
)
# The query parameters a TLS URL takes: the CA to check the broker with (default: the system's)
# and a client certificate and key, for a broker that asks for one.
TLS_PARAMS = ("cafile", "certfile", "keyfile")


@dataclass(frozen=True)
class BusURL:
    """A parsed bus URL. `name` is the memory:// namespace; `vhost` the AMQP virtual host."""

    scheme: str
    host: str = ""
    port: int = 0
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    vhost: str = "/"
    name: str = ""
    tls: bool = False  # rediss:// or amqps://
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    def redacted(self) -> str:
        """The URL without its password, for logs and errors."""
        if self.scheme == "memory":
            return f"memory://{self.name}"
        user = f"{self.username or ''}:***@" if self.password is not None else ""
        scheme = self.scheme + ("s" if self.tls else "")
        query = urllib.parse.urlencode(
            [(k, getattr(self, k)) for k in TLS_PARAMS if getattr(self, k) is not None]
        )
        query = f"?{query}" if query else ""
        if self.scheme == "redis":
            return f"{scheme}://{user}{self.host}:{self.port}/{self.db}{query}"
        vhost = urllib.parse.quote(self.vhost, safe="")
        return f"{scheme}://{user}{self.host}:{self.port}/{vhost}{query}"

    def ssl_context(self) -> ssl.SSLContext:
        """The client context for a TLS URL: the broker's certificate checked against
        `cafile` (or the system's CAs) and its host name; our certificate if given."""
        ctx = ssl.create_default_context(cafile=self.cafile)
        if self.certfile is not None:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        return ctx


def redact_url(url: str) -> str:
    """`url` with the password of its user part replaced by ***, for any text (even one
    that does not parse): errors quote the URL, and must not print its secret."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = min(
        (i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest)
    )
    netloc, tail = rest[:end], rest[end:]
    userinfo, at, host = netloc.rpartition("@")
    if not at:
        return url
    user, colon, _password = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}{tail}"


def _bad(url: str, why: str) -> ValueError:
    return ValueError(f"bad bus URL {redact_url(url)!r}: {why}; accepted forms: {ACCEPTED}")


def _tls_params(url: str, query: str) -> dict[str, Any]:
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise _bad(url, f"bad query string ({exc})") from None
    files: dict[str, Any] = {}
    for key, value in pairs:
        if key not in TLS_PARAMS or key in files or not value:
            raise _bad(
                url, f"a TLS URL takes each of {', '.join(TLS_PARAMS)} once, as a path; got {key!r}"
            )
        files[key] = value
    if ("certfile" in files) != ("keyfile" in files):
        raise _bad(url, "certfile and keyfile go together")
    return files


def parse_bus_url(url: str) -> BusURL:
    """Parse a bus URL or raise ValueError naming it and the accepted forms."""
    if not isinstance(url, str):
        raise TypeError(f"a bus URL must be a str, not {type(url).__name__}")
    shown = url
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _bad(shown, str(exc)) from None
    scheme = parts.scheme.lower()
    if "://" not in url:
        raise _bad(shown, "no scheme")
    tls = scheme in ("rediss", "amqps")
    if tls:
        scheme = scheme[:-1]
    if parts.fragment or (parts.query and not tls):
        raise _bad(shown, "query strings (but a TLS URL's) and fragments are not supported")
    files = _tls_params(shown, parts.query)
    username = urllib.parse.unquote(parts.username) if parts.username else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    if scheme == "memory":
        if parts.path not in ("", "/") or username or password or port:
            raise _bad(shown, "memory:// takes only a name")
        return BusURL("memory", name=parts.hostname or "")
    if scheme == "redis":
        if not parts.hostname:
            raise _bad(shown, "no host")
        path = parts.path.strip("/")
        if path and not path.isdigit():
            raise _bad(shown, f"the database must be a number, not {path!r}")
        return BusURL(
            "redis",
            parts.hostname,
            port or 6379,
            int(path or 0),
            username=username or None,
            password=password,
            tls=tls,
            **files,
        )
    if scheme == "amqp":
        if not parts.hostname:
            raise _bad(shown, "no host")
        raw = parts.path[1:] if parts.path.startswith("/") else parts.path
        if "/" in raw:
            raise _bad(shown, "the vhost must be URL-encoded (write %2F for '/')")
        vhost = urllib.parse.unquote(raw) if raw else "/"
        return BusURL(
            "amqp",
            parts.hostname,
            port or (5671 if tls else 5672),
            username=username or "guest",
            password=password if password is not None else "guest",
            vhost=vhost,
            tls=tls,
            **files,
        )

    raise _bad(shown, f"unknown scheme {parts.scheme!r}" if parts.scheme else "no scheme")
