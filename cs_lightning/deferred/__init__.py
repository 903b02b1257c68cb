"""Deferred initialization: record a model's construction, materialize it later, exactly.

::

    model = deferred_init(GPT, config)          # nothing allocated, init recorded
    materialize(model, device="cuda", dtype=torch.bfloat16)

With the same seed, the materialized parameters, buffers and global RNG state are
bit-identical to building the model eagerly (and casting it), including custom
``apply(_init_weights)`` init, slices initialized in place, tied weights, buffers computed
in ``__init__`` and BatchNorm statistics. ``materialize(..., state_dict=ckpt)`` reads the
tensors a checkpoint provides straight into place and never initializes them. In-place
initialization applied after ``deferred_init`` (``model.apply(init_fn)``,
``load_state_dict``) is recorded too; anything that makes new tensors from deferred ones
(a forward pass) raises until ``materialize``.
``mode="independent"`` trades eager equality for parallel, order-free initialization.

No Lightning needed; the csx strategy uses these under ``configure_model``.

How: a dispatch mode records every aten op that creates or writes a tensor's storage
(``recorder.py``) into a :class:`~cs_lightning.deferred.oplog.Recording` (``oplog.py``, the op-log
types the recorder and the replays share; each op's arguments kept flat, ``arguments.py``);
``materialize`` replays the live part of that log in order (``replay.py``), jumping the CPU
generator over the draws of dead ops (``mt19937.py``), or, in the independent mode, per tensor
on its own generator (``independent.py``).

Limits, each reported rather than hidden:

* Replay draws from the global generator as it is at ``materialize``: draw no random
  numbers between recording and materialize (a warning says when that happened, naming
  the line that opened the recording). The csx strategies instead jump the generator past
  a ``trainer.init_module()`` block's draws as it ends (``recorder.jump_past_draws``) when every draw's count
  is known (float32/float64 ``normal_``/``uniform_``/``randn``/``rand`` on the CPU, and a
  ``trunc_normal_`` whose second round has odds under 1e-3, counted as one round and checked by
  the replay, with a warning if it took two): draws made before ``fit`` are then eager's, and so
  are the weights.
* A constructor that reads random values (``.item()``, ``bool(t)``, a rejection loop),
  or sets or reads the global generator (``torch.manual_seed``, ``seed_everything``,
  ``fork_rng``) after random numbers were recorded, makes everything recorded so far run
  eagerly, with a warning naming the constructor and the user's line; the values stay
  eager's. Seeding before any draw is recorded (the top of ``configure_model``) keeps the
  whole model deferred. ``nn.init.trunc_normal_`` is recorded as one call instead, in the block
  and after it (``model.apply(init_fn)`` before ``fit``): its wrapper, swapped in as cs_lightning is
  imported, passes real tensors straight to torch's function (a ``from torch.nn.init import
  trunc_normal_`` made before that import binds torch's own, whose rejection loop reads values:
  everything recorded so far then runs eagerly, with a warning). ``nn.init.orthogonal_``, which
  computes a QR decomposition in new tensors, is recorded op by op in the block and as one call
  after it (there, a new tensor made from a deferred one is refused as a forward pass would be).
* A ``torch.Generator`` of the constructor's own is not the global one: each draw from it is
  recorded with a copy of its state, and replay draws from that copy, while recording moves
  the generator past the draw as eager does (a jump where the count is known, else the draw
  made once more into a throwaway tensor). Seeding it again, rewinding it with ``set_state``,
  reading ``get_state()`` or drawing from it before ``materialize`` all meet eager's state.
  A draw from it that reads other recorded tensors (``torch.normal(mean, std, generator=g)``)
  makes everything recorded so far run eagerly, with a warning.
* Modules recorded in separate blocks materialize in recording order (see ``materialize``).
* Writing random numbers into a tensor created outside the recording, or an in-place
  op without a meta kernel, cannot be deferred: ``recording()`` raises
  :class:`~cs_lightning.errors.DeferredInitError` naming the constructor, and
  ``deferred_init`` falls back to eager construction with a warning.
* Bit-identity is tested on the CPU; on other devices replay runs the same ops there,
  with skipped draws made into a scratch tensor (no jump-ahead off the CPU).
"""

from cs_lightning.deferred.materialize import materialize
from cs_lightning.deferred.recorder import (
    DeferredTensor,
    deferred_init,
    is_deferred,
    recording,
)

__all__ = ["DeferredTensor", "deferred_init", "is_deferred", "materialize", "recording"]
