"""Devices: what --device may name on this machine, and the one function that decides where a model runs."""
from __future__ import annotations

import argparse

import torch

from previewlab.preview.models.model import ModelError

DEVICES = ("cpu", "cuda", "mps", "xpu")  # what --device may name, where torch sees it (besides auto)


def _sees(name: str) -> bool:
    if name == "cuda":
        return torch.cuda.is_available()
    if name == "mps":
        return torch.backends.mps.is_available()
    if name == "xpu":
        return hasattr(torch, "xpu") and torch.xpu.is_available()
    return name == "cpu"


def allowed_devices() -> tuple[str, ...]:
    """What --device accepts on this machine: auto, cpu and each accelerator torch sees here."""
    return ("auto", *(d for d in DEVICES if _sees(d)))


def device_refusal(name: str) -> str | None:
    """Why --device `name` cannot run here, in one line naming what can; None when it can."""
    allowed = allowed_devices()
    if name in allowed:
        return None
    why = f"torch sees no {name.upper()} device here" if name in DEVICES else "not a device"
    return f"{name!r}: {why}; allowed on this machine: {', '.join(allowed)}"


def device_arg(name: str) -> str:
    """--device as the server's and the bench's parsers take it: argparse's one-line error where it cannot run."""
    refusal = device_refusal(name)
    if refusal is not None:
        raise argparse.ArgumentTypeError(refusal)
    return name


def device_name(dev: torch.device) -> str:
    """The device as reports name it: the GPU's own name on CUDA and XPU, else its type (cpu, mps)."""
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "xpu":
        return str(torch.xpu.get_device_name(dev))
    return dev.type


def choose_device(name: str) -> torch.device:
    """The one place that decides the device: auto takes CUDA when torch sees one, else the CPU; cuda,
    mps and xpu where torch sees them, when asked for."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    refusal = device_refusal(name)
    if refusal is not None:
        raise ModelError(f"--device {refusal}")
    return torch.device(name)
