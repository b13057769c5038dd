"""Dropping a peer: an abort that also drops what the kernel still holds for it.

transport.abort() closes the socket at once, but a socket closed with unsent data stays in FIN-WAIT-1 with
its send queue (2.8 MB was seen for a peer that stopped reading), for as long as the peer keeps its window
shut. SO_LINGER 0 makes the close a reset: the kernel frees the queue with it.
"""
from __future__ import annotations

import socket
import struct
from typing import Any

RESET = struct.pack("ii", 1, 0)  # l_onoff=1, l_linger=0


def reset(transport: Any) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
        except OSError:
            pass  # already gone: the abort below is all there is to do
    transport.abort()
