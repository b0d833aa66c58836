"""The one way Macaron builds a gRPC server: it owns its port alone.

gRPC turns SO_REUSEPORT on by default, so a second server started on a port another process already
serves binds without an error, and the kernel then splits new connections between the two. A router or
specialist started twice on one port (a stale process, a copied config, two ports picked alike) would
answer a share of requests from the wrong process (another specialist refuses them as forced elsewhere)
instead of failing to start. With the option off, the second bind fails with "address already in use",
so the clash is seen at start, where it can be fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

EXCLUSIVE_PORT_OPTIONS: tuple[tuple[str, int], ...] = (("grpc.so_reuseport", 0),)


def exclusive_server(interceptors: Sequence[Any] = ()) -> grpc.aio.Server:
    """A grpc.aio server whose bind fails when the port is taken, rather than sharing it."""
    return grpc.aio.server(interceptors=list(interceptors), options=list(EXCLUSIVE_PORT_OPTIONS))
