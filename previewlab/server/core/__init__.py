"""What every room of the server shares and that imports nothing of the server: its limits (limits.py) and its
Prometheus metrics (metrics.py). The rooms above it: data, http, ws, then the server's own modules."""
