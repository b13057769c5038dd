"""HTTP: what wraps the routes, the exports, the transports."""
