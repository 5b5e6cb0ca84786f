"""Whether this process listens beyond loopback, for the warning an unguarded WSGI/ASGI app owes.

`hooks serve` refuses a non-loopback host without `--token-env`; under gunicorn or uvicorn
the app does not choose where it listens, so it looks: `listening()` reads the TCP sockets
this process listens on from /proc (Linux; elsewhere it finds none), and `warn_if_open`
writes one line to stderr when one is bound beyond loopback and no token variable is named.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path


def listening() -> list[str]:
    """`host:port` of every TCP socket this process listens on ([] when it cannot tell)."""
    try:
        inodes = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return []
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        try:
            lines = Path(f"/proc/self/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                address, _, port = cols[1].partition(":")
                if len(address) == width:
                    found.append(f"{_address(address)}:{int(port, 16)}")
    return found


def _address(hexed: str) -> str:
    """/proc/net/tcp's address: 32-bit words in host (little-endian) order."""
    raw = b"".join(bytes.fromhex(hexed[i:i + 8])[::-1] for i in range(0, len(hexed), 8))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return f"[{ip}]" if ip.version == 6 else str(ip)


def beyond_loopback(addresses: list[str]) -> list[str]:
    """The addresses of `addresses` that are not loopback (0.0.0.0 and :: are not)."""
    out = []
    for address in addresses:
        host = address.rsplit(":", 1)[0].strip("[]")
        if not ipaddress.ip_address(host).is_loopback:
            out.append(address)
    return out


def warn_if_open(token_variable: str, listeners: list[str] | None = None) -> bool:
    """Warn once on stderr when this process listens beyond loopback and no token guards
    it; True when the question is settled (a token is named, or listeners were found),
    False when no listener exists yet (ask again once serving)."""
    if token_variable:
        return True
    found = listening() if listeners is None else listeners
    if not found:
        return False
    wide = beyond_loopback(found)
    if wide:
        print(f"the-loop: WARNING: serving hooks on {', '.join(wide)} with no bearer token: "
              "anyone who reaches the port can change your decisions; set "
              "THE_LOOP_HOOK_TOKEN_ENV to the name of a variable holding a token, or bind "
              "127.0.0.1", file=sys.stderr, flush=True)
    return True
