"""Generate ``cerebras_schedules.json``: reference schedules from cerebras.pytorch 2.10.

The parity tests of ``cs_lightning.schedulers`` compare against the numbers this script
writes. It runs the real scheduler modules of the cerebras.pytorch 2.10 wheel
(``cerebras/pytorch/optim/{scheduler,lr_scheduler,weight_decay_scheduler}.py`` and the
``Optimizer`` base in ``optimizer.py``) in a separate environment. Only their numbers go
into the repository, never their code. The test suite and CI never run this script,
because it needs the wheel, which pins an old torch and must stay out of the project's
environment.

Regenerate (outside the repository; the wheel is on the package index):

    pip download --no-deps cerebras-pytorch==2.10.0 -d /work/ref/wheel
    mkdir -p /work/ref/unpacked
    unzip -q -o /work/ref/wheel/cerebras_pytorch-2.10.0-*.whl -d /work/ref/unpacked
    python -m venv /work/ref/venv
    /work/ref/venv/bin/pip install torch==2.13.0 numpy
    /work/ref/venv/bin/python tests/reference/generate_cerebras_reference.py \
        --wheel-dir /work/ref/unpacked

Stubs: the modules are loaded from the unpacked wheel without running the package
``__init__`` files (they import the appliance client and compiled ops). The few
internals the scheduler modules touch are replaced by small stand-ins in
``_install_stubs``, each documented with why it gives the same numbers as the real
CPU backend.

Output: a list of cases ``{"id", "key", "param_groups", "spec", "steps", "values"}``;
``values[k][g]`` is ``param_groups[g][key]`` right after construction (k = 0) and after k
calls to ``scheduler.step()``, for every group (untargeted groups keep their value).
Optional fields: ``"note"`` (a semantic surprise worth knowing) and ``"source"``:
``"cerebras"`` by default, ``"torch"`` where the reference cannot express the case and
the numbers come from ``torch.optim.lr_scheduler`` instead (CosineAnnealingWarmRestarts
with ``T_mult > 1``). Cases with ``"torch_values"`` carry torch's numbers for the same
arguments where they differ from the reference.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

import torch

OUT = Path(__file__).with_name("cerebras_schedules.json")


def _module(name: str, path: Path | None = None, **attrs: Any) -> types.ModuleType:
    """Register an empty module (a package when ``path`` is given) in sys.modules."""
    module = types.ModuleType(name)
    if path is not None:
        module.__path__ = [str(path)]
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


class _CpuBackend:
    """Stand-in for the CPU backend returned by ``current_backend_impl()``.

    Only what the optimizer and scheduler code calls: ``device`` (a context manager the
    optimizer enters while pre-initializing state), ``torch_device``,
    ``register_optimizer`` (bookkeeping only) and ``setup_scheduler``, which does what
    ``BaseBackend.setup_scheduler`` in the wheel does: register the scheduler on its
    optimizer, set its device, and make ``last_epoch`` an int64 tensor.
    """

    torch_device = torch.device("cpu")

    def __init__(self) -> None:
        self.device = contextlib.nullcontext()

    def register_optimizer(self, optimizer: Any) -> None:
        pass

    def setup_scheduler(self, scheduler: Any) -> None:
        scheduler.optimizer._schedulers_registry[scheduler] = None
        scheduler.device = self.torch_device
        if not isinstance(scheduler.last_epoch, torch.Tensor):
            scheduler.last_epoch = torch.tensor(scheduler.last_epoch, dtype=torch.int64)
        scheduler.last_epoch = scheduler.last_epoch.to(self.torch_device)


def _install_stubs(wheel_dir: Path) -> None:
    """Make ``cerebras.pytorch.optim.*`` importable from the wheel with stubbed internals."""
    root = wheel_dir / "cerebras"
    if not (root / "pytorch" / "optim" / "scheduler.py").is_file():
        raise SystemExit(f"--wheel-dir={wheel_dir}: no cerebras/pytorch/optim/scheduler.py")
    backend = _CpuBackend()

    def step_closure(fn):
        # The real decorator queues `fn` to run at the end of the step, or runs it at
        # once when no backend is active. Scheduler.update_groups only rewrites the
        # values update_last_value already wrote, so running it at once is the same.
        return fn

    def retrieve_all_subclasses(cls, condition=lambda subcls: True):
        # Only used to build scheduler.__all__; the appliance package is not in the wheel.
        found = []
        for sub in cls.__subclasses__():
            if condition(sub):
                found.append(sub)
            found.extend(retrieve_all_subclasses(sub, condition))
        return found

    # Packages pointing into the wheel, so their submodules load from it, without
    # running cerebras/pytorch/__init__.py or optim/__init__.py (appliance, compiled ops).
    _module("cerebras", root)
    _module("cerebras.appliance", None)
    _module("cerebras.appliance.utils", None)
    _module(
        "cerebras.appliance.utils.classes",
        retrieve_all_subclasses=retrieve_all_subclasses,
    )
    # use_cs() is False on the CPU backend: values are computed eagerly at construction.
    _module(
        "cerebras.pytorch.backend",
        current_backend_impl=lambda raise_exception=True: backend,
        use_cs=lambda: False,
    )
    # The real update_if_finite only marks tensors when the optimizer has an amp stash
    # (dynamic loss scaling), which these optimizers never have.
    amp = _module("cerebras.pytorch.amp", update_if_finite=lambda optimizer, tensor: None)
    optim = _module("cerebras.pytorch.optim", root / "pytorch" / "optim")
    _module(
        "cerebras.pytorch",
        root / "pytorch",
        _generating_docs=False,
        step_closure=step_closure,
        amp=amp,
        optim=optim,
    )
    # The real Optimizer base class from the wheel (tags normalization, registry).
    optim.Optimizer = importlib.import_module("cerebras.pytorch.optim.optimizer").Optimizer


def _reference_sgd_class() -> type:
    """Plain SGD on the wheel's ``Optimizer`` base (schedulers insist on that base)."""
    base = sys.modules["cerebras.pytorch.optim"].Optimizer

    class ReferenceSGD(base):
        def __init__(self, params: Any, lr: float = 0.1, weight_decay: float = 0.0):
            super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

        def preinitialize(self) -> None:
            pass

        @torch.no_grad()
        def step(self, closure: Any = None) -> None:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.add_(p.grad + group["weight_decay"] * p, alpha=-group["lr"])

    return ReferenceSGD


