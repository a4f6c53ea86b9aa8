"""Identity: bearer tokens checked against the hashes in the configuration, or
anonymous access where the configuration allows it (local demos only)."""

from __future__ import annotations

import hashlib
import hmac

import grpc

ANONYMOUS = "anonymous"


class Authenticator:
    def __init__(self, tokens: dict[str, str], allow_anonymous: bool) -> None:
        self.reload(tokens, allow_anonymous)

    def reload(self, tokens: dict[str, str], allow_anonymous: bool) -> None:
        # hash -> account; compared in constant time below.
        self._by_hash = {digest.removeprefix("sha256:"): account for account, digest in tokens.items()}
        self.allow_anonymous = allow_anonymous

    def account(self, context: grpc.ServicerContext) -> str:
        """The caller's account, or aborts the call with UNAUTHENTICATED."""
        account, refusal = self._resolve(context)
        if account is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)
            raise AssertionError("unreachable")
        return account

    def identify(self, context: grpc.ServicerContext) -> str | None:
        """The caller's account when its credentials are good, else None; never aborts
        (the stream limits count a stream before its handler authenticates it)."""
        return self._resolve(context)[0]

    def _resolve(self, context: grpc.ServicerContext) -> tuple[str | None, str]:
        header = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                header = value if isinstance(value, str) else value.decode(errors="replace")
                break
        if header:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token:
                return None, "the authorization metadata must be 'Bearer <token>'"
            digest = hashlib.sha256(token.strip().encode(errors="replace")).hexdigest()
            for known, account in self._by_hash.items():
                if hmac.compare_digest(known, digest):
                    return account, ""
            return None, "the bearer token is not known to this server"
        # Mutual TLS: the verified client certificate names the account.
        names = context.auth_context().get("x509_common_name") or []
        if names:
            name = names[0]
            return (name.decode(errors="replace") if isinstance(name, bytes) else name), ""
        if self.allow_anonymous:
            return ANONYMOUS, ""
        return None, "this server needs a bearer token in the authorization metadata"


def token_hash(token: str) -> str:
    """What goes into `[server.tokens]` for a token."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()
