"""Parity with cerebras.pytorch 2.10 (tests/reference/cerebras_schedules.json) and torch.

Every reference case is built from its YAML spec through `build` on an SGD optimizer with
the case's param groups, stepped, and compared group by group at relative 1e-6 over the
whole recorded run (at least twice each schedule's length).
"""

import json
import math

import pytest
import torch
from conftest import REPO

from cs_lightning.schedulers import build

CASES = json.loads((REPO / "tests/reference/cerebras_schedules.json").read_text())


def _optimizer(case: dict) -> torch.optim.Optimizer:
    groups = []
    for group in case["param_groups"]:
        groups.append({"params": [torch.nn.Parameter(torch.zeros(1))], **group})
    return torch.optim.SGD(groups, lr=0.1)


def _run(case: dict, steps: int) -> list[list[float]]:
    optimizer = _optimizer(case)
    (scheduler,) = build(case["spec"], optimizer)  # LambdaLR without lr_lambda: the reference's function
    key = case["key"]
    seen = [[group[key] for group in optimizer.param_groups]]
    for _ in range(steps - 1):
        optimizer.step()
        scheduler.step()
        seen.append([group[key] for group in optimizer.param_groups])
    return seen


def _expected(case: dict) -> list[list[float]]:
    # CosineAnnealingWarmRestarts follows torch (the reference stops restarting at T_0).
    return case.get("torch_values", case["values"])


def _first_negative(values: list[list[float]]) -> int | None:
    """The first step whose value is negative (which cerebras.pytorch writes, as we do; we refuse its update), or None."""
    return next((step for step, row in enumerate(values) if min(row) < 0), None)


def _assert_close(seen, expected, abs_tol=0.0, rel_tol=1e-6):
    assert len(seen) == len(expected)
    for step, (row, want) in enumerate(zip(seen, expected)):
        for group, (a, b) in enumerate(zip(row, want)):
            assert math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol), (step, group, a, b)


def _float32_rounding(values) -> float:
    """What float32 arithmetic may lose against a float64 source: a cosine's float32
    angle is off by up to 2.4e-7, which moves the value by up to ~1.2e-7 of its scale."""
    return 2e-7 * max(abs(v) for row in values for v in row)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_matches_reference(case):
    expected = _expected(case)
    # torch's numbers are float64; ours and cerebras.pytorch's are float32.
    abs_tol = _float32_rounding(expected) if case.get("source") == "torch" else 0.0
    negative = _first_negative(expected)
    reached = len(expected) if negative is None else negative + 1  # the negative value is written, not used
    _assert_close(_run(case, reached), expected[:reached], abs_tol)
    if negative is not None:  # values() gives the reference's numbers, negative ones too
        (scheduler,) = build(case["spec"], _optimizer(case))
        _assert_close(scheduler.values(len(expected)).tolist(), expected, abs_tol)


@pytest.mark.parametrize("case", [c for c in CASES if _first_negative(_expected(c)) is not None], ids=lambda c: c["id"])
def test_an_update_with_a_negative_value_is_refused(case):
    """cerebras.pytorch 2.10's linear OneCycle extrapolates below 0 past total_steps and writes that into
    the optimizer, as here (Lightning steps the schedulers once after a run's last update); the update
    that would use it is refused."""
    negative = _first_negative(_expected(case))
    with pytest.raises(ValueError, match=rf": step {negative} gives {case['key']}=-[0-9.e-]+; a ") as error:
        _run(case, negative + 2)
    assert "must be >= 0 (torch's optimizers refuse" in str(error.value)


# -- torch's own schedulers, where they mean the same thing ------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cs_lightning import schedulers as cs  # noqa: E402


def _torch_lrs(make, steps):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = make(optimizer)
    seen = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps - 1):
        optimizer.step()
        scheduler.step()
        seen.append(optimizer.param_groups[0]["lr"])
    return [[v] for v in seen]


def _ours(make, steps):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    return make(optimizer).values(steps).tolist()


def _assert_float32_close(ours, theirs, rel_tol=1e-6):
    _assert_close(ours, theirs, _float32_rounding(theirs), rel_tol)


@given(t0=st.integers(1, 12), t_mult=st.integers(1, 3), eta_min=st.sampled_from([0.0, 1e-3]))
def test_warm_restarts_match_torch(t0, t_mult, eta_min):
    steps = 6 * t0 * t_mult + 7
    theirs = _torch_lrs(
        lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=t0, T_mult=t_mult, eta_min=eta_min), steps
    )
    ours = _ours(lambda o: cs.CosineAnnealingWarmRestarts(o, 0.1, T_0=t0, T_mult=t_mult, eta_min=eta_min), steps)
    _assert_float32_close(ours, theirs)


