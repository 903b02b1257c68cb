"""Closed-form learning-rate and weight-decay schedulers: the cerebras.pytorch catalogue.

Same class names, argument names and numbers as cerebras.pytorch 2.10; each schedule is a
pure function of the step written in torch ops, so it steps cheaply, evaluates many steps
at once (``values``), composes, resumes exactly and works with any torch optimizer and
with Lightning.
"""

from cs_lightning.errors import ClosedFormError
from cs_lightning.schedulers.base import (
    LRScheduler,
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
from cs_lightning.schedulers.cyclic import CyclicLR, CyclicWD, OneCycleLR, OneCycleWD
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
from cs_lightning.schedulers.steps import (
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
    "CyclicWD",
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
    "MultiStepLR",
    "MultiStepWD",
    "MultiplicativeLR",
    "MultiplicativeWD",
    "OneCycleLR",
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
