"""Network addresses as the service and its clients write them (`host:port`,
`[v6]:port`, `localhost:port`)."""

from __future__ import annotations

import ipaddress


def is_loopback(address: str) -> bool:
    """Whether `address` (with or without its port) stays on this machine."""
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 or address.startswith("[") else address
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
