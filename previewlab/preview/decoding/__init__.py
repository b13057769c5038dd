"""The preview decoders and where each stops."""
