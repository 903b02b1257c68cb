"""cs_lightning.deferred: materialized models are bit-identical to eager construction.

Every exactness test builds the model twice from the same seed, eagerly and deferred, and
compares every parameter, every buffer and the global RNG state afterwards with
``torch.equal``.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import math
import mmap
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from cs_lightning.deferred import deferred_init, is_deferred, materialize, recording
from cs_lightning.errors import DeferredInitError, DeferredInitUsageError, DeferredInitWarning

SEED = 1234
# A flush or fallback that a test does not expect is a failure, not noise.
pytestmark = pytest.mark.filterwarnings("error::cs_lightning.errors.DeferredInitWarning")


def tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer (persistent or not) by qualified name."""
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def eager_and_deferred(build: Callable[[], nn.Module], seed: int = SEED, **options):
    """(eager module, its RNG state after), (materialized module, its RNG state after)."""
    torch.manual_seed(seed)
    eager = build()
    eager_rng = torch.get_rng_state()
    torch.manual_seed(seed)
    lazy = deferred_init(build)
    assert is_deferred(lazy)
    materialize(lazy, **options)
    assert not is_deferred(lazy)
    return (eager, eager_rng), (lazy, torch.get_rng_state())


def assert_same(expected: nn.Module, actual: nn.Module) -> None:
    """The same names, dtypes and values (torch.equal) for every parameter and buffer."""
    want, got = tensors(expected), tensors(actual)
    assert want.keys() == got.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        assert torch.equal(got[name], want[name]), name


def assert_identical(build: Callable[[], nn.Module], seed: int = SEED, **options) -> tuple[nn.Module, nn.Module]:
    (eager, eager_rng), (lazy, lazy_rng) = eager_and_deferred(build, seed, **options)
    assert_same(eager, lazy)
    assert torch.equal(lazy_rng, eager_rng), "global RNG state differs from eager"
    return eager, lazy


# -- models -------------------------------------------------------------------------


class Rotary(nn.Module):
    """Rotary position tables, computed in __init__ and kept out of the state_dict."""

    def __init__(self, dim: int, max_len: int) -> None:
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(max_len).float(), inv_freq)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, -1).transpose(1, 3).unbind(2)
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """nanoGPT-shaped: tied head, apply(_init_weights), scaled residual projections."""

    def __init__(self, vocab: int = 50, width: int = 32, depth: int = 2, heads: int = 4, max_len: int = 16) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(max_len, width)
        self.rotary = Rotary(width // heads, max_len)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * depth))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


@dataclass
class TinyConfig:
    """A model-library style config object."""

    vocab_size: int = 40
    hidden_size: int = 24
    num_layers: int = 2
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True


class PreTrainedModel(nn.Module):
    """The shape of widely used model libraries: config in, post_init() at the end."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config

    def post_init(self) -> None:
        self.apply(self._init_weights)
        if self.config.tie_word_embeddings:
            self.get_output_embeddings().weight = self.get_input_embeddings().weight

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):  # the idiom of ViT-style models
            module.weight.data = nn.init.trunc_normal_(module.weight.data.to(torch.float32), mean=0.0, std=std).to(
                module.weight.dtype
            )
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=std)
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)


class TinyLM(PreTrainedModel):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        width = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, width)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(width, 4, 2 * width, batch_first=True) for _ in range(config.num_layers)
        )
        self.norm = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head


class SliceInit(nn.Module):
    """In-place init of a slice; the rest keeps its default init."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 6)
        self.lin.weight.data[:, :3].normal_(0, 0.5)
        with torch.no_grad():
            self.lin.bias[2:].fill_(0.25)


class Containers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.plist = nn.ParameterList(nn.Parameter(torch.randn(3, i + 1)) for i in range(3))
        self.pdict = nn.ParameterDict({"a": nn.Parameter(torch.rand(4)), "b": nn.Parameter(torch.zeros(2, 2))})


class TruncNormal(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(17, 5))
        nn.init.trunc_normal_(self.w, std=0.02, a=-0.04, b=0.04)
        self.cls = nn.Parameter(torch.empty(1, 1, 5))
        nn.init.trunc_normal_(self.cls, std=0.2)


STOCK = {
    "linear": lambda: nn.Linear(7, 5),
    "conv1d": lambda: nn.Conv1d(3, 4, 5),
    "conv2d": lambda: nn.Conv2d(3, 8, 3, groups=1),
    "embedding": lambda: nn.Embedding(11, 6, padding_idx=0),
    "layernorm": lambda: nn.LayerNorm(6),
    "batchnorm": lambda: nn.BatchNorm2d(8),
    "mha": lambda: nn.MultiheadAttention(16, 4, kdim=8, vdim=12),
    "lstm": lambda: nn.LSTM(8, 16, num_layers=2, bidirectional=True),
    "gru": lambda: nn.GRU(8, 16),
    "conv_transpose": lambda: nn.ConvTranspose2d(3, 4, 3),
    "bilinear": lambda: nn.Bilinear(3, 4, 5),
    "embedding_bag": lambda: nn.EmbeddingBag(10, 3),
    "weight_norm": lambda: nn.utils.parametrizations.weight_norm(nn.Linear(4, 5)),
    "spectral_norm": lambda: nn.utils.parametrizations.spectral_norm(nn.Linear(4, 5)),
    "transformer": lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2, enable_nested_tensor=False
    ),
}


# -- exactness ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(STOCK))
def test_stock_layers_are_eager_bit_for_bit(name: str) -> None:
    assert_identical(STOCK[name])


def test_batchnorm_statistics_and_forward_match_eager() -> None:
    eager, lazy = assert_identical(lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)))
    x = torch.randn(2, 3, 8, 8)
    eager.train(), lazy.train()
    assert torch.equal(eager(x), lazy(x))
    assert torch.equal(eager[1].running_var, lazy[1].running_var)
    assert lazy[1].num_batches_tracked.item() == 1


def test_recurrent_layers_run_after_materialize() -> None:
    eager, lazy = assert_identical(lambda: nn.LSTM(4, 6, num_layers=2))
    assert lazy._flat_weights[0] is lazy.weight_ih_l0
    x = torch.randn(5, 2, 4)
    assert torch.equal(eager(x)[0], lazy(x)[0])


def test_lazy_modules_initialize_on_first_call_as_eager() -> None:
    def build_and_call() -> nn.Module:
        model = deferred_init(lambda: nn.Sequential(nn.LazyLinear(3), nn.Linear(3, 2)))
        assert is_deferred(model)
        materialize(model)
        model(torch.ones(1, 5))
        return model

    torch.manual_seed(SEED)
    eager = nn.Sequential(nn.LazyLinear(3), nn.Linear(3, 2))
    eager(torch.ones(1, 5))
    torch.manual_seed(SEED)
    lazy = build_and_call()
    assert_same(eager, lazy)


def test_gpt_with_apply_init_weights_tied_head_and_rotary_tables() -> None:
    eager, lazy = assert_identical(GPT)
    assert lazy.head.weight is lazy.wte.weight
    assert isinstance(lazy.head.weight, nn.Parameter)
    assert "rotary.cos" not in lazy.state_dict()
    idx = torch.randint(0, 50, (2, 8))
    assert torch.equal(eager(idx), lazy(idx))


def test_config_object_model_with_post_init_and_tied_embeddings() -> None:
    _eager, lazy = assert_identical(lambda: TinyLM(TinyConfig()))
    assert lazy.lm_head.weight is lazy.embed_tokens.weight