def _build(spec: dict, optimizer: Any) -> Any:
    """Construct ``{Name: {args}}`` with the wheel's classes, children first."""
    ((name, args),) = spec.items()
    lr_mod = sys.modules["cerebras.pytorch.optim.lr_scheduler"]
    wd_mod = sys.modules["cerebras.pytorch.optim.weight_decay_scheduler"]
    cls = getattr(lr_mod, name, None) or getattr(wd_mod, name)
    args = dict(args)
    if "schedulers" in args:
        args["schedulers"] = [_build(child, optimizer) for child in args["schedulers"]]
    if "scheduler" in args:
        args["scheduler"] = _build(args["scheduler"], optimizer)
    if name in ("ChainedLR", "ChainedScheduler", "ChainedWD"):
        return cls(**args)  # the chained classes take no optimizer argument
    return cls(optimizer, **args)


def _optimizer(param_groups: list[dict]) -> Any:
    groups = [{"params": [torch.nn.Parameter(torch.zeros(2))], **g} for g in param_groups]
    return _reference_sgd_class()(groups)


def _as_float(value: Any) -> float:
    return float(value.item() if isinstance(value, torch.Tensor) else value)


def _run(case: dict) -> list[list[float]]:
    optimizer = _optimizer(case["param_groups"])
    scheduler = _build(case["spec"], optimizer)
    key = case["key"]
    values = []
    for k in range(case["steps"]):
        if k:
            scheduler.step()
        values.append([_as_float(g[key]) for g in optimizer.param_groups])
    return values


