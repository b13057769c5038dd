"""previewlab: what live previews cost a diffusers run, stage by stage, and how to make them cheap.

The public API for your own scripts is this module's:

    from previewlab import watch, serve
    w = watch(pipe)                       # a drop-in step-end callback that measures the pipeline's previews
    serve(w, port=8000)                   # optional: the live page for it
    pipe(prompt, callback_on_step_end=w)

The package holds the measuring core (`previewlab.preview`), the page and its WebSocket (`previewlab.server`),
the bench (`previewlab.bench`: sweeps, reports, the GPU check, the demo model's training) and the page's files
(`previewlab/web`). Importing this module loads neither torch nor the
server: `watch` and `serve` import what they need when they are called.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from previewlab.preview.call.callback import Watch
    from previewlab.server.embedded import Embedded


def watch(pipe: Any, **kw: Any) -> "Watch":
    """A diffusers step-end callback that measures `pipe`'s previews (keywords: previewlab.preview.call.callback.Watch).
    To see them live: `serve(watch(pipe))`."""
    from previewlab.preview.call.callback import Watch

    if "serve" in kw:
        raise TypeError("watch(serve=...) is gone: make the watch, then `from previewlab import serve; "
                        "serve(watch, port=8000)`")
    return Watch(pipe, **kw)


def serve(w: "Watch", *, host: str = "127.0.0.1", port: int = 8000, data_dir: str | Path = Path("runs"),
          allow_remote: bool = False, token: str | None = None, allow_hosts: Sequence[str] = (),
          forwarded_allow_ips: str | Sequence[str] | None = None) -> "Embedded":
    """The live page for a watch: uvicorn in a thread, on host:port (0: a free port), runs kept in data_dir.
    `w.remove()` or the returned object's `close()` stops it. By `previewlab serve`'s rules: loopback unless
    allow_remote=True, and then only with a token (printed in the URL unless given); forwarded_allow_ips: the
    reverse proxies trusted to name their client (docs/server.md, "Watching a remote GPU")."""
    from previewlab.server.embedded import serve as start

    return start(w, host=host, port=port, data_dir=data_dir, allow_remote=allow_remote, token=token,
                 allow_hosts=allow_hosts, forwarded_allow_ips=forwarded_allow_ips)


__all__ = ["watch", "serve"]
