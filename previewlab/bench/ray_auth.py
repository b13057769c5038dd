"""Ray's token authentication, as `previewlab bench --ray` joins a cluster. Ray 2.60's `ray start --head` turns
it on; ray.init(HOST:PORT) and Ray Client send the token only where RAY_AUTH_MODE=token, which Ray reads when it
is imported. So it is set before Ray is imported, wherever this machine has a token and the mode is not set: a
cluster without authentication takes such a connection too (checked with Ray 2.60.0 on 2026-12-05)."""
from __future__ import annotations

import os
from pathlib import Path


def token_here() -> bool:
    """A token Ray would send: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token."""
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                or (Path.home() / ".ray" / "auth_token").is_file())


def adopt(address: str) -> None:
    """Before Ray is imported: token mode for a cluster joined by address, where a token is here. `local`
    starts its own cluster, which makes its own token."""
    if address != "local" and token_here():
        os.environ.setdefault("RAY_AUTH_MODE", "token")