def _torch_warm_restarts(case: dict) -> list[list[float]]:
    """torch's CosineAnnealingWarmRestarts for the same arguments (one group)."""
    ((_, args),) = case["spec"].items()
    initial = args.get("initial_learning_rate", args.get("initial_val"))
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=initial)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        optimizer, T_0=args["T_0"], T_mult=args.get("T_mult", 1), eta_min=args.get("eta_min", 0.0)
    )
    values = []
    for k in range(case["steps"]):
        if k:
            optimizer.step()
            scheduler.step()
        values.append([float(optimizer.param_groups[0]["lr"])])
    return values


# Argument names of the LR classes where they differ from the generic (WD) names.
_LR_ARG_NAMES = {
    "initial_val": "initial_learning_rate",
    "end_val": "end_learning_rate",
    "val": "learning_rate",
    "vals": "learning_rates",
    "base_val": "base_lr",
    "max_val": "max_lr",
}

ONE_GROUP = [{"lr": 0.1, "weight_decay": 0.01}]
TWO_GROUPS_SCALED = [
    {"lr": 0.1, "weight_decay": 0.01, "adjust_learning_rate": 1.0},
    {"lr": 0.1, "weight_decay": 0.01, "adjust_learning_rate": 0.25},
]
TWO_GROUPS_TAGGED = [
    {"lr": 0.1, "weight_decay": 0.01, "tags": ["decay"]},
    {"lr": 0.5, "weight_decay": 0.02, "tags": ["no_decay"]},
]
TAGGED_AND_UNTAGGED = [
    {"lr": 0.1, "weight_decay": 0.01},
    {"lr": 0.5, "weight_decay": 0.02, "tags": ["embedding"]},
]