TORCH_TWINS = {
    "step": (
        lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=7, gamma=0.5),
        lambda o: cs.StepLR(o, 0.1, step_size=7, gamma=0.5),
    ),
    "multistep": (
        lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[5, 12, 30], gamma=0.3),
        lambda o: cs.MultiStepLR(o, 0.1, gamma=0.3, milestones=[5, 12, 30]),
    ),
    "exponential": (
        lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.95),
        lambda o: cs.ExponentialLR(o, 0.1, total_iters=1, decay_rate=0.95),
    ),
    "cyclic_triangular": (
        lambda o: torch.optim.lr_scheduler.CyclicLR(o, 1e-3, 0.1, 10, 15, cycle_momentum=False),
        lambda o: cs.CyclicLR(o, 1e-3, 0.1, 10, 15),
    ),
    "cyclic_triangular2": (
        lambda o: torch.optim.lr_scheduler.CyclicLR(o, 1e-3, 0.1, 8, mode="triangular2", cycle_momentum=False),
        lambda o: cs.CyclicLR(o, 1e-3, 0.1, 8, mode="triangular2"),
    ),
    "cyclic_exp_range": (
        lambda o: torch.optim.lr_scheduler.CyclicLR(
            o, 1e-3, 0.1, 8, 12, mode="exp_range", gamma=0.98, cycle_momentum=False
        ),
        lambda o: cs.CyclicLR(o, 1e-3, 0.1, 8, 12, mode="exp_range", gamma=0.98),
    ),
    "one_cycle_cos": (
        lambda o: torch.optim.lr_scheduler.OneCycleLR(
            o, 0.1, total_steps=50, pct_start=0.3, div_factor=25, final_div_factor=100, cycle_momentum=False
        ),
        lambda o: cs.OneCycleLR(o, 0.004, 0.1, total_steps=50, pct_start=0.3, final_div_factor=100),
    ),
    "one_cycle_linear_three_phase": (
        lambda o: torch.optim.lr_scheduler.OneCycleLR(
            o,
            0.1,
            total_steps=60,
            pct_start=0.25,
            div_factor=25,
            final_div_factor=100,
            three_phase=True,
            anneal_strategy="linear",
            cycle_momentum=False,
        ),
        lambda o: cs.OneCycleLR(
            o,
            0.004,
            0.1,
            total_steps=60,
            pct_start=0.25,
            final_div_factor=100,
            three_phase=True,
            anneal_strategy="linear",
        ),
    ),
}


@pytest.mark.parametrize("name", list(TORCH_TWINS))
def test_matches_torch_where_the_semantics_coincide(name):
    make_torch, make_ours = TORCH_TWINS[name]
    steps = 50 if name.startswith("one_cycle") else 100  # torch's OneCycleLR stops at the end
    # gamma**k with gamma in float32 (0.98 -> 0.98000002) drifts by k * 2e-8 relative.
    rel_tol = 3e-6 if name == "cyclic_exp_range" else 1e-6
    _assert_float32_close(_ours(make_ours, steps), _torch_lrs(make_torch, steps), rel_tol)


def test_cosine_annealing_matches_its_formula():
    # torch's CosineAnnealingLR steps recursively and drifts, so the independent reference
    # is the formula itself, in float64. Past 2*pi the float32 angle (as in the reference)
    # is off by up to ulp(4*pi)/2 = 4.8e-7 rad: 4.8e-7 * amplitude 0.0495 = 2.4e-8.
    expected = [[1e-3 + (0.1 - 1e-3) * (1 + math.cos(math.pi * k / 25)) / 2] for k in range(100)]
    ours = _ours(lambda o: cs.CosineAnnealingLR(o, 0.1, T_max=25, eta_min=1e-3), 100)
    _assert_close(ours, expected, abs_tol=2.5e-8)


def _class_names(spec) -> set[str]:
    if isinstance(spec, dict):
        own = {key for key in spec if key[:1].isupper()}
        return own.union(*(_class_names(value) for value in spec.values()))
    if isinstance(spec, list):
        return set().union(*(_class_names(item) for item in spec))
    return set()


def test_every_class_of_the_catalogue_has_reference_cases():
    bases = (cs.Scheduler, cs.LRScheduler, cs.WeightDecayScheduler)
    catalogue = {
        name
        for name in cs.__all__
        if isinstance(getattr(cs, name), type)
        and issubclass(getattr(cs, name), cs.Scheduler)
        and getattr(cs, name) not in bases
        # not cerebras.pytorch's: their reference is torch's own momentum cycling (test_lightning_behaviour)
        and not issubclass(getattr(cs, name), cs.MomentumScheduler)
    }
    assert len(catalogue) == 39
    assert catalogue <= set().union(*(_class_names(case["spec"]) for case in CASES))
