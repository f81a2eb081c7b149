"""Probes of the local machine the dev servers need: free TCP ports and live processes."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

__all__ = ["free_port", "pid_alive", "tcp_port_free"]


def free_port(ip: str) -> int:
    """A TCP port on ``ip`` that nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((ip, 0))
        port: int = sock.getsockname()[1]
        return port


def tcp_port_free(port: int, ip: str = "127.0.0.1") -> bool:
    """True when ``ip:port`` can be bound right now (for a preferred, well-known port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((ip, port))
        except OSError:
            return False
        return True


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a killed daemon nobody has reaped yet is a zombie: gone, though kill(0) still finds it
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True
