"""TCP ports of this machine: whether one is free, or any free one of 127.0.0.1 (the local Slurm cluster,
Prometheus, the ranks' metrics, the Slurm lesson's sshd)."""

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


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now (the system picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
