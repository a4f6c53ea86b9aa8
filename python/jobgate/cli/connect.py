"""How every client command reaches a running service: `--server`, `--token` (or
`JOBGATE_TOKEN`), `--ca` for TLS, `--cert`/`--key` for mutual TLS. One place, so
`submit`, `jobs --server` and `bench` connect alike, and a bearer token about to cross
the network in plaintext is said out loud."""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jobgate.addresses import is_loopback
from jobgate.cli.usage import UsageError

if TYPE_CHECKING:
    import grpc


def add_options(p: argparse.ArgumentParser, *, server_default: str | None = "127.0.0.1:50051") -> None:
    """--server, --token, --ca, --cert, --key, --timeout."""
    if server_default is not None:
        p.add_argument("--server", metavar="ADDR", default=server_default, help=f"the service (default: {server_default})")
    p.add_argument("--token", metavar="TOKEN", default=os.environ.get("JOBGATE_TOKEN"), help="bearer token (default: $JOBGATE_TOKEN)")
    p.add_argument("--ca", metavar="FILE", help="TLS: the CA that signed the server's certificate")
    p.add_argument("--cert", metavar="FILE", help="mutual TLS: this client's certificate")
    p.add_argument("--key", metavar="FILE", help="mutual TLS: this client's private key")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="the deadline of each call (default: 30)")


def channel_for(args: argparse.Namespace, options: list[tuple[str, object]] | None = None) -> grpc.Channel:
    """A channel to `args.server`: TLS when --ca is given, with a client certificate for
    mutual TLS. Warns on stderr when a token would travel in plaintext off loopback."""
    return channels_for(args, 1, options)[0]


def channels_for(args: argparse.Namespace, count: int, options: list[tuple[str, object]] | None = None) -> list[grpc.Channel]:
    """`count` channels as `channel_for` makes one, each on a TCP connection of its
    own: gRPC carries channels with the same target and arguments on one connection,
    and `serve --workers N` gives a connection, with every call on it, to one worker."""
    # Imported here: grpc comes with the server extra, and a command without it
    # must still start to say which extra to install (cli.missing_extra).
    import grpc

    if bool(args.cert) != bool(args.key):
        raise UsageError("--cert and --key go together (mutual TLS)")
    if (args.cert or args.key) and not args.ca:
        raise UsageError("--cert and --key need --ca: mutual TLS is TLS first")
    if count > 1:
        options = [*(options or []), ("grpc.use_local_subchannel_pool", 1)]
    if not args.ca:
        if getattr(args, "token", None) and not is_loopback(args.server):
            print(f"jobgate: warning: the token is sent to {args.server} in plaintext; give --ca to use TLS", file=sys.stderr)
        return [grpc.insecure_channel(args.server, options=options) for _ in range(count)]
    try:
        read = lambda p: Path(p).read_bytes() if p else None  # noqa: E731
        credentials = grpc.ssl_channel_credentials(read(args.ca), read(args.key), read(args.cert))
    except OSError as e:
        raise UsageError(f"cannot read {e.filename}: {e.strerror}") from None
    return [grpc.secure_channel(args.server, credentials, options=options) for _ in range(count)]


def unavailable_hint(args: argparse.Namespace, code: str) -> str:
    """What to add to a call's UNAVAILABLE when the cause is plain to see: a server
    that speaks TLS, reached without --ca (gRPC says only "Socket closed"). "" when
    there is nothing to add."""
    if code != "UNAVAILABLE" or args.ca or not speaks_tls(args.server):
        return ""
    return f"; {args.server} speaks TLS: give --ca FILE, the CA that signed its certificate (and --cert and --key where it asks for a client certificate)"


def speaks_tls(server: str, timeout: float = 3.0) -> bool:
    """Whether a TLS handshake with `server` (HOST:PORT) gets a TLS answer: completed,
    or refused with a TLS alert (a server that wants a client certificate). Its
    certificate is not checked: this only tells TLS from plaintext, nothing is sent."""
    host, _, port = server.rpartition(":")
    if not port.isdigit() or not host:
        return False  # a target gRPC resolves itself (dns:///…, unix:…): not guessed at
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw, context.wrap_socket(raw, server_hostname=host.strip("[]")):
            return True
    except ssl.SSLError as e:
        return "ALERT" in (e.reason or "").upper()
    except (OSError, ValueError):
        return False


def metadata(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The call metadata that carries the token, if any."""
    return [("authorization", f"Bearer {args.token}")] if getattr(args, "token", None) else []