def test_attributes_and_gradient_hooks_set_on_tensors_are_kept() -> None:
    class Flags(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.lin.bias.no_weight_decay = True
            self.register_buffer("steps", torch.zeros(()))
            self.steps.reset_each_epoch = "yes"
            self.lin.weight.register_hook(torch.zeros_like)
            self.lin.weight.accumulated = 0
            self.lin.weight.register_post_accumulate_grad_hook(Flags._count)

        @staticmethod
        def _count(param: nn.Parameter) -> None:
            param.accumulated += 1

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    eager, lazy = assert_identical(Flags)
    assert lazy.lin.bias.no_weight_decay is True
    lazy(torch.ones(2)).sum().backward()
    eager(torch.ones(2)).sum().backward()
    assert torch.equal(lazy.lin.weight.grad, torch.zeros(2, 2))  # the hook runs
    assert torch.equal(lazy.lin.bias.grad, eager.lin.bias.grad)
    assert lazy.lin.weight.accumulated == eager.lin.weight.accumulated == 1
    assert lazy.steps.reset_each_epoch == "yes"
    assert not hasattr(lazy.lin.bias, "accumulated")
    assert not hasattr(lazy.lin.bias, "_cs_recording")


def test_in_place_init_of_a_slice() -> None:
    assert_identical(SliceInit)


def test_parameter_list_and_dict() -> None:
    assert_identical(Containers)


def test_empty_parameter_filled_by_trunc_normal() -> None:
    assert_identical(TruncNormal)


def test_bfloat16_equals_eager_then_cast() -> None:
    torch.manual_seed(SEED)
    want = GPT().to(torch.bfloat16)
    want_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    got = materialize(deferred_init(GPT), dtype=torch.bfloat16)
    assert_same(want, got)
    assert {t.dtype for t in got.parameters()} == {torch.bfloat16}
    assert torch.equal(torch.get_rng_state(), want_rng)
    assert got.head.weight is got.wte.weight


def test_partial_checkpoint_equals_eager_plus_load_state_dict(tmp_path) -> None:
    torch.manual_seed(99)
    torch.save(
        {k: v for k, v in GPT().state_dict().items() if not k.startswith("head") and not k.startswith("wte")},
        tmp_path / "body.pt",
    )
    checkpoint = torch.load(tmp_path / "body.pt", mmap=True)

    torch.manual_seed(SEED)
    eager = GPT()
    eager.load_state_dict(checkpoint, strict=False)
    eager_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    lazy = materialize(deferred_init(GPT), state_dict=checkpoint)
    assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), eager_rng)
    # copied into memory of its own, as load_state_dict does: the mapping is read once
    block = lazy.blocks[0].qkv.weight
    assert block.untyped_storage().data_ptr() != checkpoint["blocks.0.qkv.weight"].untyped_storage().data_ptr()


def test_one_key_of_a_tied_pair_loads_both_as_eager() -> None:
    checkpoint = {"head.weight": torch.full((50, 32), 0.5)}
    torch.manual_seed(SEED)
    eager = GPT()
    eager.load_state_dict(checkpoint, strict=False)
    torch.manual_seed(SEED)
    lazy = materialize(deferred_init(GPT), state_dict=checkpoint)
    assert lazy.wte.weight is lazy.head.weight
    assert_same(eager, lazy)


class TwoHeads(nn.Module):
    def __init__(self, tie: bool) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4, bias=False)
        self.b = nn.Linear(4, 4, bias=False)
        if tie:
            self.b.weight = self.a.weight


def test_memory_mapped_tensors_get_memory_of_their_own_with_eager_strides(tmp_path) -> None:
    """Eager load_state_dict gives every tensor its own memory with the module's strides."""
    torch.save(TwoHeads(tie=True).state_dict(), tmp_path / "tied.pt")
    torch.save({"weight": torch.randn(3, 4).t(), "bias": torch.zeros(4)}, tmp_path / "t.pt")
    tied = torch.load(tmp_path / "tied.pt", mmap=True)
    original = tied["a.weight"].clone()
    untied = materialize(deferred_init(TwoHeads, tie=False), state_dict=tied)
    second = materialize(deferred_init(TwoHeads, tie=False), state_dict=tied)
    weights = [untied.a.weight, untied.b.weight, second.a.weight, second.b.weight]
    assert len({w.data_ptr() for w in weights}) == 4
    with torch.no_grad():
        untied.a.weight.add_(1)
    assert torch.equal(untied.b.weight, original)
    assert torch.equal(second.a.weight, original)
    transposed = torch.load(tmp_path / "t.pt", mmap=True)
    lazy = materialize(deferred_init(nn.Linear, 3, 4), state_dict=transposed)
    assert lazy.weight.stride() == nn.Linear(3, 4).weight.stride()
    assert torch.equal(lazy.weight, transposed["weight"])


def test_unused_checkpoint_keys_are_named_in_a_warning() -> None:
    lazy = deferred_init(nn.Linear, 3, 3)
    with pytest.warns(DeferredInitWarning, match=r"keys model\.weight, weigth name no"):
        materialize(
            lazy, state_dict={"weigth": torch.ones(3, 3), "model.weight": torch.ones(3, 3), "bias": torch.ones(3)}
        )
    assert torch.equal(lazy.bias, torch.ones(3))


class ScalesOnLoad(nn.Module):
    """Loads in its own way: a pre-hook rewrites a key, extra state, a lazy layer."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.lazy = nn.LazyLinear(2)
        self.steps = 0
        self._register_load_state_dict_pre_hook(self._upgrade)

    @staticmethod
    def _upgrade(state_dict, prefix, *args) -> None:
        if prefix + "old_weight" in state_dict:
            state_dict[prefix + "lin.weight"] = 2 * state_dict.pop(prefix + "old_weight")

    def get_extra_state(self) -> dict:
        return {"steps": self.steps}

    def set_extra_state(self, state: dict) -> None:
        self.steps = state["steps"]


def test_modules_that_load_in_their_own_way_are_loaded_by_load_state_dict() -> None:
    checkpoint = {
        "old_weight": torch.ones(3, 3),
        "lazy.weight": torch.ones(2, 5),
        "lazy.bias": torch.zeros(2),
        "_extra_state": {"steps": 7},
    }
    torch.manual_seed(SEED)
    eager = ScalesOnLoad()
    eager.load_state_dict(checkpoint, strict=False)
    eager = eager.to(torch.bfloat16)
    eager_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    with pytest.warns(DeferredInitWarning, match=r"root module \(ScalesOnLoad\), with load"):
        lazy = materialize(deferred_init(ScalesOnLoad), dtype=torch.bfloat16, state_dict=checkpoint)
    assert lazy.steps == 7
    assert torch.equal(lazy.lin.weight, torch.full((3, 3), 2.0, dtype=torch.bfloat16))
    assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), eager_rng)
    assert "old_weight" in checkpoint  # the caller's mapping is not changed


def test_complex_tensors_keep_their_dtype_and_imaginary_part() -> None:
    class Spectral(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.filter = nn.Parameter(torch.randn(4, dtype=torch.complex64))
            self.lin = nn.Linear(2, 2)

    torch.manual_seed(SEED)
    eager = Spectral().double()  # floating tensors only, as Lightning's 64-true converts
    torch.manual_seed(SEED)
    lazy = materialize(deferred_init(Spectral), dtype=torch.float64)
    assert_same(eager, lazy)
    assert lazy.filter.dtype == torch.complex64 and bool(lazy.filter.imag.ne(0).any())


def test_checkpoint_in_another_dtype_is_cast_like_load_then_to() -> None:
    torch.manual_seed(5)
    source = {k: v.to(torch.float16) for k, v in GPT().state_dict().items()}
    torch.manual_seed(SEED)
    eager = GPT()
    eager.load_state_dict(source, strict=False)
    eager = eager.to(torch.bfloat16)
    torch.manual_seed(SEED)
    lazy = materialize(deferred_init(GPT), dtype=torch.bfloat16, state_dict=source)
    assert_same(eager, lazy)


def test_a_model_built_eagerly_is_loaded_and_cast_like_load_then_to() -> None:
    checkpoint = {"blocks.0.qkv.weight": torch.full((96, 32), 0.5), "head.weight": torch.ones(50, 32)}
    torch.manual_seed(SEED)
    want = GPT()
    want.load_state_dict(checkpoint, strict=False)
    want = want.to(torch.bfloat16)
    torch.manual_seed(SEED)
    got = GPT()
    head = got.head.weight
    materialize(got, dtype=torch.bfloat16, state_dict=checkpoint)
    assert_same(want, got)
    assert got.head.weight is head is got.wte.weight  # moved in place, as Module.to does


def test_skip_unread_rng_skips_only_draws_that_nothing_needs() -> None:
    torch.manual_seed(3)
    full = GPT().state_dict()
    torch.manual_seed(SEED)
    before = torch.get_rng_state()
    lazy = materialize(deferred_init(GPT), state_dict=full, rng="skip_unread")
    for name, t in full.items():
        assert torch.equal(lazy.state_dict()[name], t), name
    assert torch.equal(torch.get_rng_state(), before)  # nothing drawn at all


def test_the_old_rng_name_fast_still_skips_unread_draws_with_a_deprecation_warning() -> None:
    torch.manual_seed(3)
    source = {k: v for k, v in GPT().state_dict().items() if k.endswith("weight")}
    results = []
    for rng in ("skip_unread", "fast"):
        torch.manual_seed(SEED)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lazy = materialize(deferred_init(GPT), state_dict=source, rng=rng)
        results.append((lazy, torch.get_rng_state(), [w for w in caught if w.category is DeprecationWarning]))
    (new, new_rng, none), (old, old_rng, deprecated) = results
    assert_same(new, old)
    assert torch.equal(new_rng, old_rng)
    assert not none and len(deprecated) == 1
    assert "rng='fast' is deprecated" in str(deprecated[0].message) and "rng='skip_unread'" in str(
        deprecated[0].message
    )


class Wide(nn.Module):
    """Tensors larger than one scratch chunk, with each remainder case of the chunking."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.a = nn.Linear(517, 513, dtype=dtype)  # 265221 elements: one chunk + 2949
        self.b = nn.Linear(87383, 3, bias=False, dtype=dtype)  # 262149: one chunk + 5
        self.c = nn.Parameter(torch.randn(2, 262144, dtype=dtype))  # two whole chunks
        self.d = nn.Parameter(torch.rand(262160, dtype=dtype).t())
        self.e = nn.Parameter(torch.empty(40, 30, dtype=dtype).t())
        nn.init.normal_(self.e)  # not contiguous: drawn one by one, not counted
        self.apply(lambda m: nn.init.normal_(m.weight, std=0.1) if isinstance(m, nn.Linear) else None)
        self.head = nn.Linear(4, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_draws_of_checkpointed_tensors_are_replayed_exactly_in_chunks(dtype) -> None:
    torch.manual_seed(7)
    checkpoint = {k: v for k, v in Wide(dtype).state_dict().items() if not k.startswith("head")}
    torch.manual_seed(SEED)
    eager = Wide(dtype)
    eager.load_state_dict(checkpoint, strict=False)
    eager_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    lazy = materialize(deferred_init(Wide, dtype), state_dict=checkpoint)
    assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), eager_rng)


