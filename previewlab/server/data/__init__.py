"""The data folder: its owner, its writes, its reads and its retention."""
