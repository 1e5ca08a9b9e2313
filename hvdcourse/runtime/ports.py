"""TCP ports of this machine: whether one is free (the local Slurm cluster, Prometheus, the ranks' metrics)."""

import socket


def port_free(port: int) -> bool:
    """Whether nothing listens on TCP ``port`` of this machine now."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True
