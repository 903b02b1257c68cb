"""What makes a Lightning strategy a CS-X system; shared by the single, data-parallel and sharded strategies.

* Lazy model: ``configure_model()`` and ``trainer.init_module()`` record instead of allocating;
  the model is materialized once, on the root device in the precision's dtype (under csx_fsdp each rank
  makes its own rows only), straight from the checkpoint when ``fit``/``validate``/... get a ``ckpt_path``
  (no random init then).
  As a ``trainer.init_module()`` block ends the global generator jumps to where eager construction
  leaves it (when the recorded draws' counts are known), so random numbers drawn before ``fit`` are eager's.
* Lazy factories: ``configure_optimizers()`` runs after materialization; a closed-form
  scheduler returned bare steps every optimizer step.
* Traced execution: the first training step runs as a CS-X traces it (``trace.lazy_trace``), and so
  does each next one until a step returns a loss (one returning None skipped its batch: no verdict):
  a host read or a value-dependent shape in the user's code fails before the update it precedes,
  with the file and line; a step that passed before is not checked again (``trace_cache``); ``compile=True``
  compiles the training step's forward and the optimizer update, with learning rates held as in-place tensors
  (the model called elsewhere, in a hook, runs eagerly).
* Step closures run at the end of each step; the time to first loss is measured and reported.

This module is the strategy's lifecycle, hook by hook; what the hooks do at length lives in modules named for it:
``options`` (the CS-X options and their checks), ``checkpoints`` (what a checkpoint holds besides Lightning's, and
what is refused), ``trace_check`` (the checked step) and ``compiling`` (``compile=True``).
"""

from __future__ import annotations

import atexit
import inspect
import math
import os
import time
import warnings
from collections.abc import Callable, Generator, Mapping
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any, cast

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.strategies import _StrategyRegistry
from lightning.fabric.utilities.types import _PATH, _Stateful
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BatchSizeFinder, LearningRateFinder
from lightning.pytorch.loops import _FitLoop
from lightning.pytorch.loops.progress import _ProcessedTracker
from lightning.pytorch.strategies import Strategy
from lightning.pytorch.trainer.states import TrainerFn, TrainerStatus
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.types import STEP_OUTPUT
from torch import nn
from torch.optim import Optimizer
from typing_extensions import override

from cs_lightning import deferred, trace
from cs_lightning.config_blocks import keyword_names
from cs_lightning.data import ResumableDataLoader
from cs_lightning.deferred.materialize import custom_loading, loaded_in_full, replaced
from cs_lightning.deferred.oplog import Recording
from cs_lightning.deferred.recorder import current_recorder, jump_past_draws
from cs_lightning.errors import DeferredInitWarning, UsageError
from cs_lightning.schedulers import Scheduler
from cs_lightning.schedulers.from_torch import convert_lightning_configs
from cs_lightning.schedulers.registry import TWO_WRITERS_FIX, two_writers
from cs_lightning.schedulers.resume import check_scheduler_states
from cs_lightning.step_closure import StepBoundary, run_at_once
from cs_lightning.strategies.checkpoints import (
    RNG_KEY,
    check_checkpoint_matches,
    every_rank_rng_states,
    folder_refused,
    load_mapped,
    model_shapes,
    restore_rank_rng_states,
    users_scheduler_states,
)
from cs_lightning.strategies.compiling import (
    compile_forwards,
    compiled_update,
    forget_compiled_updates,
    scheduled_settings,
    shadowed,
)
from cs_lightning.strategies.options import (
    CSX_OPTION_NAMES,
    CSXOptions,
    check_timeout,
    refuse_unknown,
    with_options_signature,
)
from cs_lightning.strategies.trace_check import checked_step
from cs_lightning.time_to_first_loss import TimeToFirstLoss, loss_of, skipped

# Parameter dtype per Lightning precision; the others keep float32 weights.
_WEIGHT_DTYPES = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "64-true": torch.float64}


