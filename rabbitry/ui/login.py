"""Logging in to the management page: one-time login tokens and browser sessions.

`rabbitry cluster ui` (which holds the cookie) asks the control API for a login token; the
token goes into a URL the person opens once. The page trades it for a session id in an
HttpOnly, SameSite=Strict cookie, and the URL the browser then shows carries nothing secret.
A token works once and for TOKEN_TTL seconds, as Jupyter's; a session lasts SESSION_TTL.
Both live in memory: restarting the control API logs everyone out.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

TOKEN_TTL = 60.0
SESSION_TTL = 8 * 3600.0
MAX_TOKENS = 100  # outstanding tokens kept; the oldest go first
MAX_SESSIONS = 100


class Logins:
    """Tokens and sessions, thread-safe (the HTTP server's threads share one)."""

    def __init__(
        self,
        token_ttl: float = TOKEN_TTL,
        session_ttl: float = SESSION_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.token_ttl = token_ttl
        self.session_ttl = session_ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: OrderedDict[str, float] = OrderedDict()  # token -> expiry
        self._sessions: OrderedDict[str, float] = OrderedDict()  # session id -> expiry

    def new_token(self, ttl: float | None = None) -> str:
        """A token that logs in once within `ttl` seconds (default: token_ttl)."""
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = self._clock() + (self.token_ttl if ttl is None else ttl)
            while len(self._tokens) > MAX_TOKENS:
                self._tokens.popitem(last=False)
        return token

    def redeem(self, token: str) -> str | None:
        """A new session id for a valid token, which is used up; None if the token is
        unknown, expired or already used."""
        now = self._clock()
        with self._lock:
            match = next((t for t in self._tokens if hmac.compare_digest(t, token)), None)
            if match is None:
                return None
            expiry = self._tokens.pop(match)
            if expiry < now:
                return None
            session = secrets.token_urlsafe(32)
            self._sessions[session] = now + self.session_ttl
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
            return session

    def valid(self, session: str | None) -> bool:
        if not session:
            return False
        now = self._clock()
        with self._lock:
            match = next((s for s in self._sessions if hmac.compare_digest(s, session)), None)
            if match is None:
                return False
            if self._sessions[match] < now:
                del self._sessions[match]
                return False
            return True

    def end(self, session: str | None) -> None:
        with self._lock:
            if session:
                self._sessions.pop(session, None)
