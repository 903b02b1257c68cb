"""Deferred initialization: record a model's construction, materialize it later, exactly.

>>> model = deferred_init(GPT, config)          # nothing allocated, init recorded
>>> materialize(model, device="cuda", dtype=torch.bfloat16)

With the same seed, the materialized parameters, buffers and global RNG state are
bit-identical to building the model eagerly (and casting it), including custom
``apply(_init_weights)`` init, slices initialized in place, tied weights, buffers computed
in ``__init__`` and BatchNorm statistics. ``materialize(..., state_dict=ckpt)`` reads the
tensors a checkpoint provides straight into place and never initializes them.
``mode="independent"`` trades eager equality for parallel, order-free initialization.

No Lightning needed; the csx strategy uses these under ``configure_model``.
"""

from cs_lightning.deferred.materialize import materialize
from cs_lightning.deferred.recorder import (
    DeferredTensor,
    deferred_init,
    is_deferred,
    recording,
)

__all__ = ["DeferredTensor", "deferred_init", "is_deferred", "materialize", "recording"]