# (id, generic spec {Stem: {generic args}}, steps, param groups, note or None).
# Stems get the suffix LR or WD; "Chained" becomes ChainedLR / ChainedWD.
_CASES: list[tuple[str, dict, int, list[dict], str | None]] = [
    ("constant", {"Constant": {"val": 0.02}}, 20, ONE_GROUP, None),
    (
        "constant_total_iters",
        {"Constant": {"val": 0.03, "total_iters": 10}},
        25,
        ONE_GROUP,
        "total_iters is stored but unused by the constant's closed form",
    ),
    (
        "polynomial_power2",
        {"Polynomial": {"initial_val": 0.1, "end_val": 0.001, "total_iters": 50, "power": 2.0}},
        110,
        ONE_GROUP,
        None,
    ),
    (
        "polynomial_power_half",
        {"Polynomial": {"initial_val": 0.1, "end_val": 0.01, "total_iters": 40, "power": 0.5}},
        90,
        ONE_GROUP,
        None,
    ),
    (
        "polynomial_cycle",
        {"Polynomial": {"initial_val": 0.1, "end_val": 0.001, "total_iters": 30, "power": 1.5, "cycle": True}},
        90,
        ONE_GROUP,
        "cycle=True changes nothing: the end value wins from total_iters on",
    ),
    ("linear_warmup", {"Linear": {"initial_val": 0.0, "end_val": 2e-4, "total_iters": 40}}, 90, ONE_GROUP, None),
    ("linear_decay", {"Linear": {"initial_val": 0.1, "end_val": 0.0, "total_iters": 25}}, 60, ONE_GROUP, None),
    (
        "linear_cycle",
        {"Linear": {"initial_val": 0.1, "end_val": 0.01, "total_iters": 20, "cycle": True}},
        60,
        ONE_GROUP,
        None,
    ),
    (
        "exponential",
        {"Exponential": {"initial_val": 0.1, "total_iters": 10, "decay_rate": 0.5}},
        60,
        ONE_GROUP,
        "no clamp at total_iters: decay_rate ** (k / total_iters) keeps decaying",
    ),
    (
        "exponential_staircase",
        {"Exponential": {"initial_val": 0.1, "total_iters": 7, "decay_rate": 0.8, "staircase": True}},
        50,
        ONE_GROUP,
        None,
    ),
    (
        "inverse_exponential_time_decay",
        {"InverseExponentialTimeDecay": {"initial_val": 0.1, "step_exponent": 1, "total_iters": 10, "decay_rate": 0.5}},
        60,
        ONE_GROUP,
        None,
    ),
    (
        "inverse_exponential_time_decay_exp2_staircase",
        {
            "InverseExponentialTimeDecay": {
                "initial_val": 0.1,
                "step_exponent": 2,
                "total_iters": 30,
                "decay_rate": 0.3,
                "staircase": True,
            }
        },
        70,
        ONE_GROUP,
        None,
    ),
    (
        "inverse_square_root_decay",
        {"InverseSquareRootDecay": {"initial_val": 0.5, "scale": 2.0, "warmup_steps": 10}},
        60,
        ONE_GROUP,
        None,
    ),
    (
        "inverse_square_root_decay_defaults",
        {"InverseSquareRootDecay": {}},
        30,
        ONE_GROUP,
        "defaults initial=1.0, scale=1.0, warmup_steps=1.0: value 1/sqrt(max(1, k))",
    ),
    ("cosine_decay", {"CosineDecay": {"initial_val": 0.1, "end_val": 0.001, "total_iters": 50}}, 120, ONE_GROUP, None),
    (
        "sequential_warmup_stable_decay",
        {
            "Sequential": {
                "schedulers": [
                    {"Linear": {"initial_val": 0.0, "end_val": 1e-3, "total_iters": 20}},
                    {"Constant": {"val": 1e-3, "total_iters": 30}},
                    {"CosineDecay": {"initial_val": 1e-3, "end_val": 1e-5, "total_iters": 50}},
                ],
                "milestones": [20, 50],
            }
        },
        210,
        ONE_GROUP,
        "child i counts from its milestone: step k - milestones[i-1]",
    ),
    (
        "sequential_milestones_of_their_own",
        {
            "Sequential": {
                "schedulers": [
                    {"Linear": {"initial_val": 0.0, "end_val": 0.1, "total_iters": 100}},
                    {"Exponential": {"initial_val": 0.1, "total_iters": 100, "decay_rate": 0.5}},
                    {"Constant": {"val": 0.01}},
                ],
                "milestones": [100, 400],
            }
        },
        500,
        ONE_GROUP,
        "Exponential's total_iters is a decay period, not its stage's length (300 steps here)",
    ),
    (
        "sequential_warmup_cut_short",
        {
            "Sequential": {
                "schedulers": [
                    {"Linear": {"initial_val": 0.0, "end_val": 0.1, "total_iters": 10}},
                    {"CosineDecay": {"initial_val": 0.1, "end_val": 0.01, "total_iters": 10}},
                ],
                "milestones": [5],
            }
        },
        25,
        ONE_GROUP,
        "the milestone ends the warmup at half its total_iters: no check against the lengths",
    ),
    (
        "sequential_held_past_its_end",
        {
            "Sequential": {
                "schedulers": [
                    {"Linear": {"initial_val": 0.0, "end_val": 0.1, "total_iters": 3}},
                    {"Constant": {"val": 0.05, "total_iters": 2}},
                    {"CosineDecay": {"initial_val": 0.1, "end_val": 0.01, "total_iters": 10}},
                ],
                "milestones": [6, 12],
            }
        },
        30,
        ONE_GROUP,
        "Linear holds its end value from step 3 to its milestone; Constant ignores its total_iters",
    ),
    (
        "sequential_step_then_exponential",
        {
            "Sequential": {
                "schedulers": [
                    {"Step": {"initial_val": 0.1, "step_size": 5, "gamma": 0.5}},
                    {"Exponential": {"initial_val": 0.05, "total_iters": 10, "decay_rate": 0.8}},
                ],
                "milestones": [20],
            }
        },
        80,
        ONE_GROUP,
        None,
    ),
    (
        "piecewise_constant",
        {"PiecewiseConstant": {"vals": [0.1, 0.05, 0.01], "milestones": [10, 25]}},
        60,
        ONE_GROUP,
        None,
    ),
    ("multi_step", {"MultiStep": {"initial_val": 0.1, "gamma": 0.1, "milestones": [10, 30, 45]}}, 100, ONE_GROUP, None),
    ("step", {"Step": {"initial_val": 0.1, "step_size": 7, "gamma": 0.5}}, 60, ONE_GROUP, None),
    (
        "cosine_annealing",
        {"CosineAnnealing": {"initial_val": 0.1, "T_max": 25, "eta_min": 0.001}},
        100,
        ONE_GROUP,
        "no clamp at T_max: the cosine keeps going, back up to initial at 2*T_max",
    ),
    ("cosine_annealing_default_eta_min", {"CosineAnnealing": {"initial_val": 0.1, "T_max": 10}}, 30, ONE_GROUP, None),
    (
        "lambda_demo",
        {"Lambda": {"initial_val": 0.1}},
        60,
        ONE_GROUP,
        "hard-coded demo: initial_val**2 * (k / 30) * 0.95**k (two lambdas, each times initial_val); value 0 at k = 0",
    ),
    (
        "cosine_annealing_warm_restarts",
        {"CosineAnnealingWarmRestarts": {"initial_val": 0.1, "T_0": 10, "eta_min": 0.001}},
        50,
        ONE_GROUP,
        "reference differs from torch from k = T_0 on (see torch_values): there "
        "T_cur = (floor(k / T_0) - 1) * T_0, so later periods alternate between "
        "initial_val and eta_min",
    ),
    (
        "cosine_annealing_warm_restarts_default_eta_min",
        {"CosineAnnealingWarmRestarts": {"initial_val": 0.1, "T_0": 7}},
        30,
        ONE_GROUP,
        None,
    ),
    (
        "multiplicative",
        {"Multiplicative": {"initial_val": 0.1, "coefficient": 0.95}},
        60,
        ONE_GROUP,
        "initial_val * coefficient ** k",
    ),
    (
        "chained_step_exponential",
        {
            "Chained": {
                "schedulers": [
                    {"Step": {"initial_val": 0.1, "step_size": 10, "gamma": 0.5}},
                    {"Exponential": {"initial_val": 0.2, "total_iters": 20, "decay_rate": 0.5}},
                ]
            }
        },
        80,
        ONE_GROUP,
        "first child's value times each later child's value / its initial_val",
    ),
    (
        "chained_cosine_multistep_linear",
        {
            "Chained": {
                "schedulers": [
                    {"CosineDecay": {"initial_val": 0.1, "end_val": 0.01, "total_iters": 40}},
                    {"MultiStep": {"initial_val": 1.0, "gamma": 0.5, "milestones": [15, 30]}},
                    {"Linear": {"initial_val": 2.0, "end_val": 1.0, "total_iters": 20}},
                ]
            }
        },
        90,
        ONE_GROUP,
        None,
    ),
    (
        "cyclic_triangular",
        {"Cyclic": {"base_val": 0.001, "max_val": 0.01, "step_size_up": 10, "step_size_down": 15}},
        100,
        ONE_GROUP,
        None,
    ),
    (
        "cyclic_triangular2",
        {"Cyclic": {"base_val": 0.001, "max_val": 0.01, "step_size_up": 8, "mode": "triangular2"}},
        100,
        ONE_GROUP,
        None,
    ),
    (
        "cyclic_exp_range",
        {
            "Cyclic": {
                "base_val": 0.001,
                "max_val": 0.01,
                "step_size_up": 8,
                "step_size_down": 12,
                "mode": "exp_range",
                "gamma": 0.98,
            }
        },
        100,
        ONE_GROUP,
        "exp_range scales by gamma ** k (iterations) whatever scale_mode says",
    ),
    (
        "cyclic_triangular_scale_mode_ignored",
        {
            "Cyclic": {
                "base_val": 0.001,
                "max_val": 0.01,
                "step_size_up": 5,
                "mode": "triangular",
                "scale_mode": "iterations",
            }
        },
        40,
        ONE_GROUP,
        "scale_mode is overwritten from mode on every evaluation",
    ),
    (
        "one_cycle_cos",
        {
            "OneCycle": {
                "initial_val": 0.004,
                "max_val": 0.1,
                "total_steps": 50,
                "pct_start": 0.3,
                "final_div_factor": 100.0,
            }
        },
        110,
        ONE_GROUP,
        "no clamp after total_steps - 1: the last phase's cosine keeps going",
    ),
    (
        "one_cycle_linear_three_phase",
        {
            "OneCycle": {
                "initial_val": 0.004,
                "max_val": 0.1,
                "total_steps": 60,
                "pct_start": 0.25,
                "final_div_factor": 100.0,
                "three_phase": True,
                "anneal_strategy": "linear",
            }
        },
        130,
        ONE_GROUP,
        "no clamp after total_steps - 1: the last linear phase extrapolates",
    ),
    (
        "one_cycle_cos_three_phase",
        {"OneCycle": {"initial_val": 0.004, "max_val": 0.1, "total_steps": 40, "pct_start": 0.3, "three_phase": True}},
        90,
        ONE_GROUP,
        None,
    ),
    (
        "one_cycle_linear_uneven",
        {
            "OneCycle": {
                "initial_val": 0.01,
                "max_val": 0.1,
                "total_steps": 37,
                "pct_start": 0.33,
                "anneal_strategy": "linear",
            }
        },
        80,
        ONE_GROUP,
        "pct_start * total_steps - 1 = 11.21 is used unrounded as the phase boundary",
    ),
    (
        "scale_per_param_cosine",
        {"ScalePerParam": {"scheduler": {"CosineDecay": {"initial_val": 0.1, "end_val": 0.001, "total_iters": 40}}}},
        90,
        TWO_GROUPS_SCALED,
        "group value = wrapped value * group['adjust_learning_rate'] (read at construction)",
    ),
    (
        "scale_per_param_sequential",
        {
            "ScalePerParam": {
                "scheduler": {
                    "Sequential": {
                        "schedulers": [
                            {"Linear": {"initial_val": 0.0, "end_val": 0.1, "total_iters": 10}},
                            {"CosineDecay": {"initial_val": 0.1, "end_val": 0.0, "total_iters": 30}},
                        ],
                        "milestones": [10],
                    }
                }
            }
        },
        90,
        TWO_GROUPS_SCALED,
        None,
    ),
    (
        "tags_target_one_group",
        {"Linear": {"initial_val": 0.2, "end_val": 0.02, "total_iters": 20, "param_group_tags": "decay"}},
        50,
        TWO_GROUPS_TAGGED,
        "the untargeted group keeps its own value",
    ),
    (
        "tags_none_targets_untagged",
        {"CosineDecay": {"initial_val": 0.2, "end_val": 0.02, "total_iters": 20, "param_group_tags": [None]}},
        50,
        TAGGED_AND_UNTAGGED,
        "param_group_tags=[None] targets the groups without tags",
    ),
    (
        "tags_sequential",
        {
            "Sequential": {
                "schedulers": [
                    {
                        "Linear": {
                            "initial_val": 0.0,
                            "end_val": 0.1,
                            "total_iters": 10,
                            "param_group_tags": ["no_decay"],
                        }
                    },
                    {
                        "Exponential": {
                            "initial_val": 0.1,
                            "total_iters": 10,
                            "decay_rate": 0.5,
                            "param_group_tags": ["no_decay"],
                        }
                    },
                ],
                "milestones": [10],
                "param_group_tags": ["no_decay"],
            }
        },
        50,
        TWO_GROUPS_TAGGED,
        "children must carry the same param_group_tags as the SequentialLR",
    ),
    (
        "tags_scale_per_param",
        {
            "ScalePerParam": {
                "scheduler": {"Step": {"initial_val": 0.1, "step_size": 5, "gamma": 0.5, "param_group_tags": "decay"}},
                "param_group_tags": "decay",
            }
        },
        30,
        [
            {"lr": 0.1, "weight_decay": 0.01, "tags": ["decay"], "adjust_learning_rate": 0.5},
            {"lr": 0.3, "weight_decay": 0.02, "tags": ["other"], "adjust_learning_rate": 2.0},
        ],
        None,
    ),
    # Zero lengths: a Model Zoo config turns its warmup off with total_iters: 0.
    (
        "linear_total_iters_zero",
        {"Linear": {"initial_val": 0.1, "end_val": 0.01, "total_iters": 0}},
        5,
        ONE_GROUP,
        "total_iters=0: every step is >= total_iters, so the end value from step 0",
    ),
    (
        "polynomial_cycle_total_iters_zero",
        {"Polynomial": {"initial_val": 0.1, "end_val": 0.01, "total_iters": 0, "power": 2.0, "cycle": True}},
        5,
        ONE_GROUP,
        None,
    ),
    ("constant_total_iters_zero", {"Constant": {"val": 0.1, "total_iters": 0}}, 5, ONE_GROUP, None),
    (
        "sequential_warmup_zero",
        {
            "Sequential": {
                "schedulers": [
                    {"Linear": {"initial_val": 0.0, "end_val": 0.1, "total_iters": 0}},
                    {"CosineDecay": {"initial_val": 0.1, "end_val": 0.001, "total_iters": 10}},
                ],
                "milestones": [0],
            }
        },
        15,
        ONE_GROUP,
        "milestone 0: the second child from step 0, at its own step k",
    ),
    (
        "multi_step_milestone_zero",
        {"MultiStep": {"initial_val": 0.1, "gamma": 0.5, "milestones": [0, 4]}},
        8,
        ONE_GROUP,
        "milestone 0 counts from step 0",
    ),
    (
        "piecewise_constant_milestone_zero",
        {"PiecewiseConstant": {"vals": [0.1, 0.05, 0.01], "milestones": [0, 4]}},
        8,
        ONE_GROUP,
        "milestone 0: the first value is never used",
    ),
    (
        "cyclic_step_size_down_zero",
        {"Cyclic": {"base_val": 0.001, "max_val": 0.01, "step_size_up": 4, "step_size_down": 0}},
        13,
        ONE_GROUP,
        "step_size_down=0 (not None, which means step_size_up): a sawtooth rising for step_size_up steps",
    ),
    (
        "cyclic_exp_range_scale_mode_cycle",
        {
            "Cyclic": {
                "base_val": 0.001,
                "max_val": 0.01,
                "step_size_up": 2,
                "mode": "exp_range",
                "gamma": 0.9,
                "scale_mode": "cycle",
            }
        },
        12,
        ONE_GROUP,
        "scale_mode='cycle' is overwritten: exp_range scales by gamma ** k",
    ),
]