def test_constructors_see_the_real_device_not_meta() -> None:
    class SkipsInitOnMeta(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.saw = (self.lin.weight.device.type, self.lin.weight.is_meta)
            if self.lin.weight.device.type != "meta":
                nn.init.eye_(self.lin.weight)

    _eager, lazy = assert_identical(SkipsInitOnMeta)
    assert lazy.saw == ("cpu", False)
    assert torch.equal(lazy.lin.weight, torch.eye(3))


def test_plain_tensor_attributes_are_materialized_but_not_cast() -> None:
    class Cache(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.table = torch.arange(6.0).sqrt()  # not a buffer: .to() leaves it alone

    torch.manual_seed(SEED)
    eager = Cache().to(torch.bfloat16)
    torch.manual_seed(SEED)
    lazy = materialize(deferred_init(Cache), dtype=torch.bfloat16)
    assert lazy.table.dtype == torch.float32
    assert torch.equal(lazy.table, eager.table)
    assert torch.equal(lazy.lin.weight, eager.lin.weight)


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_modules_recorded_together_materialize_in_any_order(order) -> None:
    """The first materialize replays the recording once; the other module is kept for later."""

    def build() -> tuple[nn.Module, nn.Module]:
        return nn.Linear(4, 3), nn.Conv1d(2, 2, 3)

    torch.manual_seed(SEED)
    want = build()
    want_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    with recording():
        got = build()
    for k in order:
        eager, lazy = want[k], got[k]
        materialize(lazy)
        assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), want_rng)


def test_a_model_assembled_from_two_recordings_replays_them_in_recording_order() -> None:
    def build(deferred: bool) -> nn.Module:
        with recording() if deferred else contextlib.nullcontext():
            head = nn.Linear(3, 2)
        with recording() if deferred else contextlib.nullcontext():
            body = nn.Linear(4, 3)
        return nn.Sequential(body, head)  # traversal meets the later recording first

    torch.manual_seed(SEED)
    want = build(deferred=False)
    want_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    got = materialize(build(deferred=True))
    assert_same(want, got)
    assert torch.equal(torch.get_rng_state(), want_rng)
    torch.manual_seed(SEED)
    got = build(deferred=True)
    materialize(got[1])  # one recording after the other: no warning, still exact
    materialize(got[0])
    assert_same(want, got)


def test_random_numbers_drawn_before_materialize_are_reported() -> None:
    torch.manual_seed(SEED)
    lazy = deferred_init(nn.Linear, 3, 3)
    torch.rand(1)
    with pytest.warns(DeferredInitWarning, match="drawn .* between recording and materialize"):
        materialize(lazy)


class OwnGenerator(nn.Module):
    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4, generator=generator))
        self.lin = nn.Linear(4, 4)
        nn.init.uniform_(self.lin.weight, generator=generator)


def test_a_generator_of_the_callers_own_replays_exactly_and_draws_from_it_before_materialize_are_eagers() -> None:
    """Recording moves the caller's generator as eager construction does (the replay draws from copies of
    it): numbers drawn from it before materialize are eager's (they were once a warning), and so are the weights."""
    generator = torch.Generator()
    generator.manual_seed(3)
    torch.manual_seed(SEED)
    eager = OwnGenerator(generator)
    eager_drawn, eager_state = torch.randn(2, generator=generator), generator.get_state()
    generator.manual_seed(3)
    torch.manual_seed(SEED)
    lazy = deferred_init(OwnGenerator, generator)
    drawn = torch.randn(2, generator=generator)  # e.g. a data split drawn from the same generator
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)
        materialize(lazy)
    assert_same(eager, lazy)
    assert torch.equal(drawn, eager_drawn)
    assert torch.equal(generator.get_state(), eager_state)


