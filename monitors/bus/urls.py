"""Bus URLs: parsed once, checked fully, so a typo in a node config fails at start with the URL
and the accepted forms in the message rather than as a socket error later."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

ACCEPTED = (
    "memory://[name], redis://[[user]:password@]host[:port][/db] or "
    "amqp://[user:password@]host[:port][/vhost] (vhost URL-encoded: %2F is '/')"
)


@dataclass(frozen=True)
class BusURL:
    """A parsed bus URL. `name` is the memory:// namespace; `vhost` the AMQP virtual host."""

    scheme: str
    host: str = ""
    port: int = 0
    db: int = 0
    username: str | None = None
    password: str | None = None
    vhost: str = "/"
    name: str = ""

    def redacted(self) -> str:
        """The URL without its password, for logs and errors."""
        if self.scheme == "memory":
            return f"memory://{self.name}"
        user = f"{self.username or ''}:***@" if self.password is not None else ""
        if self.scheme == "redis":
            return f"redis://{user}{self.host}:{self.port}/{self.db}"
        vhost = urllib.parse.quote(self.vhost, safe="")
        return f"amqp://{user}{self.host}:{self.port}/{vhost}"


def _bad(url: str, why: str) -> ValueError:
    return ValueError(f"bad bus URL {url!r}: {why}; accepted forms: {ACCEPTED}")


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
    if parts.query or parts.fragment:
        raise _bad(shown, "query strings and fragments are not supported")
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
            port or 5672,
            username=username or "guest",
            password=password if password is not None else "guest",
            vhost=vhost,
        )
    raise _bad(shown, f"unknown scheme {parts.scheme!r}" if parts.scheme else "no scheme")
