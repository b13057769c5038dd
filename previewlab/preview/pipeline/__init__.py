"""A preview's stages, written once, and the sync and overlap strategies over them."""
