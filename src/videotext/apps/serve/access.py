"""Who may ask: on loopback the service is open; served on any other address it needs a token, which
every request but the page and its static files sends as `Authorization: Bearer TOKEN`. Tokens are
compared in constant time (their SHA-256 digests, so not even the length leaks)."""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from videotext.errors import VideoTextError


def is_loopback(host: str) -> bool:
    """True for addresses only this machine reaches: 127.0.0.0/8, ::1 and "localhost"."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def require_token_for(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a token: one error saying how to give one."""
    if not is_loopback(host) and not token:
        raise VideoTextError(f"--host {host} serves every indexed video and title to anyone who can reach the port: "
                             "pass --token TOKEN (or set VIDEOTEXT_TOKEN); requests must then send "
                             "'Authorization: Bearer TOKEN' (the page asks for it once)")


def check_token(token: str | None) -> None:
    """One error for an empty token, saying how to make a good one."""
    if token is not None and not token.strip():
        raise VideoTextError("the access token is empty; choose a long random one (e.g. python -c "
                             "'import secrets; print(secrets.token_urlsafe(24))')")


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def token_matches(header: str | None, token: str) -> bool:
    """Whether an Authorization header carries `Bearer token` (compared in constant time)."""
    scheme, _, given = (header or "").strip().partition(" ")
    bearer = scheme.lower() == "bearer"
    same = hmac.compare_digest(_digest(given.strip() if bearer else ""), _digest(token))
    return bearer and same


class TokenGate:
    """The middleware that answers 401 to a request without the token (the page and its files pass)."""

    def __init__(self, token: str):
        self.token = token

    async def __call__(self, request: Request, call_next: Any) -> Response:
        path = request.url.path
        if path == "/" or path.startswith("/static/") or token_matches(request.headers.get("authorization"), self.token):
            return await call_next(request)
        return JSONResponse({"detail": "this server needs its access token: send 'Authorization: Bearer TOKEN'"},
                            status_code=401, headers={"WWW-Authenticate": "Bearer"})