# Cases that exist in one flavour only.
_LR_ONLY = [
    (
        "lr_chained_scheduler_alias",
        "lr",
        {
            "ChainedScheduler": {
                "schedulers": [
                    {"StepLR": {"initial_learning_rate": 0.1, "step_size": 10, "gamma": 0.5}},
                    {"ExponentialLR": {"initial_learning_rate": 0.2, "total_iters": 20, "decay_rate": 0.5}},
                ]
            }
        },
        80,
        ONE_GROUP,
        "ChainedScheduler is a subclass alias of ChainedLR",
    ),
]
_WD_ONLY = [
    (
        "wd_scale_per_param_adjust_val",
        "weight_decay",
        {
            "ScalePerParamWD": {
                "scheduler": {"CosineDecayWD": {"initial_val": 0.1, "end_val": 0.001, "total_iters": 40}}
            }
        },
        90,
        [
            {"lr": 0.1, "weight_decay": 0.01, "adjust_val": 1.0},
            {"lr": 0.1, "weight_decay": 0.01, "adjust_val": 0.5},
            {"lr": 0.1, "weight_decay": 0.01, "adjust_learning_rate": 3.0, "adjust_val": 0.5},
        ],
        "scale = group.get('adjust_learning_rate', group.get('adjust_val', 1.0)): "
        "adjust_learning_rate wins, also for weight decay",
    ),
]
# Not expressible in the reference (it rejects T_mult != 1): torch's own numbers.
_TORCH_ONLY = [
    (
        "lr_cosine_annealing_warm_restarts_t_mult2",
        "lr",
        {"CosineAnnealingWarmRestarts": {"initial_learning_rate": 0.1, "T_0": 5, "T_mult": 2, "eta_min": 0.001}},
        80,
        ONE_GROUP,
        "reference raises ValueError for T_mult != 1; values from torch",
    ),
]


