"""Parity with cerebras.pytorch 2.10 (tests/reference/cerebras_schedules.json) and torch.

Every reference case is built from its YAML spec through `build` on an SGD optimizer with
the case's param groups, stepped, and compared group by group at relative 1e-6 over the
whole recorded run (at least twice each schedule's length).
"""

import json
import math

import pytest
import torch

from cs_lightning.schedulers import CosineAnnealingWarmRestarts, build, resolve
from conftest import REPO

CASES = json.loads((REPO / "tests/reference/cerebras_schedules.json").read_text())

# cerebras.pytorch 2.10's LambdaLR hard-codes two demo lambdas, each times the initial
# value: initial**2 * (k / 30) * 0.95**k. Ours takes the function; this one is the demo.
def _demo_lambda(initial: float):
    return lambda k: torch.div(k, 30) * torch.pow(torch.tensor(0.95), k) * initial


def _optimizer(case: dict) -> torch.optim.Optimizer:
    groups = []
    for group in case["param_groups"]:
        groups.append({"params": [torch.nn.Parameter(torch.zeros(1))], **group})
    return torch.optim.SGD(groups, lr=0.1)


def _spec(case: dict) -> dict:
    ((name, args),) = case["spec"].items()
    if resolve(name).__name__ in ("LambdaLR", "LambdaWD"):
        initial = args.get("initial_learning_rate", args.get("initial_val"))
        lambda_name = "lr_lambda" if name == "LambdaLR" else "wd_lambda"
        return {name: {**args, lambda_name: _demo_lambda(initial)}}
    return case["spec"]


def _run(case: dict) -> list[list[float]]:
    optimizer = _optimizer(case)
    (scheduler,) = build(_spec(case), optimizer)
    key = case["key"]
    seen = [[group[key] for group in optimizer.param_groups]]
    for _ in range(case["steps"] - 1):
        optimizer.step()
        scheduler.step()
        seen.append([group[key] for group in optimizer.param_groups])
    return seen


def _expected(case: dict) -> list[list[float]]:
    # CosineAnnealingWarmRestarts follows torch (the reference stops restarting at T_0).
    return case.get("torch_values", case["values"])


def _assert_close(seen, expected, abs_tol=0.0):
    assert len(seen) == len(expected)
    for step, (row, want) in enumerate(zip(seen, expected)):
        for group, (a, b) in enumerate(zip(row, want)):
            assert math.isclose(a, b, rel_tol=1e-6, abs_tol=abs_tol), (step, group, a, b)


def _float32_rounding(values) -> float:
    """What float32 arithmetic may lose against a float64 source: 1e-7 of the scale."""
    return 1e-7 * max(abs(v) for row in values for v in row)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_matches_reference(case):
    expected = _expected(case)
    # torch's numbers are float64; ours and cerebras.pytorch's are float32.
    abs_tol = _float32_rounding(expected) if case.get("source") == "torch" else 0.0
    _assert_close(_run(case), expected, abs_tol)
