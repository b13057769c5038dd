"""previewlab's measuring core: what live previews cost a diffusers run, stage by stage.

The public API is `previewlab.watch` and `previewlab.serve`; this package is the engine the bench and the
server are built on. It never imports the server.
"""
