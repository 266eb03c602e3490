"""Who may use the inspector: the gateway's Bearer key, carried by a browser
as a session cookie, and CSRF tokens bound to that session.

The cookie holds a random nonce and its HMAC under the key, so the server
keeps no session table and changing the key logs every browser out. Without
a key (a loopback gateway) every visitor gets a session at once; the CSRF
token then guards against other websites driving the forms.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

COOKIE = "memstore_ui"
CSRF_FIELD = "csrf_token"


def token_matches(given: str, expected: str) -> bool:
    """Constant-time comparison (no early exit on the first differing byte)."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


class Sessions:
    def __init__(self, api_key: str | None) -> None:
        self.api_key = api_key
        # No key: a secret of this process (sessions end with it).
        self._secret = (api_key or secrets.token_hex(32)).encode("utf-8")

    @property
    def needs_login(self) -> bool:
        return self.api_key is not None

    def _sign(self, purpose: str, nonce: str) -> str:
        msg = f"{purpose}:{nonce}".encode()
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()

    def new_cookie(self) -> str:
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{self._sign('session', nonce)}"

    def nonce_of(self, cookie: str | None) -> str | None:
        """The session's nonce when the cookie is genuine, else None."""
        if not cookie or "." not in cookie:
            return None
        nonce, sig = cookie.rsplit(".", 1)
        return nonce if token_matches(sig, self._sign("session", nonce)) else None

    def key_matches(self, given: str) -> bool:
        return self.api_key is not None and token_matches(given, self.api_key)

    def bearer_ok(self, header: str | None) -> bool:
        if self.api_key is None or not header or not header.startswith("Bearer "):
            return False
        return token_matches(header[len("Bearer ") :].strip(), self.api_key)

    def csrf_token(self, nonce: str) -> str:
        return self._sign("csrf", nonce)

    def csrf_ok(self, nonce: str, given: str | None) -> bool:
        return bool(given) and token_matches(str(given), self.csrf_token(nonce))


__all__ = ["COOKIE", "CSRF_FIELD", "Sessions"]