class SeedPerLayer(nn.Module):
    """One seed per layer, from a generator of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.generator = torch.Generator()
        for k, layer in enumerate(self.layers):
            self.generator.manual_seed(100 + k)
            nn.init.normal_(layer.weight, generator=self.generator)
        self.last = nn.Parameter(torch.randn(20, generator=self.generator))


def test_a_generator_of_the_callers_own_seeded_again_draws_from_each_seed() -> None:
    torch.manual_seed(SEED)
    eager = SeedPerLayer()
    eager_states = torch.get_rng_state(), eager.generator.get_state()
    torch.manual_seed(SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)  # no longer run eagerly: the seeds are replayed
        lazy = materialize(deferred_init(SeedPerLayer))
    assert_same(eager, lazy)
    assert not torch.equal(lazy.layers[0].weight, lazy.layers[1].weight)
    assert torch.equal(torch.get_rng_state(), eager_states[0])
    assert torch.equal(lazy.generator.get_state(), eager_states[1])


class RewoundGenerator(nn.Module):
    """Draws from a generator of its own, then seeds it again or rewinds it between draws: eager's
    third draw repeats its first (seeded again) or its second (rewound)."""

    def __init__(self, generator: torch.Generator, how: str) -> None:
        super().__init__()
        seed = generator.initial_seed()
        self.first = nn.Parameter(torch.randn(40, generator=generator))
        after_first = generator.get_state()
        self.second = nn.Parameter(torch.empty(3, 5).normal_(generator=generator))  # under 16: a count not known
        nn.init.trunc_normal_(self.second, std=2.0, a=-1.0, b=1.0, generator=generator)  # a rejection loop
        self.lin = nn.Linear(6, 6)
        if how == "seeded again":
            generator.manual_seed(seed)
        else:
            generator.set_state(after_first)
        self.third = nn.Parameter(torch.randn(40, generator=generator))
        nn.init.uniform_(self.lin.weight, generator=generator)


@pytest.mark.parametrize("how", ["seeded again", "rewound"])
def test_a_generator_of_the_callers_own_seeded_again_or_rewound_between_draws_replays_exactly(how: str) -> None:
    """Recording left the generator unmoved, so a seed or a state equal to the one it had was not seen: the
    replay drew the third tensor after the second instead of repeating the first (or second) one."""

    def build(generator: torch.Generator) -> RewoundGenerator:
        return RewoundGenerator(generator, how)

    eager_generator, lazy_generator = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    torch.manual_seed(SEED)
    eager = build(eager_generator)
    eager_states = torch.get_rng_state(), eager_generator.get_state()
    torch.manual_seed(SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)  # nothing runs eagerly
        lazy = deferred_init(build, lazy_generator)
        assert torch.equal(lazy_generator.get_state(), eager_states[1])  # as eager leaves it, already
        materialize(lazy)
    assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), eager_states[0])
    assert torch.equal(lazy_generator.get_state(), eager_states[1])
    assert torch.equal(lazy.third, lazy.first) == (how == "seeded again")


class DrawsAroundARecordedMean(nn.Module):
    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.mean = nn.Parameter(torch.randn(20))
        self.around = nn.Parameter(torch.normal(self.mean.detach(), 1.0, generator=generator))
        generator.manual_seed(5)
        self.again = nn.Parameter(torch.randn(20, generator=generator))


def test_a_draw_from_a_generator_of_its_own_reading_recorded_tensors_runs_eagerly_and_exactly() -> None:
    eager_generator, lazy_generator = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    torch.manual_seed(SEED)
    eager = DrawsAroundARecordedMean(eager_generator)
    eager_states = torch.get_rng_state(), eager_generator.get_state()
    torch.manual_seed(SEED)
    with pytest.warns(DeferredInitWarning, match=r"aten.normal.Tensor_float draws from a generator of the constructor"):
        lazy = materialize(deferred_init(DrawsAroundARecordedMean, lazy_generator))
    assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), eager_states[0])
    assert torch.equal(lazy_generator.get_state(), eager_states[1])


@pytest.mark.parametrize("fill", ["cauchy_", "geometric_", "log_normal_", "exponential_"])
def test_a_fill_given_a_generator_of_its_own_replays_exactly(fill: str) -> None:
    # torch's meta references of geometric_, log_normal_ and cauchy_ assert on a generator=.
    def build() -> nn.Module:
        draw = getattr(torch.empty(6, 5), fill)
        owned = draw(*(0.3,) * (fill == "geometric_"), generator=torch.Generator().manual_seed(7))
        module = nn.Linear(5, 6)
        module.register_buffer("drawn", owned)
        return module

    assert_identical(build)


@pytest.mark.parametrize(
    ("fill", "arguments", "message"),
    [("normal_", {"std": -1.0}, "normal expects std >= 0.0"), ("geometric_", {"p": 1.5}, "expects p to be in")],
)
def test_a_fill_with_a_bad_argument_raises_eagers_error_at_the_constructors_line(fill, arguments, message) -> None:
    def build() -> nn.Module:
        return nn.ParameterList([getattr(torch.empty(3), fill)(**arguments)])

    with pytest.raises(RuntimeError, match=message) as eager:
        build()
    with pytest.raises(RuntimeError, match=message) as recorded:
        deferred_init(build)
    assert str(recorded.value) == str(eager.value)
    assert any(entry.name == "build" for entry in recorded.traceback)


class DataAssign(nn.Module):
    """Old-style init: replaces `.data`, converts dtype and deep-copies inside __init__."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.a.weight.data = torch.randn(3, 3) * 0.1
        self.b = nn.Linear(3, 2).double()
        self.c = copy.deepcopy(self.a)
        nn.init.orthogonal_(self.c.weight)
        self.wide = nn.Parameter(torch.empty(2, 5))
        nn.init.orthogonal_(self.wide)  # transposes its scratch in place (t_)
        with torch.no_grad():
            torch._foreach_mul_([self.a.bias, self.c.bias], 3.0)  # in place, returns None


def test_data_assignment_dtype_change_deepcopy_and_orthogonal() -> None:
    assert_identical(DataAssign)


def test_default_dtype_inside_the_recording_is_kept() -> None:
    def build() -> nn.Module:
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return nn.Linear(3, 3)
        finally:
            torch.set_default_dtype(previous)

    _eager, lazy = assert_identical(build)
    assert lazy.weight.dtype == torch.float64


def test_non_random_values_can_drive_python_in_a_constructor() -> None:
    class DropPathRates(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rates = [x.item() for x in torch.linspace(0, 0.1, 4)]
            steps = torch.zeros(2)
            self.first = steps.tolist()
            steps.add_(1)  # read again after a write: the new value
            self.second = steps.tolist()
            self.scale = nn.Parameter(torch.ones(3) * torch.tensor([2.0]).tolist()[0])
            self.lin = nn.Linear(2, 2)

    eager, lazy = assert_identical(DropPathRates)
    assert lazy.rates == eager.rates
    assert (lazy.first, lazy.second) == ([0.0, 0.0], [1.0, 1.0])


def test_tensors_made_outside_enter_as_values() -> None:
    small = torch.arange(6.0).reshape(2, 3)
    small.mul_(2)  # its version is not 0: no matter
    big = torch.ones(600, 600)

    class UsesOutside(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Parameter(torch.zeros(2, 3) + small)
            self.b = nn.Parameter(big * torch.rand(1))

    _eager, lazy = assert_identical(UsesOutside)
    lazy = deferred_init(UsesOutside)
    big.add_(1)  # a large value is referenced, not copied: changing it is refused
    with pytest.raises(DeferredInitError, match=r"\(600, 600\) created outside"):
        materialize(lazy)


# -- order-independent mode ---------------------------------------------------------


def test_independent_mode_depends_only_on_seed_and_names() -> None:
    torch.manual_seed(SEED)
    rng = torch.get_rng_state()
    one = materialize(deferred_init(GPT), mode="independent")
    assert torch.equal(torch.get_rng_state(), rng)  # the global stream is untouched
    torch.manual_seed(SEED)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        two = materialize(deferred_init(GPT), mode="independent")
    finally:
        torch.set_num_threads(threads_before)
    torch.manual_seed(SEED)
    eager = GPT()
    assert_same(one, two)
    assert not torch.equal(one.blocks[0].qkv.weight, eager.blocks[0].qkv.weight)
    assert torch.equal(one.rotary.cos, eager.rotary.cos)  # no randomness: exact
    assert one.head.weight is one.wte.weight
    # a different seed gives different values; the std of the init is kept
    torch.manual_seed(SEED + 1)
    other = materialize(deferred_init(GPT), mode="independent")
    assert not torch.equal(other.wte.weight, one.wte.weight)
    assert abs(one.blocks[0].mlp[0].weight.std().item() - 0.02) < 0.002


def test_independent_values_do_not_depend_on_other_tensors() -> None:
    torch.manual_seed(SEED)
    small = materialize(deferred_init(lambda: nn.Sequential(nn.Linear(4, 4))), mode="independent")
    torch.manual_seed(SEED)
    big = materialize(deferred_init(lambda: nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 9))), mode="independent")
    assert torch.equal(small[0].weight, big[0].weight)
    torch.manual_seed(SEED)
    assert not torch.equal(nn.Linear(4, 4).weight, small[0].weight)  # not eager's


def test_independent_values_do_not_depend_on_what_else_was_recorded() -> None:
    def pair() -> nn.Module:
        return nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))

    torch.manual_seed(SEED)
    alone = materialize(deferred_init(pair), mode="independent")
    torch.manual_seed(SEED)
    with recording():
        first, second = nn.Linear(5, 5), pair()
    materialize(first, mode="independent")
    materialize(second, mode="independent")
    assert_same(alone, second)
    assert not torch.equal(second[0].weight, second[1].weight)


@pytest.mark.parametrize("positional", [False, True])
def test_independent_mode_replaces_the_generator_a_recorded_init_function_was_given(positional: bool) -> None:
    class OwnTruncated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.empty(64, 8))
            generator = torch.Generator().manual_seed(1)
            if positional:
                nn.init.trunc_normal_(self.w, 0.0, 0.02, -2.0, 2.0, generator)
            else:
                nn.init.trunc_normal_(self.w, std=0.02, generator=generator)

    one = materialize(deferred_init(OwnTruncated), mode="independent")  # was: "got multiple values for 'generator'"
    two = materialize(deferred_init(OwnTruncated), mode="independent")
    assert torch.equal(one.w, two.w) and 0.015 < float(one.w.detach().std()) < 0.025


