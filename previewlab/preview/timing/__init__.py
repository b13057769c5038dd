"""Clocks and device events, memory and the device's busy share."""
