"""CSXFSDPStrategy: one model sharded over N emulated CS-X systems (torch FSDP2), materialized by rows."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed
from lightning.fabric.utilities.distributed import _set_num_threads_if_needed
from lightning.fabric.utilities.optimizer import _optimizers_to_device
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import StochasticWeightAveraging, WeightAveraging
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method
from torch.distributed.tensor import DTensor
from torch.optim import Optimizer
from typing_extensions import override

from cs_lightning.deferred.materialize import cast_to
from cs_lightning.deferred.pages import advise_huge_pages
from cs_lightning.deferred.sharded import load_rows, materialize_sharded, sharded_optimizer_state
from cs_lightning.errors import ShardingError, UsageError, UsageTypeError, did_you_mean
from cs_lightning.strategies.checkpoints import (
    SHARDED_REST,
    check_checkpoint_matches,
    listed,
    load_mapped,
    model_shapes,
    sharded_checkpoint_problem,
    sharded_folder_error,
)
from cs_lightning.strategies.csx_ddp import every_ranks_checksums, same_on_every_rank
from cs_lightning.strategies.system import CSXSystemMixin
from cs_lightning.user_code import import_dotted

STATE_DICT_TYPES = ("sharded", "full")

# torch.distributed.checkpoint is imported where a sharded folder is read, as Lightning does: imported with
# the strategies, it would cost every `import cs_lightning` 72 modules, 2.4 MB and 30 ms.


# Where Lightning's sharded checkpoint keeps the model's tensors: under this prefix, by state_dict name.
_MODEL_KEY = "state_dict"
# Where a loaded checkpoint holds its sharded folder (a private key: user hooks expect a mapping under "state_dict",
# which a folder checkpoint lacks before its tensors are read, as under Lightning's ModelParallelStrategy).
_FOLDER_KEY = "_csx_sharded_folder"
# Every rank's copy of the buffers the ranks hold apart, in a checkpoint (see CSXFSDPStrategy.save_checkpoint).
_RANK_BUFFERS_KEY = "csx_rank_buffers"


class _ShardedFolder:
    """A checkpoint folder written by ``torch.distributed.checkpoint``, read once the model is sharded."""

    def __init__(self, path: Path) -> None:
        from torch.distributed.checkpoint import FileSystemReader
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        self.path = path
        metadata = FileSystemReader(path).read_metadata().state_dict_metadata  # the shards' index: no tensor read
        self.keys = set(metadata)  # what the shards hold
        # the model's state_dict names, with each tensor's full shape (None: saved as bytes)
        self.model_shapes = {
            key.removeprefix(f"{_MODEL_KEY}."): tuple(item.size) if isinstance(item, TensorStorageMetadata) else None
            for key, item in metadata.items()
            if key.startswith(f"{_MODEL_KEY}.")
        }


class _FSDP2(ModelParallelStrategy):
    """Lightning's ModelParallelStrategy, set up without asking the user to shard in ``configure_model``."""

    @override
    def setup(self, trainer: Trainer) -> None:
        assert self.model is not None and self.accelerator is not None
        self.accelerator.setup(trainer)
        self.model = self.precision_plugin.convert_module(self.model)
        self.model_to_device()
        self.barrier()
        if trainer.state.fn == TrainerFn.FITTING:
            self.setup_optimizers(trainer)
        self.setup_precision_plugin()
        if trainer.state.fn == TrainerFn.FITTING:
            _optimizers_to_device(self.optimizers, self.root_device)


# The LightningModule methods Lightning calls for a step: each gathers the root's parameters as forward does.
_STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")