def test_independent_mode_for_random_ops_without_a_generator_argument() -> None:
    class Like(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            base = torch.empty(3, 4)
            self.a = nn.Parameter(torch.randn_like(base))
            self.b = nn.Parameter(torch.rand_like(base))

    values, threads_before = [], torch.get_num_threads()
    for threads in (1, 2):
        torch.manual_seed(SEED)
        rng = torch.get_rng_state()
        torch.set_num_threads(threads)
        try:
            values.append(materialize(deferred_init(Like), mode="independent"))
        finally:
            torch.set_num_threads(threads_before)
        assert torch.equal(torch.get_rng_state(), rng)
    assert torch.equal(values[0].a, values[1].a) and torch.equal(values[0].b, values[1].b)
    assert not torch.equal(values[0].a, values[0].b)


@pytest.mark.parametrize("mode", ["exact", "independent"])
def test_a_buffer_copied_from_a_tensor_requiring_grad_has_no_graph(mode: str) -> None:
    """A constructor copying from a real parameter under no_grad (a teacher's table, over the
    1 MB that is kept by reference): grad mode is per thread, so the materializing threads
    must not record the copy either."""
    table = nn.Parameter(torch.randn(600, 600))

    class Student(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("frozen", torch.empty(600, 600))
            with torch.no_grad():
                self.frozen.copy_(table)

    student = materialize(deferred_init(Student), dtype=torch.float64, mode=mode)
    assert not student.frozen.requires_grad and student.frozen.grad_fn is None
    assert torch.equal(student.frozen, table.detach().double())


# -- diagnostics --------------------------------------------------------------------


def test_uninitialized_parameter_is_reported_by_name() -> None:
    class Forgot(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ok = nn.Linear(2, 2)
            self.missing = nn.Parameter(torch.empty(3))

    lazy = deferred_init(Forgot)
    with pytest.warns(DeferredInitWarning, match=r"nothing initialized missing \("):
        materialize(lazy)
    # given by a checkpoint instead: no warning
    lazy = deferred_init(Forgot)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        materialize(lazy, state_dict={"missing": torch.ones(3)})
    assert torch.equal(lazy.missing, torch.ones(3))


class PeeksAtRandom(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.ModuleDict({"gate": Gate()})


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))
        self.open = bool(self.w.sum() > 0)  # data-dependent Python on random values


def test_reading_random_values_in_a_constructor_warns_and_stays_exact() -> None:
    """The recorded prefix runs eagerly at the read, so Python sees eager's values."""
    with pytest.warns(DeferredInitWarning, match=r"PeeksAtRandom.__init__ > Gate.__init__"):
        eager, lazy = assert_identical(PeeksAtRandom)
    assert lazy.inner.gate.open == eager.inner.gate.open


class FormatsItsNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 1)
        self.said = f"{self.lin.weight.norm():.3f} {self.lin.weight.norm():.2e} {self.lin.weight.norm()}"


def test_a_value_formatted_in_a_constructor_reads_as_in_eager() -> None:
    """f"{w.norm():.3f}" formats the number, as torch does for a one-element tensor."""
    with pytest.warns(DeferredInitWarning, match="reads the value"):
        eager, lazy = assert_identical(FormatsItsNorm)
    assert lazy.said == eager.said
    with pytest.raises(TypeError, match="unsupported format string"):  # as torch: no spec for a whole tensor
        with recording():
            f"{nn.Linear(2, 2).weight:.3f}"


def test_ops_without_meta_kernel_use_real_values() -> None:
    class Indices(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("odd", torch.nonzero(torch.arange(10) % 2).flatten())
            self.lin = nn.Linear(3, 3)

    _eager, lazy = assert_identical(Indices)
    assert lazy.odd.tolist() == [1, 3, 5, 7, 9]


def test_deferred_init_falls_back_to_eager_with_a_warning() -> None:
    outside = torch.zeros(4)

    class WritesOutside(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.dropout_rate = float(np.random.uniform(0, 0.1))
            self.positive = bool(self.lin.weight.sum() > 0)  # runs what came before
            outside.normal_()  # a draw into a tensor the recording does not own

    torch.manual_seed(SEED)
    np.random.seed(SEED)
    eager = WritesOutside()
    eager_rng, eager_outside = torch.get_rng_state(), outside.clone()
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    with pytest.warns(DeferredInitWarning) as caught:
        lazy = deferred_init(WritesOutside)
    assert lazy.dropout_rate == eager.dropout_rate  # the retry starts from numpy's state too
    assert "WritesOutside.__init__" in str(caught[-1].message)
    assert "Falling back" in str(caught[-1].message)
    assert not is_deferred(lazy)
    assert torch.equal(lazy.lin.weight, eager.lin.weight)
    assert torch.equal(outside, eager_outside)
    assert torch.equal(torch.get_rng_state(), eager_rng)
    with pytest.raises(DeferredInitError, match=r"WritesOutside.__init__ \("):
        with recording(), pytest.warns(DeferredInitWarning, match="reads the value"):
            WritesOutside()


class SeedsInside(nn.Module):
    def __init__(self, setter: str) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        if setter == "manual_seed":
            torch.manual_seed(42)
            self.b = nn.Linear(3, 3)
        else:  # fork_rng puts back a state read before a's draws happened
            with torch.random.fork_rng():
                self.b = nn.Linear(3, 3)
        self.c = nn.Linear(3, 3)


@pytest.mark.parametrize("setter", ["manual_seed", "fork_rng"])
def test_setting_the_generator_after_draws_runs_them_first_and_defers_the_rest(setter) -> None:
    torch.manual_seed(SEED)
    eager = SeedsInside(setter)
    eager_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    with pytest.warns(DeferredInitWarning, match=r"after random numbers were recorded in SeedsInside.__init__ \("):
        lazy = deferred_init(SeedsInside, setter)
    assert is_deferred(lazy.c)  # what comes after the setter is still recorded
    materialize(lazy)
    assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), eager_rng)


class SeedsFirst(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(42)
        self.a = nn.Linear(3, 3)


def test_seeding_before_any_draw_is_recorded_is_honoured() -> None:
    torch.manual_seed(SEED)
    eager = SeedsFirst()
    eager_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)
        lazy = materialize(deferred_init(SeedsFirst))
    assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), eager_rng)


def test_recording_restores_global_state_on_error() -> None:
    hooked = (nn.init.trunc_normal_, torch.manual_seed, torch.random.set_rng_state, torch.get_rng_state)
    with pytest.raises(ZeroDivisionError), recording():
        nn.Linear(2, 2)
        assert torch.manual_seed is not hooked[1]
        1 / 0
    # the recording hooks are gone
    assert (nn.init.trunc_normal_, torch.manual_seed, torch.random.set_rng_state, torch.get_rng_state) == hooked
    torch.manual_seed(SEED)
    layer = nn.Linear(2, 2)
    assert not is_deferred(layer)
    assert type(layer.weight.data) is torch.Tensor
    assert torch.isfinite(layer.weight @ torch.ones(2)).all()


def test_in_place_init_after_construction_is_recorded_too() -> None:
    def init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            module.bias.data.zero_()

    torch.manual_seed(SEED)
    eager = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)).apply(init)
    eager_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    lazy = deferred_init(lambda: nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)))
    lazy.apply(init)  # outside the recording: still deferred
    assert is_deferred(lazy)
    materialize(lazy)
    assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), eager_rng)

    checkpoint = {"weight": torch.full((2, 4), 0.5), "bias": torch.ones(2)}
    lazy = deferred_init(nn.Linear, 4, 2)
    lazy.load_state_dict(checkpoint)  # recorded as copies: the init it overwrites is dead
    materialize(lazy)
    assert torch.equal(lazy.weight, checkpoint["weight"])
    assert torch.equal(lazy.bias, checkpoint["bias"])


def test_deferred_tensors_refuse_computation_until_materialized() -> None:
    lazy = deferred_init(nn.Linear, 3, 3)
    assert lazy.weight.shape == (3, 3) and lazy.weight.device.type == "cpu"
    assert "DeferredParameter" in repr(lazy.weight)
    with pytest.raises(DeferredInitError, match="materialize"):
        lazy(torch.ones(3))
    with pytest.raises(DeferredInitError, match="saving or pickling"):
        torch.save(lazy.state_dict(), "weights.pt")