def _flavour(spec: dict, suffix: str) -> dict:
    """Turn a generic ``{Stem: {args}}`` spec into the LR or WD class and argument names."""
    ((stem, args),) = spec.items()
    out = {}
    for name, value in args.items():
        if name == "schedulers":
            value = [_flavour(child, suffix) for child in value]
        elif name == "scheduler":
            value = _flavour(value, suffix)
        if suffix == "LR":
            name = _LR_ARG_NAMES.get(name, name)
        out[name] = value
    # The one LR class without the suffix (named like torch's).
    if stem == "CosineAnnealingWarmRestarts" and suffix == "LR":
        return {stem: out}
    return {stem + suffix: out}


def cases() -> list[dict]:
    """Every case, LR and WD flavours, without values."""
    out = []
    for suffix, key in (("LR", "lr"), ("WD", "weight_decay")):
        for stem_id, spec, steps, groups, note in _CASES:
            out.append(
                {
                    "id": f"{suffix.lower()}_{stem_id}",
                    "key": key,
                    "param_groups": groups,
                    "spec": _flavour(spec, suffix),
                    "steps": steps,
                    "note": note,
                }
            )
    for case_id, key, spec, steps, groups, note in _LR_ONLY + _WD_ONLY + _TORCH_ONLY:
        out.append({"id": case_id, "key": key, "param_groups": groups, "spec": spec, "steps": steps, "note": note})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wheel-dir",
        type=Path,
        default=Path("/work/ref/unpacked"),
        help="directory the cerebras_pytorch 2.10 wheel was unzipped into",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    _install_stubs(args.wheel_dir)
    importlib.import_module("cerebras.pytorch.optim.lr_scheduler")
    importlib.import_module("cerebras.pytorch.optim.weight_decay_scheduler")
    torch_only = {c[0] for c in _TORCH_ONLY}
    results = []
    for case in cases():
        if case["id"] in torch_only:
            case["source"] = "torch"
            case["values"] = _torch_warm_restarts(case)
        else:
            case["values"] = _run(case)
            if next(iter(case["spec"])).startswith("CosineAnnealingWarmRestarts"):
                case["torch_values"] = _torch_warm_restarts(case)
        if case["note"] is None:
            del case["note"]
        results.append(case)
        print(f"{case['id']}: {case['steps']} steps")
    # One case per line: small, and diffs show which cases changed.
    lines = ",\n".join(json.dumps(case, separators=(",", ":")) for case in results)
    args.out.write_text("[\n" + lines + "\n]\n")
    print(f"wrote {len(results)} cases to {args.out}")


if __name__ == "__main__":
    main()
