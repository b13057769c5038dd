"""The WebSocket: the protocol, each client's session, and where a byte leaves the server."""