class CSXFSDPStrategy(CSXSystemMixin, _FSDP2):
    """Train one model sharded over N CS-X systems (FSDP2), each materializing only its own rows, exactly.

    The model is sharded automatically: each block of every ``nn.ModuleList`` (or each module of
    ``block_classes``), then the LightningModule as the root (its forward and step methods gather the rest),
    with ``fully_shard`` on a data-parallel mesh of all ranks (data-parallel size = world size:
    every rank gets its own batches). A model built in ``configure_model()`` or under
    ``trainer.init_module()`` is recorded and each rank generates only its rows of each
    parameter (``Shard(0)``, ``torch.chunk`` along dim 0): the gathered weights, buffers and the
    generator state afterwards equal one-process eager construction, bit for bit. A model
    built in ``__init__`` is sharded after the fact.

    Args:
        block_classes: module classes (or their dotted import paths) to shard each instance of,
            instead of the children of every ``nn.ModuleList``.
        state_dict_type: ``"sharded"`` (a folder, one file per rank, through
            ``torch.distributed.checkpoint``) or ``"full"`` (one file, gathered on rank 0).
        **kwargs: the CS-X options (``trace_check``, ``compile``, ``compile_backend``, ``init_mode``,
            ``strict_schedulers``: see :class:`~cs_lightning.strategies.CSXOptions`; ``init_mode=
            "independent"`` generates each tensor whole and keeps the rows), ``process_group_backend``
            and ``timeout``.
    """

    strategy_name = "csx_fsdp"
    description = "Train one model sharded over N CS-X systems (FSDP2), each materializing only its own rows, exactly."
    # ModelParallelStrategy arguments this strategy decides, with how: a value given would be ignored, so it is
    # refused (the CLI says why too, where jsonargparse would only say there is no such argument)
    decided_arguments: ClassVar[Mapping[str, str]] = {
        "data_parallel_size": "every rank is a data-parallel replica: the world size",
        "tensor_parallel_size": "no tensor parallelism: 1",
        "save_distributed_checkpoint": "state_dict_type='sharded' or 'full' picks it",
    }

    def __init__(
        self,
        *,
        block_classes: type[nn.Module] | str | Iterable[type[nn.Module] | str] | None = None,
        state_dict_type: str = "sharded",
        **kwargs: Any,
    ) -> None:
        if state_dict_type not in STATE_DICT_TYPES:
            hint = did_you_mean(str(state_dict_type), STATE_DICT_TYPES)
            raise UsageError(
                f"state_dict_type={state_dict_type!r} is not supported; {hint}use one of {STATE_DICT_TYPES}."
            )
        decided = sorted(set(kwargs) & self.decided_arguments.keys())
        if decided:
            name = decided[0]
            why = self.decided_arguments[name]
            raise UsageError(f"CSXFSDPStrategy sets {name} itself ({why}); remove {name}={kwargs[name]!r}.")
        # Passed by name, so that jsonargparse, which follows **kwargs into this call, does not offer them under
        # trainer.strategy.init_args with the parent's defaults (which the check above would refuse).
        # The data-parallel size is the world size, known in setup_environment.
        super().__init__(
            data_parallel_size="auto",
            tensor_parallel_size=1,
            save_distributed_checkpoint=state_dict_type == "sharded",
            **kwargs,
        )
        if self.options.compile and self.options.trace_check:
            raise UsageError(
                "compile=True with trace_check=True captures each step as one graph, which the"
                " weight gathers of FSDP2 (hooks TorchDynamo does not trace) always break; add trace_check=False"
                " to compile the code between them (the step is then not checked), or drop compile=True."
            )
        self.block_classes = _block_classes(block_classes)
        self.state_dict_type = state_dict_type
        self.sharded_whole: dict[str, str] = {}  # parameters generated whole (rows kept), with the op why

    @override
    def setup_environment(self) -> None:
        """Every rank is a data-parallel replica of one sharded model: data-parallel size = world size. Every
        rank runs on its share of the cores, as under DDP (ModelParallelStrategy sets it only on the rank that
        starts the others: the rest ran on all cores, each thread competing with the other ranks')."""
        if self._layer_sync is not None:  # Trainer(sync_batchnorm=True), which ModelParallelStrategy ignores
            raise UsageError(
                "sync_batchnorm=True: csx_fsdp does not synchronize BatchNorm statistics (FSDP2 keeps each rank's"
                " running statistics its own); drop sync_batchnorm=True, or train with strategy='csx_ddp', whose"
                " SyncBatchNorm needs CUDA"
            )
        callbacks = self._connected_module.trainer.callbacks  # type: ignore[attr-defined]
        averaging = [c for c in callbacks if isinstance(c, (StochasticWeightAveraging, WeightAveraging))]
        if averaging:
            # Lightning's SWA refuses its own FSDP: these copy the module before sharding, then mix that copy's
            # plain tensors with the sharded ones (a DTensor error a step or an epoch in)
            raise UsageError(
                f"{type(averaging[0]).__name__} does not support sharded models: csx_fsdp shards the weights it"
                " would average; drop the callback, or train with strategy='csx_ddp', which keeps a whole model"
                " per rank"
            )
        self._data_parallel_size = self.num_nodes * self.num_processes
        _set_num_threads_if_needed(num_processes=self.num_processes)
        super().setup_environment()

    @override
    def setup(self, trainer: Trainer) -> None:
        """Shard a model that was built eagerly (in ``__init__``), at full memory, with a warning."""
        module = self._connected_module
        if not self._is_recorded(module):
            self._shard_eager(module)
        super().setup(trainer)

    def _shard_eager(self, module: nn.Module) -> None:
        if any(isinstance(m, FSDPModule) for m in module.modules()):
            return
        rank_zero_warn(
            "csx_fsdp: the model was built in __init__, so every rank held all of it before sharding; build it"
            " in configure_model() (or under trainer.init_module()) to have each rank make only its own rows."
        )
        _check_shardable(module, _blocks(module, self.block_classes))
        self._shard(module)

    @property
    @override
    def restore_checkpoint_after_setup(self) -> bool:
        """Read a checkpoint before setup: a recorded model is then sharded straight from it (no init)."""
        return False

    @property
    @override
    def lightning_restore_optimizer(self) -> bool:
        return True

    @override
    def load_checkpoint(self, checkpoint_path: _PATH, weights_only: bool | None = None) -> dict[str, Any]:
        """A single file is memory-mapped (each rank reads its rows only); a sharded folder's tensors are
        read by ``torch.distributed.checkpoint`` once the model is sharded. Another folder is refused."""
        path = Path(self.broadcast(checkpoint_path))
        if not path.is_dir():
            return load_mapped(path, weights_only)
        problem = sharded_checkpoint_problem(path)
        if problem is not None:  # else torch would fail reading it, naming a file the folder lacks
            raise sharded_folder_error(str(checkpoint_path), problem)
        checkpoint = load_mapped(path / SHARDED_REST, weights_only)  # on CPU, as a file: also when saved on CUDA
        folder = checkpoint[_FOLDER_KEY] = _ShardedFolder(path)
        if any(name.startswith("optimizer_") for name in folder.keys):  # else saved with save_weights_only
            checkpoint["optimizer_states"] = []  # in the folder: Lightning only checks that the key is there
        return checkpoint

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: _PATH, storage_options: Any | None = None) -> None:
        """Keep every rank's copy of the buffers the ranks hold apart (BatchNorm's running statistics, which FSDP2
        leaves each rank's own), of which the state dict holds one: a resumed run then goes on as the uninterrupted
        one. Every rank calls this (a collective)."""
        apart = self._buffers_apart()
        if apart is not None:  # (on rank 0, which writes the checkpoint's metadata)
            checkpoint[_RANK_BUFFERS_KEY] = apart
        super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    @override
    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        """Shard the model, initializing none of what the checkpoint provides, then load this rank's rows."""
        module = self._connected_module
        folder: _ShardedFolder | None = checkpoint.get(_FOLDER_KEY)
        shapes = folder.model_shapes if folder is not None else model_shapes(checkpoint["state_dict"])
        check_checkpoint_matches(module, shapes, strict)
        provided = set(shapes)
        if self._is_recorded(module):
            self._materialize_sharded(module, provided, rng=self._init_draws(checkpoint))
        else:
            self._shard_eager(module)
        if folder is not None:  # what the folder holds (all, unless strict_loading is off): the rest as initialized
            from torch.distributed.checkpoint import load as dcp_load
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
                set_model_state_dict,
            )

            held = {name: value for name, value in get_model_state_dict(module).items() if name in provided}
            model_state = {_MODEL_KEY: held}
            dcp_load(model_state, checkpoint_id=folder.path)
            set_model_state_dict(module, model_state[_MODEL_KEY], options=StateDictOptions(strict=strict))
        else:
            load_rows(module, checkpoint["state_dict"])
        self._restore_rank_buffers(checkpoint.get(_RANK_BUFFERS_KEY))
        self._restore_generators(checkpoint)

    def _restore_rank_buffers(self, saved: list[dict[str, torch.Tensor]] | None) -> None:
        """This rank's copy of the buffers the ranks held apart when the checkpoint was saved (see
        ``save_checkpoint``); with another number of ranks, every rank keeps the one copy the state dict held."""
        if saved is None:
            return
        if len(saved) != self.world_size:
            rank_zero_warn(
                f"the checkpoint holds {len(saved)} ranks' copies of buffers the ranks held apart "
                f"({listed(sorted(saved[0]))}) and this run has {self.world_size} rank(s): every rank starts from "
                "the one copy of its state dict"
            )
            return
        buffers = dict(self._connected_module.named_buffers())
        for name, value in saved[self.global_rank].items():
            held = buffers.get(name)
            if held is not None and held.shape == value.shape:  # else left as loaded (strict_loading=False)
                held.copy_(value)

    def _buffers_apart(self) -> list[dict[str, torch.Tensor]] | None:
        """On rank 0, every rank's copy (on the CPU, in rank order) of the state-dict buffers whose bits differ
        between ranks; None elsewhere, and when none does. A collective: a checksum of each buffer from every
        rank, then the differing buffers, to rank 0."""
        if self.world_size == 1:
            return None
        module = self._connected_module
        saved = module.state_dict().keys()
        buffers = {name: buffer.detach() for name, buffer in module.named_buffers() if name in saved}
        if not buffers:
            return None
        every = every_ranks_checksums(list(buffers.values()), self.root_device)
        apart = [name for k, name in enumerate(buffers) if any(other[k] != every[0][k] for other in every[1:])]
        if not apart:
            return None
        copies = {name: buffers[name].cpu().clone() for name in apart}
        gathered: list[Any] | None = [None] * self.world_size if self.global_rank == 0 else None
        torch.distributed.gather_object(copies, gathered, dst=0)
        return gathered

    @override
    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """An optimizer that has not stepped yet is saved as it is: torch's state-dict helper would give
        it a state by running a zero-gradient step (a step count of 1), changing the training to come. Its
        parameters are keyed as the helper keys them: by name in a folder, else (Lightning's re-key of a full
        state) by position in ``module.parameters()``, sorted in each group."""
        raw = optimizer._optimizer if isinstance(optimizer, LightningOptimizer) else optimizer
        if raw.state:
            return super().optimizer_state(optimizer)
        module = self._connected_module
        keys: list[list[Any]]
        if self._save_distributed_checkpoint:
            names = {param: name for name, param in module.named_parameters()}
            keys = [[names[param] for param in group["params"]] for group in raw.param_groups]
        else:
            positions = {param: key for key, param in enumerate(module.parameters())}
            keys = [sorted(positions[param] for param in group["params"]) for group in raw.param_groups]
        state = raw.state_dict()
        return {**state, "param_groups": [{**g, "params": k} for g, k in zip(state["param_groups"], keys)]}

    @override
    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        """Each rank takes its rows of the optimizer state; a state saved before the first step is empty, and a
        parameter saved without state (no gradient yet) is left without, as ``Optimizer.load_state_dict`` does."""
        self._check_checkpoint_schedulers(checkpoint)
        folder: _ShardedFolder | None = checkpoint.get(_FOLDER_KEY)
        for k, optimizer in enumerate(self.optimizers):
            if folder is None:
                full = checkpoint["optimizer_states"][k]
                optimizer.load_state_dict(sharded_optimizer_state(self._connected_module, optimizer, full))
                continue
            key = f"optimizer_{k}"
            if not any(name.startswith(f"{key}.state.") for name in folder.keys):
                continue  # saved before the first step: nothing to load
            # the optimizer's own state to load into (made by a zero-gradient step at lr 0, then overwritten),
            # cut to the parameters the folder holds a state for: DCP refuses to load a key it lacks
            from torch.distributed.checkpoint import load as dcp_load
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_optimizer_state_dict,
                set_optimizer_state_dict,
            )

            own = get_optimizer_state_dict(self._connected_module, optimizer)
            state = {key: _held_states(own, f"{key}.state", folder.keys)}
            dcp_load(state, checkpoint_id=folder.path)
            # not strict: torch refuses a trainable parameter without state, which plain load_state_dict allows
            options = StateDictOptions(strict=False)
            set_optimizer_state_dict(self._connected_module, optimizer, state[key], options=options)

    @override
    def _materialize(self, module: nn.Module, state_dict: Mapping[str, Any] | None, rng: str = "eager") -> None:
        self._materialize_sharded(module, (), rng)

    def _materialize_sharded(self, module: nn.Module, provided: Collection[str], rng: str) -> None:
        """Shard the recorded model and make each rank's rows only (see ``deferred.sharded``). A model FSDP2
        cannot shard is refused while it is still recorded: it can be trained another way (``strategy="csx"``)."""
        if isinstance(module, FSDPModule):  # FSDP2 shards a module once; torch says so with an assertion
            raise UsageError(
                "csx_fsdp: configure_model() built new layers on a model that an earlier run of this Trainer sharded"
                " (trainer.validate, test or predict after fit calls it again), and a model is sharded once. Fix: build"
                " them only on the first call, returning early from configure_model() when they exist"
                " (`if getattr(self, 'net', None) is not None: return`)"
            )
        _check_shardable(module, _blocks(module, self.block_classes), self._weight_dtype)
        started = time.perf_counter()

        def prepare(model: nn.Module) -> None:
            self._shard(model)
            # allocate what each rank holds: its shards, the buffers (set right after)
            model._apply(lambda t: _allocated(t, self.root_device) if t.is_meta else t)

        self.sharded_whole = materialize_sharded(
            module,
            self.root_device,
            self._weight_dtype,
            prepare=prepare,
            agree=self._all_ranks,
            rank_0s=self._rank_0s,
            mode=self.options.init_mode,
            provided=provided,
            rng=rng,
        )
        if self.sharded_whole:
            named = [f"{name} ({why})" for name, why in self.sharded_whole.items()]
            rank_zero_info(f"csx_fsdp: generated whole on every rank, rows kept (no row-wise init): {listed(named)}")
        self._add_phase("materialize", time.perf_counter() - started)

    def _shard(self, module: nn.Module) -> None:
        """Shard the module (``_fully_shard``), its eager tensors (built outside a recording) made rank 0's on
        every rank first: each rank keeps its rows of them, rows of another model on ranks seeded apart."""
        eager = [t for t in (*module.parameters(), *module.buffers()) if not t.is_meta]
        if self.world_size > 1 and not same_on_every_rank(eager, self._collectives_device):
            rank_zero_warn(
                "csx_fsdp: the tensors built outside trainer.init_module() and configure_model() differ across "
                "ranks (were they built from different seeds?); broadcasting rank 0's before sharding, as DDP does."
                " Seed every rank alike to skip it."
            )
            for tensor in eager:
                tensor.data.copy_(self._rank_0s(tensor.data))
        self._fully_shard(module)

    def _fully_shard(self, module: nn.Module) -> None:
        """``fully_shard`` each block, then the LightningModule as the root, whose step methods
        gather what no block holds, as its forward does: a ``training_step`` may call a
        submodule directly (``self.encoder(x)``) instead of ``self(x)``."""
        mesh = self.device_mesh["data_parallel"]
        blocks = _blocks(module, self.block_classes)
        if not blocks and self.block_classes != ():  # () asks for the root alone
            rank_zero_warn(_one_group(module, self.block_classes))
        for block in blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(module, mesh=mesh)
        for method in _STEP_METHODS:
            register_fsdp_forward_method(module, method)

    def _all_ranks(self, ok: bool) -> bool:
        """True when ``ok`` on every rank (one all-reduce of one number)."""
        flag = torch.tensor([0 if ok else 1], dtype=torch.int32, device=self._collectives_device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return int(flag.item()) == 0

    def _rank_0s(self, tensor: torch.Tensor) -> torch.Tensor:
        """Rank 0's ``tensor``, on every rank, where ``tensor`` is."""
        given = tensor.to(self._collectives_device, copy=True)
        torch.distributed.broadcast(given, src=0)
        return given.to(tensor.device)

    @property
    def _collectives_device(self) -> torch.device:
        return self.root_device if torch.distributed.get_backend() == "nccl" else torch.device("cpu")


def _held_states(optimizer_state: dict[str, Any], prefix: str, keys: Collection[str]) -> dict[str, Any]:
    """``optimizer_state`` (``get_optimizer_state_dict``'s: states by parameter name) without the parameters
    that have no entry ``<prefix>.<name>.<entry>`` among a folder's ``keys``: those had no state when saved."""
    held = {
        name: entries
        for name, entries in optimizer_state["state"].items()
        if any(f"{prefix}.{name}.{entry}" in keys for entry in entries)
    }
    return {**optimizer_state, "state": held}


def _allocated(meta: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Real memory for a meta tensor (a DTensor shard: its local rows), huge pages asked for before it is filled."""
    real = torch.empty_like(meta, device=device)
    advise_huge_pages(real.to_local() if isinstance(real, DTensor) else real)
    return real


def _blocks(module: nn.Module, classes: tuple[type[nn.Module], ...] | None) -> list[nn.Module]:
    """The modules to shard one by one, innermost first (fully_shard's order: children before parents)."""
    if classes is not None:
        found = [m for m in module.modules() if isinstance(m, classes) and m is not module]
    else:
        found = [block for m in module.modules() if isinstance(m, nn.ModuleList) for block in m]
    found = [m for m in found if next(m.parameters(), None) is not None]
    depth = {id(m): name.count(".") for name, m in module.named_modules()}
    return sorted(found, key=lambda m: -depth[id(m)])


def _one_group(module: nn.Module, classes: tuple[type[nn.Module], ...] | None) -> str:
    """Why a model is sharded as one group, what that costs, and how to have it sharded block by block."""
    name = type(module).__name__
    found = (
        f"no module of {name} is one of block_classes ({', '.join(c.__name__ for c in classes)})"
        if classes
        else f"{name} has no nn.ModuleList of layers with parameters"
    )
    return (
        f"csx_fsdp: {found}, so the whole model is one sharded group: each step gathers all of its weights at once"
        " on every rank; name the classes of its repeated layers in CSXFSDPStrategy(block_classes=[...]) to gather"
        " them one at a time."
    )


def _check_shardable(root: nn.Module, blocks: list[nn.Module], dtype: torch.dtype | None = None) -> None:
    """Refuse in words, before anything is sharded, what FSDP2 refuses later in a traceback
    (a 0-dim parameter) or at the first forward (two dtypes among one sharded group's trainable parameters).
    ``dtype``: what a recorded model's floating-point parameters become as it is materialized."""
    names = {id(m): name for name, m in root.named_modules()}
    seen: set[int] = set()
    for group in [*blocks, root]:  # fully_shard's groups: a block's parameters, then the rest
        prefix = f"{names[id(group)]}." if group is not root else ""
        params = [(prefix + n, p) for n, p in group.named_parameters() if id(p) not in seen]
        seen.update(id(p) for _, p in params)
        for name, param in params:
            if param.dim() == 0:
                raise ShardingError(
                    f"csx_fsdp: parameter {name!r} is a scalar (0-dim), which FSDP2 cannot shard by rows;"
                    " fix: give it shape (1,), e.g. torch.tensor([2.0]) for torch.tensor(2.0)"
                )
        by_dtype = {cast_to(dtype, p.dtype): name for name, p in params if p.requires_grad}  # frozen may differ (LoRA)
        if len(by_dtype) > 1:
            where = "the parameters no block holds" if group is root else f"block {names[id(group)]!r}"
            mixed = ", ".join(f"{name} ({str(dtype).removeprefix('torch.')})" for dtype, name in by_dtype.items())
            raise ShardingError(
                f"csx_fsdp: {where} mix dtypes ({mixed}), and FSDP2 needs one dtype per group's trainable parameters;"
                " fix: give the module of the other dtype its own block (CSXFSDPStrategy(block_classes=[...]))"
                " or build the model in one dtype"
            )


def _block_classes(
    given: type[nn.Module] | str | Iterable[type[nn.Module] | str] | None,
) -> tuple[type[nn.Module], ...] | None:
    """The classes named by ``block_classes``: a list of them, or one alone."""
    if given is None:
        return None
    if isinstance(given, (str, type)):
        return (_block_class(given),)
    if not isinstance(given, Iterable):
        raise UsageTypeError(
            f"block_classes: {given!r} is not a module class, a dotted import path of one, or a list of them,"
            " e.g. ['my_project.model.Block']."
        )
    return tuple(_block_class(c) for c in given)


def _block_class(spec: type[nn.Module] | str) -> type[nn.Module]:
    if isinstance(spec, type) and issubclass(spec, nn.Module):
        return spec
    if isinstance(spec, str) and "." in spec:
        try:
            found = import_dotted(spec)
        except ImportError as error:
            raise UsageError(
                f"block_classes: {spec!r} cannot be imported ({error}); give a module class or"
                " its dotted import path, e.g. 'my_project.model.Block'."
            ) from error
        return _block_class(found)
    raise UsageTypeError(
        f"block_classes: {spec!r} is not an nn.Module class nor a dotted import path of one,"
        " e.g. 'my_project.model.Block'."
    )