class CSXSystemMixin(Strategy):
    """Mixed into a Lightning strategy (first in its bases), makes it a CS-X system: lazy model, lazy
    factories, traced step, step closures, time to first loss.

    Keyword arguments: the CS-X options (:class:`CSXOptions`); the rest go to the Lightning strategy.
    Each option reads as an attribute too (``strategy.init_mode``), for users; the strategies' own code reads
    ``self.options``, which mypy checks.
    """

    strategy_name: str
    description: str  # what Lightning's registry shows (not the docstring: ``python -OO`` strips those)

    def __init__(self, **kwargs: Any) -> None:
        self.options = CSXOptions.take(kwargs)
        refuse_unknown(type(self), CSXSystemMixin, kwargs, self._lightning_arguments())
        check_timeout(type(self), kwargs)
        super().__init__(**kwargs)
        self._time_to_first_loss: TimeToFirstLoss | None = None
        self._driven_clock: TimeToFirstLoss | None = None  # the clock, when the strategy's hooks drive it
        self._first_loss: Any = None  # what the first training_step returned, for the driven clock
        self._tuners: list[BatchSizeFinder | LearningRateFinder] = []  # the fit's, whose trial steps the clock skips
        self._step = StepBoundary()
        self._evaluation = ExitStack()  # while validation runs: closures run at once
        self._recorded = False
        self._recordings: list[Recording] = []  # the blocks recorded for this trainer's runs
        self._check_pending = False
        self._vouch: Callable[[], None] | None = None  # remembers the checked step's pass, once its update is done
        self._capture: trace.Capture | None = None  # the compiled forwards, installed around each training step

    def __getattr__(self, name: str) -> Any:
        # reached only when normal lookup fails: the options, by name, as attributes (the users' way to read them)
        options = self.__dict__.get("options")
        if options is not None and name in CSX_OPTION_NAMES:
            return getattr(options, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def _lightning_arguments(cls) -> set[str] | None:
        """The keyword arguments the Lightning strategy takes, None when it takes any (``**kwargs``)."""
        names, takes_any = keyword_names(super().__init__)
        return None if takes_any else set(names)

    @property
    def csx_options(self) -> dict[str, Any]:
        """The CS-X options this strategy was built with (what its data-parallel sibling takes too)."""
        return {name: getattr(self.options, name) for name in CSX_OPTION_NAMES}

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: _StrategyRegistry) -> None:
        strategy_registry.register(cls.strategy_name, cls, description=cls.description, override=True)

    @override
    def connect(self, model: LightningModule) -> None:
        """Start the time-to-first-loss clock here: the first thing ``fit()`` does with the strategy."""
        started = time.perf_counter()
        super().connect(model)
        trainer = model._trainer
        if trainer is None or trainer.state.fn != TrainerFn.FITTING:
            return
        # Trainer.callbacks is set by Lightning's callback connector, not declared on Trainer
        callbacks = trainer.callbacks  # type: ignore[attr-defined]
        given = [callback for callback in callbacks if isinstance(callback, TimeToFirstLoss)]
        # without one from the user, drive a clock from the strategy's hooks: no callback on every
        # step, and no ttfl/* metrics the user did not ask for (the line is printed)
        clock = given[0] if given else TimeToFirstLoss(log_metrics=False)
        self._time_to_first_loss = clock
        self._driven_clock = None if given else clock
        self._first_loss = None
        self._tuners = [
            callback for callback in callbacks if isinstance(callback, (BatchSizeFinder, LearningRateFinder))
        ]
        clock.start(at=started)

    @override
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Open the step whose closures run after its optimizer step (accumulated batches share one step)."""
        super().on_train_batch_start(batch, batch_idx)
        if not self._step.is_open:
            self._step.begin()
        clock = self._clock_of_steps()
        if clock is not None:
            clock.step_started()

    @override
    def on_train_end(self) -> None:
        super().on_train_end()
        self._step.end()

    @override
    def on_exception(self, exception: BaseException) -> None:
        super().on_exception(exception)
        self._evaluation.close()
        self._step.abandon(exception)

    @override
    def on_validation_start(self) -> None:
        """Validation may run inside an open step (between accumulated batches): its closures run at once."""
        super().on_validation_start()
        self._evaluation.enter_context(run_at_once())

    @override
    def on_validation_end(self) -> None:
        self._evaluation.close()
        super().on_validation_end()

    @override
    @contextmanager
    def tensor_init_context(self, empty_init: bool | None = None) -> Generator[None, None, None]:
        """Record modules built here (``configure_model``, ``trainer.init_module``) instead of allocating them.

        ``empty_init`` is not needed: materialization skips every init whose values a checkpoint or a
        later ``load_state_dict`` overwrites, and gives the rest eager's values, never uninitialized memory.
        """
        started = time.perf_counter()
        outermost = current_recorder() is None  # an inner block joins the outer one, which ends later
        with deferred.recording(), self.precision_plugin.tensor_init_context():
            block = current_recorder()
            if block is not None:
                self._recordings.append(block)
            yield
        # inside a run this block is configure_model's: materialize follows at once, nothing draws in between
        jumps = outermost and not self._running() and self.options.init_mode == "exact"
        if jumps and block is not None:
            # after trainer.init_module() the generator continues where eager construction leaves it:
            # draws made before fit (random_split in a DataModule, torch.randn) are eager's
            jump_past_draws(block)
        self._recorded = True
        self._add_phase("construct", time.perf_counter() - started)

    def _running(self) -> bool:
        """A fit/validate/test/predict is running (``trainer.init_module()`` is used before one)."""
        module = self.lightning_module
        trainer = module._trainer if module is not None else None
        return trainer is not None and trainer.state.status == TrainerStatus.RUNNING

    @override
    def load_checkpoint(self, checkpoint_path: _PATH, weights_only: bool | None = None) -> dict[str, Any]:
        """Memory-map a local checkpoint, so weights are read once, straight into the model."""
        if os.path.isdir(checkpoint_path):  # torch.load's IsADirectoryError would not say what the folder is
            raise folder_refused(str(checkpoint_path), self.strategy_name)
        if type(self.checkpoint_io) is not TorchCheckpointIO or not os.path.isfile(checkpoint_path):
            return super().load_checkpoint(checkpoint_path, weights_only=weights_only)
        return load_mapped(checkpoint_path, weights_only)

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: _PATH, storage_options: Any | None = None) -> None:
        """Save every rank's random generators too: a resumed run then draws what the uninterrupted one would.

        Every rank calls this (Lightning's rule for ``trainer.save_checkpoint``), so the states are gathered. A
        weights-only checkpoint (no optimizer states) gets none: Lightning refuses to resume a fit from it.
        """
        if "optimizer_states" in checkpoint:
            checkpoint[RNG_KEY] = every_rank_rng_states(self.world_size)
        super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    @override
    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        """Refuse first a checkpoint whose schedulers the configured ones cannot resume from: Lightning
        loads them next, paired by position, silently when their numbers differ."""
        self._check_checkpoint_schedulers(checkpoint)
        super().load_optimizer_state_dict(checkpoint)

    def _check_checkpoint_schedulers(self, checkpoint: Mapping[str, Any]) -> None:
        if "lr_schedulers" in checkpoint:  # else Lightning says the checkpoint holds weights only
            trainer = self._connected_module.trainer
            # Trainer.callbacks is set by Lightning's callback connector, not declared on Trainer
            saved = users_scheduler_states(checkpoint, trainer.callbacks)  # type: ignore[attr-defined]
            schedulers = [config.scheduler for config in self.lr_scheduler_configs]
            check_scheduler_states(trainer.ckpt_path, saved, schedulers)

    @override
    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        """A recorded model is materialized from the checkpoint's weights: none is initialized, none loaded twice."""
        module = self._connected_module
        if self._is_recorded(module):
            state_dict = checkpoint["state_dict"]
            custom = custom_loading(module, state_dict)
            if custom is None:
                check_checkpoint_matches(module, model_shapes(state_dict), strict)
                self._materialize(module, state_dict, rng=self._init_draws(checkpoint))
            else:  # its loading may rename or convert the keys: it decides, as under Lightning's other strategies
                warnings.warn(loaded_in_full("csx", custom), DeferredInitWarning, stacklevel=2)
                self._materialize(module, None, rng=self._init_draws(checkpoint))
                module.load_state_dict(state_dict, strict=strict)
        else:
            super().load_model_state_dict(checkpoint, strict=strict)
        self._restore_generators(checkpoint)

    def _resumes_generators(self, checkpoint: Mapping[str, Any]) -> bool:
        """Whether the checkpoint's generators are restored: only when it resumes a fit, the one run whose
        training state Lightning restores (``restore_training_state``). Validate, test and predict load the
        weights only, and draw (dropout, noise) from the generators as the user seeded them, as without csx;
        so does a fit after its batch-size or learning-rate search, which restores the checkpoint it took before
        its trials: under ``auto`` the generators go on from the trials' draws (the LR finder's search runs under
        ``isolate_rng``, which puts them back itself)."""
        trainer = self._connected_module.trainer
        restoring = os.path.basename(str(trainer._checkpoint_connector._ckpt_path or ""))
        return (
            RNG_KEY in checkpoint
            and trainer.state.fn == TrainerFn.FITTING
            and not restoring.startswith(_TUNERS_CHECKPOINTS)
        )

    def _init_draws(self, checkpoint: Mapping[str, Any]) -> str:
        """How materializing from ``checkpoint`` moves the generator: the draws of the weights it provides are
        skipped when the generators are restored next; else the generator moves as eager init moves it."""
        return "skip_unread" if self._resumes_generators(checkpoint) else "eager"

    def _restore_generators(self, checkpoint: Mapping[str, Any]) -> None:
        """Set this rank's generators as the checkpoint saved them, when it resumes a fit (before the dataloaders
        are made: the iterator of an epoch starting after the checkpoint draws its seed from them)."""
        if self._resumes_generators(checkpoint):
            restore_rank_rng_states(checkpoint[RNG_KEY], self.world_size, self.global_rank)

    @override
    def setup_environment(self) -> None:
        super().setup_environment()
        if torch.distributed.is_initialized():
            # registered again rather than twice: once per process, whatever the number of fits
            atexit.unregister(_let_collectives_finish)
            atexit.register(_let_collectives_finish)

    @override
    def setup(self, trainer: Trainer) -> None:
        """Materialize a recorded model (if no checkpoint did) before Lightning moves and wraps it."""
        module = self._connected_module
        if self._is_recorded(module):
            self._materialize(module, None)
        super().setup(trainer)
        if trainer.state.fn != TrainerFn.FITTING:
            return
        # before the loop makes the epoch's iterator, which draws from the loader's generator
        loop = trainer.fit_loop
        loop._load_combined_loader_states = partial(_load_loader_states, loop)  # type: ignore[method-assign]
        if self.options.compile:
            self._capture = compile_forwards(
                module,
                self.options.compile_backend,
                fullgraph=self.options.trace_check,
                on_first_call=self._add_trace_phase,
            )
        # under compile=True TorchDynamo's fullgraph capture is the check (of forward): a step first
        # run under the check's modes would be compiled twice
        self._check_pending = self.options.trace_check and not self.options.compile

    @override
    def setup_optimizers(self, trainer: Trainer) -> None:
        """A closed-form scheduler returned bare steps every optimizer step: its arguments count steps.

        Stock torch schedulers are then driven by closed-form equivalents: the user's object
        stays in place (those with no closed form warn, or raise if strict).
        """
        module = self._connected_module
        configure = module.configure_optimizers
        with shadowed(module, "configure_optimizers", lambda: _step_closed_form(configure())):
            super().setup_optimizers(trainer)
        _hold_the_real_parameters(self.optimizers)
        convert_lightning_configs(
            self.lr_scheduler_configs, strict=self.options.strict_schedulers, site=_defined_at(configure)
        )
        if module.automatic_optimization:  # under manual optimization the user steps them, maybe one at a time
            _refuse_two_writers([config.scheduler for config in self.lr_scheduler_configs])
        for config in self.lr_scheduler_configs:
            if isinstance(config.scheduler, Scheduler) and (config.interval != "step" or config.frequency != 1):
                config.scheduler._expect_skipped_updates()  # asked for: a bare one is made to step every step
        if trainer.max_steps >= 0:  # in epochs, the steps are known with the data: see on_train_start
            self._check_schedules(trainer.max_steps)

    @override
    def on_train_start(self) -> None:
        super().on_train_start()
        trainer = self._connected_module.trainer
        if trainer.max_steps < 0:  # a run in epochs: the data's batches, accumulation, limits and max_epochs
            steps = trainer.estimated_stepping_batches  # -1 (max_steps) for data of unknown length
            if math.isfinite(steps) and steps >= 0:
                self._check_schedules(int(steps))

    def _check_schedules(self, steps: int) -> None:
        """As a CS-X compiles the schedule with the run: a value an update of the first ``steps`` would refuse
        mid-run, refused before step 0. Only where the scheduler's steps are the run's optimizer steps:
        Lightning counts a frequency in batches of each epoch; under manual optimization the user steps it."""
        if not self._connected_module.automatic_optimization:
            return
        for config in self.lr_scheduler_configs:
            if isinstance(config.scheduler, Scheduler) and config.interval == "step" and config.frequency == 1:
                config.scheduler.check_steps(steps)

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> STEP_OUTPUT:
        """The first ``training_step`` runs checked (``trace_check``), and so does each next one until a step
        gives a verdict (one that skips its batch, returning None, gives none); under ``compile=True`` it runs
        captured instead. The first loss is kept for the clock."""
        module = self._connected_module
        if self._check_pending:
            output, verdict, self._vouch = checked_step(
                module,
                partial(super().training_step, *args, **kwargs),
                args,
                precision=self.precision_plugin.precision,
                vouches=self.global_rank == 0,
                on_traced=self._add_trace_phase,
            )
            self._check_pending = not verdict
        elif self._capture is not None:
            # only the step runs compiled: the model's calls elsewhere (sampling in a hook) stay eager
            with self._capture.active():
                output = super().training_step(*args, **kwargs)
        else:
            output = super().training_step(*args, **kwargs)
        if self._clock_of_steps() is not None and self._first_loss is None:
            # as returned: the loss optimizer_step sees is divided by accumulate_grad_batches
            loss = loss_of(output)
            self._first_loss = loss.detach() if isinstance(loss, torch.Tensor) else None
        if not module.automatic_optimization:  # its optimizer steps all ran inside training_step
            self._end_step()
        return output

    @override
    def optimizer_step(
        self,
        optimizer: Optimizer,
        closure: Callable[[], Any],
        model: LightningModule | nn.Module | None = None,
        **kwargs: Any,
    ) -> Any:
        """The step ends with its update: step closures run, the first loss is reported
        (under manual optimization, once ``training_step`` has made all its updates).

        Under ``compile=True`` Lightning's closure runs as usual and the update runs compiled.
        """
        if self.options.compile:
            scheduled = scheduled_settings(optimizer, [config.scheduler for config in self.lr_scheduler_configs])
            with compiled_update(optimizer, self.options.compile_backend, scheduled):
                loss = super().optimizer_step(optimizer, closure, model, **kwargs)
        else:
            loss = super().optimizer_step(optimizer, closure, model, **kwargs)
        if self._connected_module.automatic_optimization:
            self._end_step()
        return loss

    @override
    def teardown(self) -> None:
        """Drop the compiled forward and updates: the next fit starts afresh."""
        self._step.end()
        if self._capture is not None:
            self._capture.close()
            self._capture = None
        forget_compiled_updates(self.optimizers)
        for block in self._recordings:  # a run that failed before materializing (a refused checkpoint)
            block.abandoned = not block.materialized
        self._recordings.clear()  # the next run records its own
        super().teardown()

    @property
    def _connected_module(self) -> LightningModule:
        """The LightningModule; under csx_fsdp also the sharded model (FSDP2 shards in place: no wrapper)."""
        module = self.lightning_module
        assert module is not None  # the hooks using it run with the module connected
        return module

    @property
    def _weight_dtype(self) -> torch.dtype | None:
        """The parameters' dtype under this precision; None keeps float32."""
        return _WEIGHT_DTYPES.get(getattr(self.precision_plugin, "precision", "32-true"))

    def _end_step(self) -> None:
        self._step.end()
        vouch, self._vouch = self._vouch, None
        if vouch is not None:  # the checked step's update is done, on every rank: its pass is remembered
            vouch()
        clock = self._clock_of_steps()
        # a step whose batches all skipped (returned None) has no loss to report: the clock runs on
        if clock is not None and not skipped(self._connected_module, self._first_loss):
            clock.step_ended(self._connected_module.trainer, self._first_loss)

    def _clock_of_steps(self) -> TimeToFirstLoss | None:
        """The clock the strategy drives, None while a tuner's trial steps run: Lightning's lr_find and
        scale_batch_size run them with the Trainer's callbacks (the tuner among them) set aside, on a state they
        restore afterwards. They are not the training's: a TimeToFirstLoss callback, set aside too, never sees them."""
        callbacks = self._connected_module.trainer.callbacks  # type: ignore[attr-defined]
        if any(tuner not in callbacks for tuner in self._tuners):
            return None
        return self._driven_clock

    def _is_recorded(self, module: nn.Module | None) -> bool:
        return module is not None and self._recorded and deferred.is_deferred(module)

    def _materialize(self, module: nn.Module, state_dict: Mapping[str, Any] | None, rng: str = "eager") -> None:
        started = time.perf_counter()
        options = {"rng": rng} if self.options.init_mode == "exact" else {}
        deferred.materialize(
            module, self.root_device, self._weight_dtype, state_dict, mode=self.options.init_mode, **options
        )
        self._add_phase("materialize", time.perf_counter() - started)

    def _add_trace_phase(self, seconds: float) -> None:
        self._add_phase("trace", seconds)

    def _add_phase(self, name: str, seconds: float) -> None:
        if self._time_to_first_loss is not None:
            self._time_to_first_loss.add_phase(name, seconds)


def _defined_at(function: Callable[..., Any]) -> tuple[str, int] | None:
    """The file and first line of ``function``'s code (None for a builtin or a callable object)."""
    code = getattr(inspect.unwrap(function), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else None


# The files Lightning's batch-size and learning-rate searches save the run to before their trials, and restore.
_TUNERS_CHECKPOINTS = (".scale_batch_size_", ".lr_find_")


def _load_loader_states(loop: _FitLoop) -> None:
    """Lightning's ``FitLoop._load_combined_loader_states``, right at an epoch's end too.

    Lightning hands the training dataloaders the states a checkpoint saved when a fit resumes inside an epoch
    (or under ``max_steps``): one resumed from an epoch's end under ``max_epochs`` (ModelCheckpoint's default)
    iterates them afresh, and a ``ResumableDataLoader`` then seeds the next epoch's order anew from the
    generators, which csx restored to the checkpoint's, instead of going on with its own. At an epoch's end it is
    given its state as one whose epoch is over, also when ``limit_train_batches`` cut it short (its state then
    says how far it got); other loaders' states cannot say so, and are handed back only where Lightning would.
    A loader made anew for the epoch (``reload_dataloaders_every_n_epochs`` due) is left new, as the uninterrupted
    run's was (not exact all the same: Lightning iterates a reloaded loader twice there, once here).
    """
    states, loop._combined_loader_states_to_load = loop._combined_loader_states_to_load, []  # loaded once
    if not states or loop._combined_loader is None:
        return
    progress = cast(_ProcessedTracker, loop.epoch_progress.current)  # what fit loops count
    if progress.ready != progress.processed or progress.started != progress.processed:  # inside an epoch
        loop._combined_loader._load_state_dicts(states)
        return
    # set by Lightning's data connector, not declared on Trainer
    every = loop.trainer.reload_dataloaders_every_n_epochs  # type: ignore[attr-defined]
    if every and progress.processed % every == 0:  # the epoch to run (not yet current_epoch: not completed)
        return
    stateful = [loader for loader in loop._combined_loader.flattened if isinstance(loader, _Stateful)]
    for loader, state in zip(stateful, states, strict=True):
        if isinstance(loader, ResumableDataLoader):
            loader.load_state_dict({**state, "served": 0})
        elif loop.restarting:
            loader.load_state_dict(state)


def _refuse_two_writers(schedulers: list[Any]) -> None:
    found = two_writers(schedulers)
    if found is not None:
        index, later, groups = found
        raise UsageError(
            f"configure_optimizers: scheduler {later} ({type(schedulers[later]).__name__}) sets "
            f"{schedulers[later].param_group_key!r} of {groups}, as scheduler {index} "
            f"({type(schedulers[index]).__name__}) does{TWO_WRITERS_FIX}"
        )


def _hold_the_real_parameters(optimizers: list[Optimizer]) -> None:
    """Point the optimizers at the model's real parameters where they hold recorded ones: built in
    ``configure_model``, under ``init_module``, or from a container of parameters filled there, they hold the
    tensors materialize replaced, and would update nothing (the eager model's optimizer holds the real ones).
    One that still holds a recorded tensor elsewhere (a model sharded after recording, an optimizer's own
    bookkeeping such as ZeroRedundancyOptimizer's) is refused: it would train nothing."""
    for optimizer in optimizers:
        _point_at_the_real_parameters(optimizer)
        where = _holding_recorded(optimizer)
        if where is not None:
            raise UsageError(
                f"{type(optimizer).__name__}{where} holds the model's parameters as they were recorded (taken in"
                " configure_model or under init_module), which the strategy replaced as it set the model up: it"
                " would update nothing; build the optimizer in configure_optimizers from self.parameters() or"
                " self.named_parameters()"
            )


def _point_at_the_real_parameters(optimizer: Optimizer) -> None:
    for group in optimizer.param_groups:
        group["params"][:] = [replaced(tensor) for tensor in group["params"]]  # in place: LBFGS holds the list
    for key in [key for key in optimizer.state if isinstance(key, deferred.DeferredTensor)]:
        state = optimizer.state.pop(key)
        # state made with the optimizer (Adagrad's sums) is recorded too, and made again at the first step
        if not any(isinstance(value, deferred.DeferredTensor) for value in state.values()):
            optimizer.state[replaced(key)] = state
    for value in vars(optimizer).values():
        if isinstance(value, Optimizer):  # a wrapper's inner optimizer
            _point_at_the_real_parameters(value)


def _holding_recorded(value: Any, where: str = "", seen: set[int] | None = None) -> str | None:
    """Where (``.attribute[index]...``) ``value`` holds a recorded tensor, through containers and optimizers;
    None where it holds none."""
    if isinstance(value, deferred.DeferredTensor):
        return where
    seen = set() if seen is None else seen
    if id(value) in seen:
        return None
    seen.add(id(value))
    if isinstance(value, Optimizer):
        items: Any = ((f".{name}", item) for name, item in vars(value).items())
    elif isinstance(value, (list, tuple)):
        items = ((f"[{index}]", item) for index, item in enumerate(value))
    elif isinstance(value, dict):
        if any(isinstance(key, deferred.DeferredTensor) for key in value):  # a map from parameters
            return f"{where} (a key)"
        items = ((f"[{key!r}]" if isinstance(key, (str, int)) else "[...]", item) for key, item in value.items())
    else:
        return None
    for step, item in items:
        found = _holding_recorded(item, where + step, seen)
        if found is not None:
            return found
    return None


with_options_signature(CSXSystemMixin.__init__)


# Old names kept for one release, each warning on use.
_RENAMED = {"CSXSystem": "CSXSystemMixin"}


def __getattr__(name: str) -> Any:
    return renamed(name, stacklevel=3)


def renamed(name: str, stacklevel: int) -> Any:
    """The new object for an old name, with a DeprecationWarning at the user's line (``stacklevel``
    counted from here); AttributeError for a name that never was."""
    if name not in _RENAMED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"cs_lightning.strategies.{name} is deprecated and will be removed in the next release;"
        f" use cs_lightning.strategies.{_RENAMED[name]} (same class).",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return globals()[_RENAMED[name]]


def _let_collectives_finish() -> None:
    """Give gloo's worker threads the GIL before the interpreter exits. A worker drops a finished collective's
    tensors after the caller's ``wait()`` returns, and needs the GIL for that: one still waiting for it when
    the interpreter finalizes is ended mid-release, and the process aborts ("terminate called without an
    active exception", SIGABRT after a finished fit). Seen in a core dump of a csx_fsdp rank on CPU."""
    if torch.distributed.is_initialized() and "gloo" in torch.distributed.get_backend():
        time.sleep(0.05)


def _step_closed_form(conf: Any) -> Any:
    """``configure_optimizers()`` output with each bare closed-form scheduler set to ``interval="step"``."""
    if isinstance(conf, Mapping) and "lr_scheduler" in conf:
        return {**conf, "lr_scheduler": _per_step(conf["lr_scheduler"])}
    if isinstance(conf, (list, tuple)):
        if len(conf) == 2 and isinstance(conf[0], list) and all(isinstance(o, Optimizer) for o in conf[0]):
            schedulers = conf[1] if isinstance(conf[1], list) else [conf[1]]
            return conf[0], [_per_step(s) for s in schedulers]
        return type(conf)(_step_closed_form(c) for c in conf)
    return conf


def _per_step(scheduler: Any) -> Any:
    if not isinstance(scheduler, Scheduler):
        return scheduler
    # Lightning steps a bare scheduler each epoch: said once, as this run (and any under csx) does otherwise
    rank_zero_info(
        f"cs_lightning: {type(scheduler).__name__}, returned by configure_optimizers without a scheduler config,"
        " steps every optimizer step, as a Cerebras schedule counts steps (Lightning's other strategies step it"
        ' each epoch: return {"scheduler": ..., "interval": "epoch"} for that)'
    )
    return {"scheduler": scheduler, "interval": "step"}
