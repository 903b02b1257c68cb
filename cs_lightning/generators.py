"""The global random generators' states (torch's CPU and CUDA ones, Python's, numpy's): read and set as one."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, cast

import numpy
import torch


def rng_states() -> dict[str, Any]:
    """The global generators' states, in types ``torch.load(weights_only=True)`` accepts."""
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    # numpy's stub unions the legacy tuple with the dict of legacy=False; this is the tuple
    legacy = cast(tuple[str, numpy.ndarray, int, int, float], numpy.random.get_state(legacy=True))
    name, keys, position, has_gauss, cached = legacy
    states["numpy"] = (name, torch.from_numpy(keys.astype("int64")), position, has_gauss, cached)
    return states


def restore_rng_states(states: Mapping[str, Any]) -> None:
    """Set the global generators as ``rng_states`` saw them."""
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    name, keys, position, has_gauss, cached = states["numpy"]
    numpy.random.set_state((name, keys.numpy().astype("uint32"), position, has_gauss, cached))
