"""Closed-form learning-rate and weight-decay schedulers: the cerebras.pytorch catalogue.

Added here: momentum (Adam's beta1) twins of the cyclic schedules, ``CyclicMomentum`` and
``OneCycleMomentum``, the schedules torch's CyclicLR and OneCycleLR cycle the momentum with.

Same class names, argument names and numbers as cerebras.pytorch 2.10; each schedule is a
pure function of the step written in torch ops, so it steps cheaply, evaluates many steps
at once (``values``), composes, resumes exactly and works with any torch optimizer and
with Lightning::

    warmup = LinearLR(optimizer, initial_learning_rate=0.0, end_learning_rate=2e-4, total_iters=100)
    decay = CosineDecayLR(optimizer, initial_learning_rate=2e-4, end_learning_rate=0.0, total_iters=900)
    schedule = SequentialLR(optimizer, [warmup, decay], milestones=[100])
    schedule.values(1000)             # (1000, groups): the whole schedule, nothing stepped
    schedule.step()                   # after optimizer.step(): the next value, as a float

    # the same from a Cerebras Model Zoo YAML block (milestones inferred); build returns a list:
    [schedule] = build({"SequentialLR": {"schedulers": [{"LinearLR": {...}}, {"CosineDecayLR": {...}}]}}, optimizer)

In Lightning, return ``lightning_config(schedule)`` from ``configure_optimizers`` so that
it steps every optimizer step (the csx strategy does this for bare closed-form schedulers).
"""

from cs_lightning.errors import ClosedFormError
from cs_lightning.schedulers.base import (
    EpochSteppingWarning,
    LRScheduler,
    MomentumScheduler,
    Scheduler,
    WeightDecayScheduler,
    lightning_config,
)
from cs_lightning.schedulers.composite import (
    ChainedLR,
    ChainedScheduler,
    ChainedWD,
    ScalePerParamLR,
    ScalePerParamWD,
    SequentialLR,
    SequentialWD,
)
from cs_lightning.schedulers.cyclic import (
    CyclicLR,
    CyclicMomentum,
    CyclicWD,
    OneCycleLR,
    OneCycleMomentum,
    OneCycleWD,
)
from cs_lightning.schedulers.decay import (
    ConstantLR,
    ConstantWD,
    CosineAnnealingLR,
    CosineAnnealingWarmRestarts,
    CosineAnnealingWarmRestartsWD,
    CosineAnnealingWD,
    CosineDecayLR,
    CosineDecayWD,
    ExponentialLR,
    ExponentialWD,
    InverseExponentialTimeDecayLR,
    InverseExponentialTimeDecayWD,
    InverseSquareRootDecayLR,
    InverseSquareRootDecayWD,
    LambdaLR,
    LambdaWD,
    LinearLR,
    LinearWD,
    MultiplicativeLR,
    MultiplicativeWD,
    PolynomialLR,
    PolynomialWD,
)
from cs_lightning.schedulers.plot import plot, table
from cs_lightning.schedulers.registry import build, resolve
from cs_lightning.schedulers.staircase import (
    MultiStepLR,
    MultiStepWD,
    PiecewiseConstantLR,
    PiecewiseConstantWD,
    StepLR,
    StepWD,
)

__all__ = [
    "ChainedLR",
    "ChainedScheduler",
    "ChainedWD",
    "ClosedFormError",
    "ConstantLR",
    "ConstantWD",
    "CosineAnnealingLR",
    "CosineAnnealingWD",
    "CosineAnnealingWarmRestarts",
    "CosineAnnealingWarmRestartsWD",
    "CosineDecayLR",
    "CosineDecayWD",
    "CyclicLR",
    "CyclicMomentum",
    "CyclicWD",
    "EpochSteppingWarning",
    "ExponentialLR",
    "ExponentialWD",
    "InverseExponentialTimeDecayLR",
    "InverseExponentialTimeDecayWD",
    "InverseSquareRootDecayLR",
    "InverseSquareRootDecayWD",
    "LRScheduler",
    "LambdaLR",
    "LambdaWD",
    "LinearLR",
    "LinearWD",
    "MomentumScheduler",
    "MultiStepLR",
    "MultiStepWD",
    "MultiplicativeLR",
    "MultiplicativeWD",
    "OneCycleLR",
    "OneCycleMomentum",
    "OneCycleWD",
    "PiecewiseConstantLR",
    "PiecewiseConstantWD",
    "PolynomialLR",
    "PolynomialWD",
    "ScalePerParamLR",
    "ScalePerParamWD",
    "Scheduler",
    "SequentialLR",
    "SequentialWD",
    "StepLR",
    "StepWD",
    "WeightDecayScheduler",
    "build",
    "lightning_config",
    "plot",
    "resolve",
    "table",
]