def test_trunc_normal_after_the_block_is_recorded_as_in_place_init_is() -> None:
    """model.apply(init_fn) between trainer.init_module() and fit: trunc_normal_'s Python loop
    made a new tensor from a deferred one, refused as a read before materialize."""

    def init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.trunc_normal_(module.weight, std=0.02)

    torch.manual_seed(SEED)
    eager = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4)).apply(init)
    torch.manual_seed(SEED)
    lazy = deferred_init(lambda: nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4)))
    lazy.apply(init)
    assert_same(eager, materialize(lazy))
    real = torch.empty(64)  # outside any recording the function is torch's own
    nn.init.trunc_normal_(real, std=0.02, generator=torch.Generator().manual_seed(0))
    assert torch.equal(real, torch.empty(64).normal_(0.0, 0.02, generator=torch.Generator().manual_seed(0)))


@pytest.mark.parametrize("own_generator", [False, True])
def test_orthogonal_init_after_the_block_is_recorded_as_one_call(own_generator: bool) -> None:
    """model.apply(init_fn) with nn.init.orthogonal_ between trainer.init_module() and fit: its QR made new
    tensors from the deferred weight, refused as a forward pass would be ('aten.new_empty.default on a
    deferred tensor ... outside recording()')."""

    def build() -> nn.Module:
        return nn.Sequential(nn.Linear(8, 6), nn.Linear(6, 12), nn.Conv2d(3, 4, 3))

    def init(generator: torch.Generator | None) -> Callable[[nn.Module], None]:
        def orthogonal(module: nn.Module) -> None:
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.orthogonal_(module.weight, gain=0.5, generator=generator)

        return orthogonal

    def generator() -> torch.Generator | None:
        return torch.Generator().manual_seed(3) if own_generator else None

    torch.manual_seed(SEED)
    eager_generator = generator()
    eager = build().apply(init(eager_generator))
    eager_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    lazy_generator = generator()
    lazy = deferred_init(build).apply(init(lazy_generator))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)
        materialize(lazy)
    assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), eager_rng)
    if own_generator:
        assert torch.equal(lazy_generator.get_state(), eager_generator.get_state())
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions are supported"):
        nn.init.orthogonal_(deferred_init(nn.Linear, 4, 3).bias)  # eager's error, at this line


@pytest.mark.parametrize("positional", [False, True])
def test_a_dead_orthogonal_from_an_own_generator_leaves_the_global_one_alone(positional: bool) -> None:
    """An orthogonal_ whose result a later init overwrites draws from the caller's generator, given by keyword
    or by position: the global generator is not moved past its draws (with a positional generator it was)."""

    def init_after(model: nn.Module, generator: torch.Generator) -> None:
        if positional:
            nn.init.orthogonal_(model[0].weight, 1.0, generator)
        else:
            nn.init.orthogonal_(model[0].weight, 1.0, generator=generator)
        nn.init.normal_(model[0].weight)  # the orthogonal_ is dead
        nn.init.normal_(model[1].weight)  # from the global generator

    def build() -> nn.Module:
        return nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))

    torch.manual_seed(SEED)
    eager = build()
    init_after(eager, torch.Generator().manual_seed(1))
    eager_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    lazy = deferred_init(build)
    init_after(lazy, torch.Generator().manual_seed(1))
    materialize(lazy)
    assert_same(eager, lazy)
    assert torch.equal(torch.get_rng_state(), eager_rng)


def test_a_lazy_module_dry_run_is_refused_with_the_fix() -> None:
    class Lazy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.LazyLinear(16), nn.ReLU(), nn.LazyLinear(4))
            self.net(torch.zeros(1, 8))  # torch's documented way to infer the shapes

    with recording(), pytest.raises(DeferredInitError, match=r"nn.LazyLinear makes its weights outside it"):
        Lazy()


class HoldsATuple(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 4)
        self.consts = (torch.ones(4) * 0.5,)  # not a parameter, buffer, attribute, list or dict item


def test_a_tensor_held_where_materialize_does_not_look_is_named_as_such() -> None:
    lazy = materialize(deferred_init(HoldsATuple))
    here = f"test_deferred.py:{sys._getframe().f_lineno + 2}"
    with pytest.raises(DeferredInitError, match=rf"at .*{here}, recorded at .* held where materialize does not look"):
        lazy.net(torch.ones(4)) * lazy.consts[0]


def test_saving_while_recording_says_so(tmp_path: Path) -> None:
    class Saves(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 4)
            torch.save(self.state_dict(), tmp_path / "weights.pt")

    with (
        recording(),
        pytest.raises(DeferredInitError, match="saving or pickling on a deferred tensor at .*, while it is recorded"),
    ):
        Saves()


class TiesByAddress(nn.Module):
    """Checks tying and aliasing by data_ptr(), as some libraries do before tying weights."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.net = nn.Linear(4, 8, bias=False), nn.Linear(8, 4)
        self.head = nn.Linear(8, 4, bias=False)
        self.head.weight = self.net.weight
        assert self.head.weight.data_ptr() == self.net.weight.data_ptr()
        assert self.net.weight[1].data_ptr() - self.net.weight.data_ptr() == 8 * 4
        if self.net.weight.data_ptr() != self.emb.weight.data_ptr():  # not tied: eager zeroes it
            nn.init.zeros_(self.net.weight)


def test_data_ptr_tells_recorded_tensors_apart_as_eager_does() -> None:
    torch.manual_seed(SEED)
    eager = TiesByAddress()
    torch.manual_seed(SEED)
    lazy = deferred_init(TiesByAddress)
    assert len({lazy.emb.weight.data_ptr(), lazy.net.weight.data_ptr(), lazy.net.bias.data_ptr()}) == 3
    assert_same(eager, materialize(lazy))
    assert not lazy.net.weight.any()


def test_a_storages_data_pointer_is_refused_naming_the_tensor_until_materialize() -> None:
    """torch's own 'Attempted to access the data pointer on an invalid python storage' said neither
    which tensor nor why; tensor.data_ptr() keeps answering stand-in addresses (ties are told apart)."""
    lazy = deferred_init(nn.Linear, 4, 3)
    line = sys._getframe().f_lineno + 1
    for read in (lambda t: t.untyped_storage().data_ptr(), lambda t: t[1:].untyped_storage().data_ptr()):
        with pytest.raises(
            DeferredInitError,
            match=rf"^untyped_storage\(\).data_ptr\(\) of Deferred(Parameter|Tensor)\(size=\((3, 4|2, 4)\), dtype=torch.float32, "
            rf"device=cpu\), recorded at {re.escape(__file__)}:{line - 2}, at {re.escape(__file__)}:{line}: a deferred "
            r"tensor has no memory, so no data pointer, until it is materialized\. Call "
            r"cs_lightning.deferred.materialize\(module\)",
        ):
            read(lazy.weight)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TypedStorage is deprecated
        with pytest.raises(DeferredInitError, match="no data pointer"):
            lazy.bias.storage().data_ptr()
    assert lazy.weight.untyped_storage().nbytes() == 48
    materialize(lazy)
    assert lazy.weight.untyped_storage().data_ptr() == lazy.weight.data_ptr() != 0


def test_a_real_tensor_set_as_a_deferred_ones_data_keeps_its_data_pointer_and_is_refused_by_materialize() -> None:
    """`.data = real` makes the deferred parameter view real memory: its storage is the real tensor's, whose
    data pointer stays readable (the storage was marked deferred for good, the real tensor's too)."""
    real = torch.zeros(3, 4)
    lazy = deferred_init(nn.Linear, 4, 3)
    lazy.weight.data = real
    assert lazy.weight.untyped_storage().data_ptr() == real.data_ptr() == real.untyped_storage().data_ptr()
    # which the recording cannot replay (a bare KeyError of a storage address said so)
    with pytest.raises(DeferredInitError, match=r"^a deferred tensor of shape \(3, 4\) was given real memory"):
        materialize(lazy)


class WritesThroughNumpy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.zeros(4))
        assert self.gain.detach().numpy().sum() == 0.0 and np.asarray(self.gain.detach()).shape == (4,)
        self.gain.detach().numpy()[:] = 1.0  # in eager, gain becomes ones


class WritesThroughNumpyAfterADraw(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))
        self.w.detach().numpy()[:4] = 0.0  # runs the recording eagerly: the array is the weight's memory


def test_a_write_through_numpy_while_recording_lands_as_in_eager() -> None:
    """It was lost (the array held a copy computed aside); the array is now the tensor's memory, made
    by running what was recorded so far, with a warning (a sinusoidal table filled through numpy)."""
    with pytest.warns(DeferredInitWarning, match=r"takes a NumPy array of a tensor's memory"):
        lazy = materialize(deferred_init(WritesThroughNumpy))
    assert torch.equal(lazy.gain, torch.ones(4))
    torch.manual_seed(SEED)
    eager = WritesThroughNumpyAfterADraw()
    torch.manual_seed(SEED)
    with pytest.warns(DeferredInitWarning, match="reads the value of a randomly initialized tensor"):
        lazy = materialize(deferred_init(WritesThroughNumpyAfterADraw))
    assert_same(eager, lazy)
    assert not lazy.w[:4].any()


@pytest.mark.parametrize(
    "read, what",
    [
        (lambda w: w.tolist(), r"tolist\(\)"),
        (lambda w: w.numpy(), r"numpy\(\)"),
        (lambda w: np.asarray(w), r"numpy.asarray\(\)"),
        (lambda w: w[0, 0].item(), "_local_scalar_dense.default"),
        (lambda w: bool(w[0, 0] > 0), "gt.Scalar"),
    ],
)
def test_reading_a_value_of_random_history_until_materialized_is_refused_and_draws_nothing(read, what: str) -> None:
    torch.manual_seed(SEED)
    eager = nn.Linear(4, 4)
    torch.manual_seed(SEED)
    lazy = deferred_init(nn.Linear, 4, 4)
    with pytest.raises(DeferredInitError, match=f"{what} on a deferred tensor at .*, outside recording"):
        read(lazy.weight)
    # the read ran and drew nothing: materialize sees the generator as recording left it
    assert_same(eager, materialize(lazy))


def test_reading_a_value_without_random_history_before_materialize_is_computed_aside() -> None:
    """An index buffer or class weights read between trainer.init_module() and fit (in setup): no
    draw to make in order, so the value is computed aside, as while recording."""

    class Table(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("ids", torch.arange(5))
            self.register_buffer("weights", torch.ones(3) / 6)

    lazy = deferred_init(Table)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeferredInitWarning)
        assert lazy.ids.tolist() == [0, 1, 2, 3, 4] and lazy.weights[0].item() == pytest.approx(1 / 6)
        assert np.asarray(lazy.weights).shape == (3,) and not np.asarray(lazy.weights).flags.writeable
    assert is_deferred(lazy)
    assert torch.equal(materialize(lazy).ids, torch.arange(5))


def test_deferred_tensors_of_another_recording_are_refused_by_name() -> None:
    first, second = deferred_init(nn.Linear, 3, 3), deferred_init(nn.Linear, 3, 3)
    with pytest.raises(TypeError, match=r"state_dict\['weight'\] is a deferred tensor"):
        materialize(second, state_dict=first.state_dict())
    with pytest.raises(RuntimeError, match="mixes deferred tensors of two recordings"):
        second.load_state_dict(first.state_dict())
    materialize(first)
    second.load_state_dict(first.state_dict())  # recorded as copies of real values
    materialize(second)
    assert_same(first, second)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "fastest"}, ValueError, "mode='fastest'"),
        ({"rng": "none"}, ValueError, "rng='none'"),
        ({"dtype": torch.int8}, TypeError, "dtype=torch.int8"),
        ({"device": "nowhere"}, ValueError, "device='nowhere'"),
        ({"state_dict": {"weight": torch.ones(2, 2)}}, ValueError, r"state_dict\['weight'\]"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        materialize(deferred_init(nn.Linear, 3, 3), **kwargs)


# -- laws ---------------------------------------------------------------------------

LAYERS = st.sampled_from(["linear", "conv", "norm", "bilinear", "tied", "slice"])


@given(st.lists(LAYERS, min_size=1, max_size=6), st.integers(1, 6), st.booleans(), st.integers(0, 2**31 - 1))
def test_any_small_stack_materializes_to_eager(kinds, width, reinit, seed) -> None:
    def build() -> nn.Module:
        layers: list[nn.Module] = []
        for kind in kinds:
            linears = [m for m in layers if isinstance(m, nn.Linear)]
            if kind == "linear" or (kind in ("tied", "slice") and not linears):
                layers.append(nn.Linear(width, width))
            elif kind == "conv":
                layers.append(nn.Conv1d(width, width, 3, padding=1))
            elif kind == "norm":
                layers.append(nn.BatchNorm1d(width))
            elif kind == "bilinear":
                layers.append(nn.Bilinear(width, width, width))
            elif kind == "tied":
                layers.append(nn.Linear(width, width))
                layers[-1].weight = linears[-1].weight
            else:
                linears[-1].weight.data[:, : width // 2 + 1].uniform_(-1, 1)
        model = nn.Sequential(*layers)
        if reinit:
            model.apply(lambda m: nn.init.xavier_normal_(m.weight) if isinstance(m, (nn.Linear, nn.Conv1d)) else None)
        return model

    assert_identical(build, seed)


def test_bfloat16_never_holds_the_float32_model() -> None:
    """Peak memory of a bf16 materialize stays far below the float32 model's size."""
    # VmHWM: this process's peak (ru_maxrss would start from its parent's, pytest's, and hide the growth)
    script = """
import re, torch
from torch import nn
from cs_lightning.deferred import deferred_init, materialize

def peak():
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read())[1]) * 1024

def build():
    model = nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(16)])
    return model.apply(lambda m: nn.init.normal_(m.weight) if isinstance(m, nn.Linear) else None)

lazy = deferred_init(build)
before = peak()
materialize(lazy, dtype=torch.bfloat16)
print(peak() - before)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    grew = int(done.stdout.strip())
    float32_model = 16 * 1024 * 1024 * 4
    assert 0.4 * float32_model < grew < 0.75 * float32_model, f"peak grew by {grew / 2**20:.0f} MiB"  # the bf16 model


def test_tensors_in_module_dicts_and_lists_are_materialized() -> None:
    """torchmetrics keeps its state defaults in a dict attribute of the module."""
    torchmetrics = pytest.importorskip("torchmetrics")

    def update_and_compute(metric):
        metric.update(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 1, 1, 2]))
        value = metric.compute()
        metric.reset()
        return value

    eager = torchmetrics.classification.MulticlassAccuracy(num_classes=3)
    with recording():
        lazy = torchmetrics.classification.MulticlassAccuracy(num_classes=3)
    materialize(lazy)
    assert torch.equal(update_and_compute(lazy), update_and_compute(eager))
    assert all(type(v) is torch.Tensor for v in lazy._defaults.values())


def test_materialize_inside_a_recording_block() -> None:
    def build() -> tuple[nn.Module, nn.Module]:
        first = nn.Linear(3, 3)
        second = nn.Linear(3, 1)
        return first, second

    torch.manual_seed(SEED)
    want = build()
    torch.manual_seed(SEED)
    with recording():
        first = materialize(nn.Linear(3, 3))
        second = nn.Linear(3, 1)
        assert not is_deferred(first) and is_deferred(second)
    materialize(second)
    for eager, lazy in zip(want, (first, second)):
        assert_same(eager, lazy)


_GPT_KEYS = sorted(GPT().state_dict())


@given(st.sets(st.sampled_from(_GPT_KEYS)), st.sampled_from(["eager", "skip_unread"]))
def test_any_partial_checkpoint_equals_eager_plus_load(keys, rng) -> None:
    """materialize(state_dict=S) == eager construction + load_state_dict(S, strict=False)."""
    torch.manual_seed(4321)
    source = {k: v for k, v in GPT().state_dict().items() if k in keys}
    torch.manual_seed(SEED)
    eager = GPT()
    eager.load_state_dict(source, strict=False)
    eager_rng = torch.get_rng_state()
    torch.manual_seed(SEED)
    lazy = materialize(deferred_init(GPT), state_dict=source, rng=rng)
    assert_same(eager, lazy)
    if rng == "eager":
        assert torch.equal(torch.get_rng_state(), eager_rng)


def test_a_mapped_checkpoint_stays_readable_and_keeps_edits_after_its_pages_are_handed_back(tmp_path) -> None:
    torch.manual_seed(5)
    torch.save(GPT().state_dict(), tmp_path / "full.pt")
    checkpoint = torch.load(tmp_path / "full.pt", mmap=True)
    with torch.no_grad():
        checkpoint["blocks.0.qkv.weight"].mul_(2)  # edited in place: copy-on-write pages
    expected = {key: value.clone() for key, value in checkpoint.items()}
    lazy = materialize(deferred_init(GPT), state_dict=checkpoint)
    for key, value in expected.items():
        assert torch.equal(checkpoint[key], value), key  # read again after the release: same values
        assert torch.equal(lazy.state_dict()[key], value), key


def _mapped_kb(path) -> int:
    """Kilobytes of ``path`` this process has mapped (resident), from /proc/self/smaps."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if "-" in line.split()[0]:  # a mapping's header line
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def _cached_pages(path) -> tuple[int, int]:
    """(pages of ``path`` in the page cache, pages of ``path``), by mincore on a fresh mapping."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        view = np.frombuffer(mapped, dtype=np.uint8)
        pages = -(-len(mapped) // mmap.PAGESIZE)
        status = ctypes.create_string_buffer(pages)
        assert libc.mincore(view.ctypes.data, len(mapped), status) == 0
        del view
    return sum(b & 1 for b in status.raw), pages


def test_a_checkpoint_that_fails_to_load_leaves_the_recording_as_it_was() -> None:
    build = lambda: nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    torch.manual_seed(3)
    eager = build()
    torch.manual_seed(3)
    lazy = deferred_init(build)
    before = torch.get_rng_state()
    unreadable = {"0.weight": torch.empty(8, 8, device="meta")}  # no data to copy
    with pytest.raises(NotImplementedError):
        materialize(lazy, state_dict=unreadable)
    assert torch.equal(torch.get_rng_state(), before)
    materialize(lazy)  # the retry is exact
    assert all(torch.equal(a, b) for a, b in zip(lazy.state_dict().values(), eager.state_dict().values()))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and /proc/self/smaps are Linux's")
def test_a_mapped_checkpoint_is_unmapped_once_copied_but_stays_in_the_page_cache(tmp_path) -> None:
    # MADV_PAGEOUT would evict it: the next run, or another rank, would read it from disk again.
    path = tmp_path / "full.pt"
    build = lambda: nn.Sequential(nn.Linear(256, 1024), nn.Linear(1024, 256))  # 2 MiB: whole pages
    torch.manual_seed(5)
    torch.save(build().state_dict(), path)
    with open(path, "rb") as file:
        os.fsync(file.fileno())  # clean pages: the kind a page-out can evict
    checkpoint = torch.load(path, mmap=True)
    total = sum(v.numel() * v.element_size() for v in checkpoint.values()) // 1024
    materialize(deferred_init(build), state_dict=checkpoint)
    assert _mapped_kb(path) < total / 10  # handed back: not counted in the process's memory
    cached, pages = _cached_pages(path)
    assert cached == pages


@pytest.mark.parametrize("fn", [lambda: torch.zeros(3), lambda: [nn.Linear(2, 2)]])
def test_deferred_init_refuses_a_function_returning_no_module(fn) -> None:
    with pytest.raises(
        DeferredInitUsageError,
        match=r"^deferred_init: .*<lambda> returned a (DeferredTensor|list), not a "
        r"torch.nn.Module; fix: return the module \(wrap several",
    ):
        deferred_init(fn)


@pytest.mark.parametrize("thing", [torch.zeros(3), [nn.Linear(2, 2)], None])
def test_materialize_refuses_what_is_not_a_module(thing) -> None:
    with pytest.raises(
        TypeError,
        match=rf"^materialize: got a {type(thing).__name__}; fix: pass the torch.nn.Module "
        r"that deferred_init or a recording\(\) block built",
    ):
        materialize(thing)


# -- an op that writes a whole tensor from its own values; dead draws that read tensors --------------------


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda w: torch.add(w, 1, out=w),
        lambda w: torch.clamp(w, -0.1, 0.1, out=w),
        lambda w: w.copy_(w),
        lambda w: w.copy_(w.contiguous()),
        lambda w: w.__setitem__(slice(None), w * 2),
        lambda w: w.__setitem__(slice(None), w),
    ],
    ids=["add out=w", "clamp out=w", "copy_(w)", "copy_(w.contiguous())", "w[:] = w * 2", "w[:] = w"],
)
def test_a_whole_tensor_written_from_its_own_values_keeps_them(rewrite) -> None:
    """Not an overwrite: the init before it is read (it was skipped as dead, leaving arbitrary memory)."""

    def build() -> nn.Module:
        layer = nn.Linear(3, 2)
        with torch.no_grad():
            rewrite(layer.weight)
        return layer

    assert_identical(build)


def test_batchnorm_loaded_without_num_batches_tracked_keeps_its_own() -> None:
    """BatchNorm's load_state_dict copies num_batches_tracked into itself when the key is missing."""
    torch.manual_seed(1)
    partial = {k: v for k, v in _conv_bn().state_dict().items() if "num_batches" not in k}

    def build() -> nn.Module:
        model = _conv_bn()
        model.load_state_dict(partial, strict=False)
        return model

    _, lazy = assert_identical(build)
    assert lazy[1].num_batches_tracked.item() == 0


def _conv_bn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=None))


@pytest.mark.parametrize(
    "draw",
    [
        lambda n: torch.poisson(torch.full((n,), 5.0)),
        lambda n: torch.bernoulli(torch.full((n,), 0.3)),
        lambda n: torch.multinomial(torch.full((n,), 1.0), 3).float(),
        lambda n: torch.normal(torch.zeros(n), torch.ones(n)),
    ],
    ids=["poisson", "bernoulli", "multinomial", "normal"],
)
@pytest.mark.parametrize("size", [17, 1000])
def test_a_dead_draw_that_reads_tensors_draws_from_their_values(draw, size) -> None:
    """Overwritten, it is still run to draw its numbers (their count may depend on its inputs): on its real
    inputs, which were left uncomputed (poisson drew another count of numbers, silently)."""

    class Overwritten(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("dead", draw(size))
            self.dead.zero_()
            self.after = nn.Parameter(torch.randn(21))

    assert_identical(Overwritten)


def test_a_recording_materialized_before_an_earlier_one_is_warned_of_at_once() -> None:
    torch.manual_seed(SEED)
    first, second = deferred_init(nn.Linear, 5, 5), deferred_init(nn.Linear, 5, 5)
    with pytest.warns(
        DeferredInitWarning, match=r"recorded .* after another recording .* not materialized yet"
    ) as seen:
        materialize(second)
        materialize(first)
    assert len([w for w in seen if issubclass(w.category, DeferredInitWarning)]) == 1  # not blamed on draws


def test_a_constructor_reading_a_recorded_tensors_memory_falls_back_to_eager() -> None:
    """torch.quasirandom.SobolEngine reads its state's memory before dispatch: a raw RuntimeError before."""

    class Sobol(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(3, 3)
            self.register_buffer("points", torch.quasirandom.SobolEngine(3, scramble=True).draw(4))

    torch.manual_seed(SEED)
    eager = Sobol()
    torch.manual_seed(SEED)
    with pytest.warns(DeferredInitWarning, match="read the values of a tensor being recorded.*Falling back to eager"):
        lazy = deferred_init(Sobol)
    assert_same(eager, materialize(lazy))


def test_a_root_module_with_its_own_load_state_dict_is_loaded_by_it() -> None:
    """materialize(state_dict=) copied the values into place past the override, silently unconverted."""

    class Transposing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 4)

        def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
            state_dict = dict(state_dict)
            state_dict["layer.weight"] = state_dict["layer.weight"].t()
            return super().load_state_dict(state_dict, strict=strict, assign=assign)

    saved = {"layer.weight": torch.arange(16.0).view(4, 4), "layer.bias": torch.zeros(4)}
    torch.manual_seed(SEED)
    eager = Transposing()
    eager.load_state_dict(saved)
    torch.manual_seed(SEED)
    with pytest.warns(DeferredInitWarning, match="with its own load_state_dict, loads a state_dict in its own way"):
        lazy = materialize(deferred_init(Transposing), state_dict=saved)
    assert_same(eager, lazy)
