"""Bad arguments across the catalogue: each raises ValueError/TypeError naming the argument (a CSLightningError).

cerebras.pytorch 2.10 accepts most of these and produces nan, inf, a silent constant or a
ZeroDivisionError later; here the constructor refuses them, and nothing is written.
"""

import copy
import gc
import re
import weakref

import pytest
import torch
import yaml

from cs_lightning import schedulers as cs
from cs_lightning.errors import CSLightningError, ParamGroupTagsError


def _optimizer():
    return torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)


def _linear(optimizer):
    return cs.LinearLR(optimizer, 0.0, 1.0, 10)


BAD = [
    # (id, class name, arguments after the optimizer, argument named, error type)
    (
        "linear_total_iters_negative",
        "LinearLR",
        dict(initial_learning_rate=0.0, end_learning_rate=1.0, total_iters=-5),
        "total_iters",
        ValueError,
    ),
    (
        "linear_total_iters_float",
        "LinearLR",
        dict(initial_learning_rate=0.0, end_learning_rate=1.0, total_iters=10.5),
        "total_iters",
        TypeError,
    ),
    (
        "linear_total_iters_none",
        "LinearLR",
        dict(initial_learning_rate=0.0, end_learning_rate=1.0, total_iters=None),
        "total_iters",
        TypeError,
    ),
    (
        "linear_initial_string",
        "LinearLR",
        dict(initial_learning_rate="0.1", end_learning_rate=1.0, total_iters=10),
        "initial_learning_rate",
        TypeError,
    ),
    (
        "linear_end_nan",
        "LinearLR",
        dict(initial_learning_rate=0.0, end_learning_rate=float("nan"), total_iters=10),
        "end_learning_rate",
        ValueError,
    ),
    (
        "linear_cycle_string",
        "LinearLR",
        dict(initial_learning_rate=0.0, end_learning_rate=1.0, total_iters=10, cycle="yes"),
        "cycle",
        TypeError,
    ),
    (
        "polynomial_power_zero",
        "PolynomialLR",
        dict(initial_learning_rate=0.1, end_learning_rate=0.0, total_iters=10, power=0.0),
        "power",
        ValueError,
    ),
    (
        "polynomial_wd_total_iters_negative",
        "PolynomialWD",
        dict(initial_val=0.1, end_val=0.0, total_iters=-1),
        "total_iters",
        ValueError,
    ),
    ("constant_bool_value", "ConstantLR", dict(learning_rate=True), "learning_rate", TypeError),
    ("constant_total_iters_negative", "ConstantWD", dict(val=0.1, total_iters=-1), "total_iters", ValueError),
    (
        "exponential_total_iters_zero",
        "ExponentialLR",
        dict(initial_learning_rate=0.1, total_iters=0, decay_rate=0.5),
        "total_iters",
        ValueError,
    ),
    (
        "exponential_decay_rate_negative",
        "ExponentialLR",
        dict(initial_learning_rate=0.1, total_iters=10, decay_rate=-0.5),
        "decay_rate",
        ValueError,
    ),
    (
        "inverse_time_decay_rate_negative",
        "InverseExponentialTimeDecayLR",
        dict(initial_learning_rate=0.1, step_exponent=1, total_iters=10, decay_rate=-0.5),
        "decay_rate",
        ValueError,
    ),
    (
        "inverse_time_exponent_negative",
        "InverseExponentialTimeDecayWD",
        dict(initial_val=0.1, step_exponent=-1, total_iters=10, decay_rate=0.5),
        "step_exponent",
        ValueError,
    ),
    ("inverse_sqrt_warmup_zero", "InverseSquareRootDecayLR", dict(warmup_steps=0), "warmup_steps", ValueError),
    (
        "cosine_decay_total_iters_zero",
        "CosineDecayLR",
        dict(initial_learning_rate=0.1, end_learning_rate=0.0, total_iters=0),
        "total_iters",
        ValueError,
    ),
    ("cosine_annealing_t_max_zero", "CosineAnnealingLR", dict(initial_learning_rate=0.1, T_max=0), "T_max", ValueError),
    (
        "cosine_annealing_eta_min_string",
        "CosineAnnealingWD",
        dict(initial_val=0.1, T_max=10, eta_min="0"),
        "eta_min",
        TypeError,
    ),
    ("warm_restarts_t0_zero", "CosineAnnealingWarmRestarts", dict(initial_learning_rate=0.1, T_0=0), "T_0", ValueError),
    (
        "warm_restarts_t_mult_zero",
        "CosineAnnealingWarmRestarts",
        dict(initial_learning_rate=0.1, T_0=5, T_mult=0),
        "T_mult",
        ValueError,
    ),
    (
        "warm_restarts_t_mult_float",
        "CosineAnnealingWarmRestartsWD",
        dict(initial_val=0.1, T_0=5, T_mult=1.5),
        "T_mult",
        TypeError,
    ),
    ("step_size_zero", "StepLR", dict(initial_learning_rate=0.1, step_size=0, gamma=0.5), "step_size", ValueError),
    ("step_gamma_negative", "StepWD", dict(initial_val=0.1, step_size=5, gamma=-0.5), "gamma", ValueError),
    (
        "multistep_not_increasing",
        "MultiStepLR",
        dict(initial_learning_rate=0.1, gamma=0.5, milestones=[30, 10]),
        "milestones",
        ValueError,
    ),
    (
        "multistep_repeated",
        "MultiStepLR",
        dict(initial_learning_rate=0.1, gamma=0.5, milestones=[10, 10]),
        "milestones",
        ValueError,
    ),
    ("multistep_not_a_list", "MultiStepWD", dict(initial_val=0.1, gamma=0.5, milestones=10), "milestones", TypeError),
    (
        "multistep_negative",
        "MultiStepLR",
        dict(initial_learning_rate=0.1, gamma=0.5, milestones=[-1, 5]),
        "milestones[0]",
        ValueError,
    ),
    (
        "piecewise_wrong_count",
        "PiecewiseConstantLR",
        dict(learning_rates=[0.1, 0.01], milestones=[10, 20]),
        "milestones",
        ValueError,
    ),
    (
        "piecewise_not_increasing",
        "PiecewiseConstantWD",
        dict(vals=[0.1, 0.01, 0.001], milestones=[20, 10]),
        "milestones",
        ValueError,
    ),
    (
        "piecewise_empty_values",
        "PiecewiseConstantLR",
        dict(learning_rates=[], milestones=[]),
        "learning_rates",
        TypeError,
    ),
    (
        "multiplicative_coefficient_zero",
        "MultiplicativeLR",
        dict(initial_learning_rate=0.1, coefficient=0.0),
        "coefficient",
        ValueError,
    ),
    ("lambda_not_callable", "LambdaLR", dict(initial_learning_rate=0.1, lr_lambda=0.5), "lr_lambda", TypeError),
    (
        "cyclic_step_size_up_zero",
        "CyclicLR",
        dict(base_lr=0.001, max_lr=0.01, step_size_up=0),
        "step_size_up",
        ValueError,
    ),
    (
        "cyclic_step_size_down_negative",
        "CyclicWD",
        dict(base_val=0.001, max_val=0.01, step_size_down=-1),
        "step_size_down",
        ValueError,
    ),
    ("cyclic_unknown_mode", "CyclicLR", dict(base_lr=0.001, max_lr=0.01, mode="sawtooth"), "mode", ValueError),
    (
        "cyclic_unknown_scale_mode",
        "CyclicLR",
        dict(base_lr=0.001, max_lr=0.01, scale_mode="epochs"),
        "scale_mode",
        ValueError,
    ),
    (
        "one_cycle_unknown_anneal",
        "OneCycleLR",
        dict(initial_learning_rate=0.004, max_lr=0.1, anneal_strategy="cosine"),
        "anneal_strategy",
        ValueError,
    ),
    (
        "one_cycle_pct_start_one",
        "OneCycleLR",
        dict(initial_learning_rate=0.004, max_lr=0.1, total_steps=100, pct_start=1.0),
        "pct_start",
        ValueError,
    ),
    (
        "one_cycle_three_phase_pct_too_big",
        "OneCycleWD",
        dict(initial_val=0.004, max_val=0.1, total_steps=100, pct_start=0.6, three_phase=True),
        "pct_start",
        ValueError,
    ),
    (
        "one_cycle_phase_too_short",
        "OneCycleLR",
        dict(initial_learning_rate=0.004, max_lr=0.1, total_steps=10, pct_start=0.05),
        "pct_start",
        ValueError,
    ),
    (
        "one_cycle_final_div_zero",
        "OneCycleLR",
        dict(initial_learning_rate=0.004, max_lr=0.1, final_div_factor=0),
        "final_div_factor",
        ValueError,
    ),
    (
        "tags_duplicate",
        "LinearLR",
        dict(initial_learning_rate=0.0, end_learning_rate=1.0, total_iters=10, param_group_tags=["a", "a"]),
        "param_group_tags",
        ValueError,
    ),
    (
        "tags_match_nothing",
        "LinearLR",
        dict(initial_learning_rate=0.0, end_learning_rate=1.0, total_iters=10, param_group_tags="decay"),
        "param_group_tags",
        ValueError,
    ),
    (
        "tags_not_strings",
        "LinearWD",
        dict(initial_val=0.0, end_val=1.0, total_iters=10, param_group_tags=[3]),
        "param_group_tags",
        TypeError,
    ),
    (
        "sequential_milestone_count",
        "SequentialLR",
        dict(schedulers=lambda o: [_linear(o)], milestones=[5, 10]),
        "milestone",
        ValueError,
    ),
    (
        "sequential_milestones_not_increasing",
        "SequentialLR",
        dict(schedulers=lambda o: [_linear(o), _linear(o), _linear(o)], milestones=[10, 5]),
        "milestones",
        ValueError,
    ),
    (
        "sequential_milestone_float",
        "SequentialLR",
        dict(schedulers=lambda o: [_linear(o), _linear(o)], milestones=[5.5]),
        "milestones[0]",
        TypeError,
    ),
    (
        "sequential_wrong_key",
        "SequentialLR",
        dict(schedulers=lambda o: [_linear(o), cs.LinearWD(o, 0.1, 0.0, 5)], milestones=[10]),
        "schedulers[1]",
        ValueError,
    ),
    ("sequential_empty", "SequentialWD", dict(schedulers=[], milestones=[]), "schedulers", TypeError),
    (
        "sequential_other_optimizer",
        "SequentialLR",
        dict(schedulers=lambda o: [_linear(o), _linear(_optimizer())], milestones=[10]),
        "schedulers[1]",
        ValueError,
    ),
    (
        "sequential_last_epoch_below",
        "SequentialLR",
        dict(schedulers=lambda o: [_linear(o)], milestones=[], last_epoch=-2),
        "last_epoch",
        ValueError,
    ),
    ("chained_not_schedulers", "ChainedScheduler", dict(schedulers=["LinearLR"]), "schedulers[0]", TypeError),
    (
        "chained_zero_start",
        "ChainedLR",
        dict(schedulers=lambda o: [_linear(o), cs.LinearLR(o, 0.0, 1.0, 5)]),
        "LinearLR starts at 0",
        ValueError,
    ),
    ("scale_per_param_adjust_string", "ScalePerParamLR", dict(scheduler=_linear), "adjust_learning_rate", TypeError),
]


def _arguments(args, optimizer):
    return {
        name: value(optimizer) if callable(value) and name != "lr_lambda" else value for name, value in args.items()
    }


@pytest.mark.parametrize("name,args,argument,error", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_argument_raises_naming_it(name, args, argument, error):
    optimizer = _optimizer()
    if argument == "adjust_learning_rate":
        optimizer.param_groups[0]["adjust_learning_rate"] = "2"
    arguments = _arguments(args, optimizer)
    optimizer.param_groups[0]["lr"] = 1.0
    cls = getattr(cs, name)
    with pytest.raises(error, match=argument.replace("[", r"\[").replace("]", r"\]")) as raised:
        if "optimizer" in cls.__init__.__code__.co_varnames[:2]:
            cls(optimizer, **arguments)
        else:
            cls(**arguments)
    assert name in str(raised.value) and isinstance(raised.value, CSLightningError)
    assert optimizer.param_groups[0]["lr"] == 1.0  # nothing written


def test_enumerates_at_least_thirty_distinct_bad_arguments():
    assert len({(b[1], b[3]) for b in BAD}) >= 30


def test_sequential_milestones_follow_one_rule_in_python_and_yaml():
    """Given milestones are taken as they are, in Python and YAML (as cerebras.pytorch 2.10 does):
    a child's total_iters does not bound its stage; only the list itself is checked."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    children = [
        {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 0.1, "total_iters": 10}},
        {"CosineDecayLR": {"initial_learning_rate": 0.2, "end_learning_rate": 0.0, "total_iters": 90}},
    ]
    built = cs.SequentialLR(
        optimizer, [cs.LinearLR(optimizer, 0.0, 0.1, 10), cs.CosineDecayLR(optimizer, 0.2, 0.0, 90)], [20]
    )
    (from_yaml,) = cs.build([{"SequentialLR": {"schedulers": children, "milestones": [20]}}], optimizer)
    assert torch.equal(built.values(120), from_yaml.values(120))
    # the warmup holds its end value from step 10 to the milestone, where the decay starts at its step 0
    assert built.values([9, 10, 19, 20])[:, 0].tolist() == pytest.approx([0.09, 0.1, 0.1, 0.2])
    rule = r"milestones must be strictly increasing \(milestones\[1\]=10 after 20\)"
    three = [cs.LinearLR(optimizer, 0.0, 0.1, 10), cs.ConstantLR(optimizer, 0.1), cs.LinearLR(optimizer, 0.1, 0.0, 5)]
    with pytest.raises(ValueError, match=rf"^SequentialLR: got milestones=\[20, 10\]; {rule}$"):
        cs.SequentialLR(optimizer, three, [20, 10])
    yaml_three = [*children[:1], {"ConstantLR": {"learning_rate": 0.1}}, children[1]]
    with pytest.raises(  # said at the key of the value refused
        ValueError,
        match=rf"^schedulers\[0\]\.SequentialLR\.milestones: got \[20, 10\]; {rule}; fix: correct the value$",
    ):
        cs.build([{"SequentialLR": {"schedulers": yaml_three, "milestones": [20, 10]}}], optimizer)


LR_RULE = r"a learning rate must be >= 0 \(torch's optimizers refuse lr < 0\)"
WD_RULE = r"a weight decay must be >= 0 \(torch's optimizers refuse weight_decay < 0\)"


@pytest.mark.parametrize(
    ("cls", "args", "argument", "rule"),
    [
        ("LinearLR", (-0.1, 0.0, 10), "initial_learning_rate=-0.1", LR_RULE),
        ("CosineDecayLR", (0.1, -1e-5, 10), "end_learning_rate=-1e-05", LR_RULE),
        ("ConstantLR", (-0.5,), "learning_rate=-0.5", LR_RULE),
        ("InverseSquareRootDecayLR", (0.1, -1.0), "scale=-1.0; scale multiplies every learning rate", LR_RULE),
        ("LinearWD", (-0.1, 0.0, 4), "initial_val=-0.1", WD_RULE),
        ("CosineDecayWD", (0.1, -0.01, 4), "end_val=-0.01", WD_RULE),
        ("PiecewiseConstantWD", ([0.1, -0.2], [3]), r"vals=\[0.1, -0.2\]", WD_RULE),
        ("InverseSquareRootDecayWD", (0.1, -2.0), "scale=-2.0; scale multiplies every weight decay", WD_RULE),
        (
            "CyclicMomentum",
            (-0.8, 0.9, 5),
            "base_val=-0.8",
            r"a momentum must be >= 0 \(torch's optimizers refuse momentum < 0\)",
        ),
    ],
)
def test_an_argument_giving_negative_values_is_refused(cls, args, argument, rule):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1, momentum=0.9, weight_decay=0.01)
    with pytest.raises(ValueError, match=rf"^{cls}: got {argument}; {rule}$"):
        getattr(cs, cls)(optimizer, *args)
    assert optimizer.param_groups[0]["lr"] == 0.1
    assert optimizer.param_groups[0]["weight_decay"] == 0.01


def _refused(cls, step, value, rule=LR_RULE):
    return rf"^{cls}: step {step} gives {value}; {rule}, and finite; fix: change the schedule's arguments \(or its _get_closed_form\) so that no step gives one$"


class _Falling(cs.LRScheduler):
    """A custom closed form that turns negative at step 3 (0.1, 0.05, 0, -0.05)."""

    def __init__(self, optimizer):
        super().__init__(optimizer)

    def _get_closed_form(self):
        return 0.1 - 0.05 * self.last_epoch


@pytest.mark.parametrize(
    ("make", "good_steps", "refused"),
    [
        (lambda o: cs.LambdaLR(o, 1.0, lambda k: 1.0 - k * 0.5), 3, _refused("LambdaLR", 3, "lr=-0.5")),
        (lambda o: _Falling(o), 3, _refused("_Falling", 3, r"lr=-0.05000000447034836")),
        (lambda o: cs.MultiplicativeLR(o, 0.1, 1.5), 219, _refused("MultiplicativeLR", 219, "lr=inf")),
        # past the first block of precomputed steps (1024)
        (lambda o: cs.LambdaLR(o, 1.0, lambda k: 2000.0 - k), 2001, _refused("LambdaLR", 2001, "lr=-1.0")),
    ],
    ids=["lambda", "custom", "multiplicative_overflow", "lambda_late"],
)
def test_an_update_with_a_negative_or_infinite_value_is_refused(make, good_steps, refused):
    """The value is written, as cerebras.pytorch writes it; the optimizer step that would use it raises."""
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scheduler = make(optimizer)
    weight.grad = torch.ones(1)
    for _ in range(good_steps - 1):
        scheduler.step()
    optimizer.step()  # the last value in range is used
    updated = weight.item()
    scheduler.step()
    with pytest.raises(ValueError, match=refused):
        optimizer.step()
    assert weight.item() == updated  # no update with the refused value


def test_an_update_past_a_refused_value_is_taken():
    """Negative at step 3 only: the update at step 3 is refused, the one at step 4 is not."""
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scheduler = cs.LambdaLR(optimizer, 1.0, lambda k: (k - 3.0) ** 2 - 0.5)
    weight.grad = torch.ones(1)
    scheduler.step()
    scheduler.step()
    scheduler.step()
    with pytest.raises(ValueError, match=_refused("LambdaLR", 3, "lr=-0.5")):
        optimizer.step()
    scheduler.step()
    optimizer.step()
    assert optimizer.param_groups[0]["lr"] == 0.5 and weight.item() == 0.5


MOMENTUM_RULE = r"a momentum must be >= 0 \(torch's optimizers refuse momentum < 0\)"


@pytest.mark.parametrize(
    ("make_optimizer", "held"),
    [
        (lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9), lambda group: group["momentum"]),
        (lambda params: torch.optim.Adam(params, lr=0.1), lambda group: group["betas"][0]),
    ],
    ids=["sgd_momentum", "adam_beta1"],
)
def test_an_update_with_a_negative_momentum_is_refused_in_momentum_or_beta1(make_optimizer, held):
    """A linear one-cycle extrapolates below 0 at step total_steps; Adam holds it as betas[0]."""
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = make_optimizer([weight])
    scheduler = cs.OneCycleMomentum(optimizer, initial_val=0.9, max_val=0.1, total_steps=10, anneal_strategy="linear")
    weight.grad = torch.ones(1)
    for _ in range(10):
        optimizer.step()
        scheduler.step()
    assert held(optimizer.param_groups[0]) == pytest.approx(-0.014182858)
    updated = weight.item()
    with pytest.raises(
        ValueError, match=_refused("OneCycleMomentum", 10, "momentum=-0.014182858169078827", MOMENTUM_RULE)
    ):
        optimizer.step()
    assert weight.item() == updated


BETA1_RULE = (
    r"which becomes beta1 \(betas\[0\]\) of {optimizer}'s param_groups\[0\]; torch's {optimizer} needs "
    r"0 <= beta1 < 1 \(its step divides by 1 - beta1\*\*step\); fix: give {argument} < 1 \(e.g. 0.95\), or "
    r"schedule the momentum of an optimizer that has one \(SGD, RMSprop\)$"
)


@pytest.mark.parametrize(
    ("make_optimizer", "make", "got"),
    [
        (
            lambda p: torch.optim.Adam(p, lr=0.1),
            lambda o: cs.OneCycleMomentum(o, initial_val=1.0, max_val=0.85, total_steps=10, final_div_factor=1.0),
            "OneCycleMomentum: got initial_val=1.0",
        ),
        (
            lambda p: torch.optim.AdamW(p, lr=0.1),
            lambda o: cs.CyclicMomentum(o, base_val=0.8, max_val=1.2, step_size_up=5),
            "CyclicMomentum: got max_val=1.2",
        ),
    ],
    ids=["one_cycle_adam", "cyclic_adamw"],
)
def test_a_beta1_of_one_or_more_is_refused_at_construction(make_optimizer, make, got):
    """torch's Adam refuses betas[0] >= 1 when built; written by a scheduler, 1.0 made its step raise
    ZeroDivisionError ('float division by zero'). Refused where it is written, naming the argument."""
    optimizer = make_optimizer([torch.nn.Parameter(torch.ones(1))])
    argument = got.split()[-1].split("=")[0]
    rule = BETA1_RULE.format(optimizer=type(optimizer).__name__, argument=argument)
    with pytest.raises(ValueError, match=rf"^{got}, {rule}"):
        make(optimizer)
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.999)  # nothing written


def test_an_update_with_a_beta1_of_one_or_more_is_refused_where_its_arguments_do_not_show_it():
    """final_div_factor=0.5 ends the cycle at twice initial_val: beta1 passes 1 within the run, and Adam's step
    divided by 1 - beta1**step (ZeroDivisionError at 1) or went on with a beta1 above 1, diverging."""
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.Adam([weight], lr=0.1)
    scheduler = cs.OneCycleMomentum(optimizer, initial_val=0.9, max_val=0.85, total_steps=10, final_div_factor=0.5)
    weight.grad = torch.ones(1)
    taken = 0
    with pytest.raises(
        ValueError,
        match=r"^OneCycleMomentum: step 4 gives momentum=1.0288423299789429, which becomes beta1 \(betas\[0\]\) of Adam's "
        r"param_groups\[0\]; torch's Adam needs 0 <= beta1 < 1; fix: change the schedule's arguments \(or its "
        r"_get_closed_form\) so that no step gives one$",
    ):
        for _ in range(10):
            optimizer.step()
            taken += 1
            scheduler.step()
    assert taken == 4 and optimizer.param_groups[0]["betas"][0] > 1  # written, as torch writes it; not used
    sgd = torch.optim.SGD([weight], lr=0.1, momentum=0.9)
    scheduler = cs.OneCycleMomentum(sgd, initial_val=0.9, max_val=0.85, total_steps=10, final_div_factor=0.5)
    for _ in range(10):
        sgd.step()
        scheduler.step()
    assert sgd.param_groups[0]["momentum"] > 1  # torch's SGD takes it


def test_a_momentum_of_one_is_taken_as_torchs_sgd_takes_it():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1, momentum=0.9)
    cs.OneCycleMomentum(optimizer, initial_val=1.0, max_val=0.85, total_steps=10, final_div_factor=1.0)
    assert optimizer.param_groups[0]["momentum"] == 1.0


def test_a_group_added_to_adam_follows_a_momentum_schedule_from_its_own_beta1():
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    scheduler = cs.OneCycleMomentum(optimizer, initial_val=0.9, max_val=0.8, total_steps=10, anneal_strategy="linear")
    optimizer.add_param_group({"params": [torch.nn.Parameter(torch.ones(1))], "betas": (0.45, 0.999)})
    scheduler.step()
    first, joined = (group["betas"] for group in optimizer.param_groups)
    assert joined[0] == pytest.approx(first[0] / 2) and joined[1] == 0.999


def test_a_nan_or_negative_weight_decay_at_the_first_step_is_refused_at_construction():
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))], weight_decay=0.01)
    with pytest.raises(ValueError, match=_refused("LambdaLR", 0, "lr=nan")):
        cs.LambdaLR(optimizer, 0.1, lambda k: k * float("nan"))
    with pytest.raises(ValueError, match=_refused("LambdaWD", 0, "weight_decay=-0.10000000149011612", WD_RULE)):
        cs.LambdaWD(optimizer, 0.1, lambda k: k - 1.0)
    assert optimizer.param_groups[0]["lr"] == 0.001
    assert optimizer.param_groups[0]["weight_decay"] == 0.01


def test_tags_matching_no_group_raise_one_error_type_at_any_depth_of_a_yaml_block():
    """The CLI adds its fix by catching this type, so it must survive nesting (message unchanged)."""
    optimizer = _optimizer()
    with pytest.raises(ParamGroupTagsError) as alone:
        cs.ConstantLR(optimizer, learning_rate=0.1, param_group_tags="decay")
    message = (
        "ConstantLR: got param_group_tags=['decay'], which match no param group of its optimizer (its groups are "
        "untagged); fix: give the optimizer's param groups the tags you mean (a group {'params': [...], 'tags': "
        "{'decoder'}}) or drop param_group_tags"
    )
    assert str(alone.value) == message and alone.value.path == ()
    nested = {
        "SequentialLR": {
            "schedulers": [
                {"LinearLR": dict(initial_learning_rate=0.0, end_learning_rate=1.0, total_iters=10)},
                {"ConstantLR": {"learning_rate": 0.1, "param_group_tags": "decay"}},
            ]
        }
    }
    with pytest.raises(ParamGroupTagsError) as deep:
        cs.build({"ScalePerParamLR": {"scheduler": nested}}, optimizer)
    path = ("schedulers", "ScalePerParamLR", "scheduler", "SequentialLR", "schedulers", 1, "ConstantLR")
    assert deep.value.path == path and deep.value.message == message


def test_tags_matching_no_group_name_the_groups_tags_and_survive_pickling():
    """Untagged groups read as untagged (not None); the error crosses to another rank whole."""
    import pickle

    weights, biases = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([{"params": [weights], "tags": {"decay"}}, {"params": [biases]}], lr=0.1)
    with pytest.raises(ParamGroupTagsError, match=r"\(its groups are tagged \['decay'\] and untagged\); fix: give"):
        cs.ConstantLR(optimizer, learning_rate=0.1, param_group_tags="embedding")
    error = ParamGroupTagsError(("schedulers", 0), "ConstantLR: got ...", "fix: use a tag of the block")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.path, str(copy)) == (ParamGroupTagsError, error.path, str(error))
    assert str(error.under("a").with_fix("fix: other")) == "a.schedulers[0]: ConstantLR: got ...; fix: other"


@pytest.mark.parametrize(
    ("name", "args", "argument", "expected"),
    [
        ("LinearLR", dict(initial_learning_rate=0.1, end_learning_rate=0.0, total_iters=1e3), "total_iters", 1000),
        ("StepLR", dict(initial_learning_rate=0.1, step_size=3.0, gamma=0.5), "step_size", 3),
        ("MultiStepLR", dict(initial_learning_rate=0.1, gamma=0.5, milestones=[2.0, 5.0]), "milestones", [2, 5]),
        ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=4.0), "step_size_up", 4),
        ("OneCycleLR", dict(initial_learning_rate=0.004, max_lr=0.1, total_steps=20.0), "total_steps", 20),
        ("CosineAnnealingWarmRestarts", dict(initial_learning_rate=0.1, T_0=3.0), "T_0", 3),
    ],
)
def test_a_whole_number_float_is_taken_as_its_integer(name, args, argument, expected):
    """YAML reads `1e3` and `1.0e3` as floats: a length written so is that many steps."""
    cls = getattr(cs, name)
    as_floats = cls(_optimizer(), **args)
    as_ints = cls(_optimizer(), **{**args, argument: expected})
    kept = getattr(as_floats, argument)
    assert kept == expected and all(type(v) is int for v in (kept if isinstance(kept, list) else [kept]))
    assert as_floats.state_dict() == as_ints.state_dict()
    assert torch.equal(as_floats.values(40), as_ints.values(40))


def test_a_whole_number_float_from_yaml_text_builds_the_integer_schedule():
    spec = yaml.safe_load("LinearLR: {initial_learning_rate: 0.1, end_learning_rate: 0.0, total_iters: 1.0e+3}")
    assert spec["LinearLR"]["total_iters"] == 1000.0  # a float, as YAML reads it
    (built,) = cs.build(spec, _optimizer())
    assert built.total_iters == 1000 and type(built.total_iters) is int


def test_a_list_of_values_for_one_is_told_how_groups_get_their_own():
    with pytest.raises(
        TypeError, match=r"^LinearLR: got initial_learning_rate=\[0.1, 0.2\]; .*fix: give groups of oth"
    ):
        cs.LinearLR(_optimizer(), [0.1, 0.2], 0.0, 3)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda o: cs.StepLR(o, 0.1, step_size=3, gamma=0.0), [0.1, 0.1, 0.1, 0.0, 0.0]),
        (lambda o: cs.MultiStepLR(o, 0.1, gamma=0.0, milestones=[2]), [0.1, 0.1, 0.0, 0.0, 0.0]),
        (lambda o: cs.ExponentialLR(o, 0.1, total_iters=3, decay_rate=0.0), [0.1, 0.0, 0.0, 0.0, 0.0]),
        (lambda o: cs.InverseExponentialTimeDecayLR(o, 0.1, 1, 3, decay_rate=0.0), [0.1] * 5),
    ],
)
def test_a_rate_of_0_is_taken_as_torch_and_cerebras_pytorch_take_it(make, expected):
    """gamma=0: the value drops to 0 at the first milestone (torch's StepLR gives the same)."""
    assert make(_optimizer()).values(5)[:, 0].tolist() == pytest.approx(expected, rel=1e-7)


@pytest.mark.parametrize(
    ("text", "key", "fix"),
    [
        ("initial_learning_rate: 1e-3", "initial_learning_rate", "write 0.001 or 1.0e-03 (YAML reads 1e-3 as text)"),
        ("total_iters: 1e3", "total_iters", "write 1000"),
        ("total_iters: '10'", "total_iters", "write 10"),
    ],
)
def test_a_number_yaml_read_as_text_is_refused_with_the_number_to_write(text, key, fix):
    """PyYAML's safe_load reads an exponent without a dot and a sign as a string."""
    args = {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iters": 10}
    spec = yaml.safe_load("LinearLR: {" + ", ".join(f"{k}: {v}" for k, v in args.items() if k != key) + f", {text}}}")
    with pytest.raises(
        TypeError,
        match=rf"^schedulers\.LinearLR\.{key}: got '.*'; {key} must be an? \w+, not text; fix: {re.escape(fix)}$",
    ):
        cs.build(spec, _optimizer())


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("LinearLR", dict(initial_learning_rate=0.1, end_learning_rate=0.0, total_iters=2.5), "total_iters=2.5"),
        ("StepLR", dict(initial_learning_rate=0.1, step_size=10.5, gamma=0.5), "step_size=10.5"),
        ("MultiStepLR", dict(initial_learning_rate=0.1, gamma=0.5, milestones=[2.5]), r"milestones\[0\]=2.5"),
    ],
)
def test_a_fractional_float_is_refused_with_an_integer_to_write(name, args, message):
    fix = int(float(message.split("=")[1]))
    with pytest.raises(
        TypeError, match=f"^{name}: got {message}; .* must be an int; fix: write an integer, e.g. {fix}$"
    ):
        getattr(cs, name)(_optimizer(), **args)


@pytest.mark.parametrize("optimizer", [torch.optim.Rprop, torch.optim.LBFGS])
def test_a_weight_decay_schedule_of_an_optimizer_without_weight_decay_is_refused(optimizer):
    # the value would be written into a key the optimizer never reads: a schedule doing nothing
    plain = optimizer([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    with pytest.raises(
        ValueError,
        match=rf"LinearWD: param_groups\[0\] has no weight_decay \({optimizer.__name__} has no weight decay\)",
    ):
        cs.LinearWD(plain, initial_val=0.1, end_val=0.0, total_iters=10)
    assert "weight_decay" not in plain.param_groups[0]


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        (
            "LinearLR",
            dict(initial_learning_rate=0.1, end_learning_rate=0.0, total_iters=10**23),
            f"total_iters={10**23}",
        ),
        ("LinearLR", dict(initial_learning_rate=0.1, end_learning_rate=0.0, total_iters=1e30), "total_iters=1e\\+30"),
        ("StepLR", dict(initial_learning_rate=0.1, step_size=2**63, gamma=0.5), "step_size=9223372036854775808"),
        ("MultiStepLR", dict(initial_learning_rate=0.1, gamma=0.5, milestones=[2, 2**64]), r"milestones\[1\]=\d+"),
    ],
)
def test_a_step_count_past_int64_is_refused_before_it_overflows(name, args, message):
    """Steps are int64 tensors: such a count used to escape as an OverflowError as the schedule was evaluated."""
    with pytest.raises(
        ValueError, match=f"^{name}: got {message}; .* counts steps in int64; fix: give at most {2**63 - 1}$"
    ):
        getattr(cs, name)(_optimizer(), **args)


def test_int64s_largest_step_count_still_builds_a_schedule():
    schedule = cs.LinearLR(_optimizer(), initial_learning_rate=0.0, end_learning_rate=1.0, total_iters=2**63 - 1)
    assert schedule.values(torch.tensor([0, 2**62]))[:, 0].tolist() == [0.0, 0.5]


def test_sequential_milestones_left_out_are_where_each_child_ends():
    """As build() infers them for Model Zoo YAML (cerebras.pytorch 2.10's class requires them)."""
    optimizer = _optimizer()
    children = [
        cs.LinearLR(optimizer, 0.0, 0.1, 4),
        cs.ConstantLR(optimizer, 0.1, 3),
        cs.LinearLR(optimizer, 0.1, 0.0, 5),
    ]
    inferred = cs.SequentialLR(optimizer, children)
    assert inferred.milestones == [4, 7]
    assert torch.equal(inferred.values(20), cs.SequentialLR(optimizer, children, [4, 7]).values(20))
    with pytest.raises(
        ValueError,
        match=r"^SequentialLR: milestones are missing and schedulers\[0\] \(ConstantLR\) has no total_iters to infer "
        r"them from; fix: give milestones \(the step where each next scheduler starts\)$",
    ):
        cs.SequentialLR(optimizer, [cs.ConstantLR(optimizer, 0.1), children[2]])


def _stepped_into_a_negative_value():
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scheduler = _Falling(optimizer)  # picklable, unlike a lambda
    for _ in range(3):
        scheduler.step()
    weight.grad = torch.ones(1)
    return optimizer, scheduler


def test_a_refusal_survives_pickling_and_deepcopy():
    """An optimizer pickles without its hooks: the scheduler registers its own again."""
    import pickle

    _, scheduler = _stepped_into_a_negative_value()
    for copied in (copy.deepcopy(scheduler), pickle.loads(pickle.dumps(scheduler))):
        copied.optimizer.param_groups[0]["params"][0].grad = torch.ones(1)
        with pytest.raises(ValueError, match=_refused("_Falling", 3, r"lr=-0.05000000447034836")):
            copied.optimizer.step()


def test_a_scheduler_thrown_away_or_overwritten_refuses_nothing():
    optimizer, scheduler = _stepped_into_a_negative_value()
    later = cs.LinearLR(optimizer, 0.1, 0.01, 10)  # writes its own value: the negative one is no longer used
    optimizer.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1)
    del later
    scheduler.step(3)  # writes the negative value again
    with pytest.raises(ValueError, match=_refused("_Falling", 3, r"lr=-0.05000000447034836")):
        optimizer.step()
    watched = weakref.ref(scheduler)
    del scheduler
    gc.collect()
    assert watched() is None  # the optimizer's hook held it weakly
    cs.LinearLR(optimizer, 0.1, 0.01, 10)
    optimizer.step()


def test_schedulers_built_and_dropped_leave_one_hook_that_a_collection_mid_step_cannot_break():
    """A sweep or a notebook cell run again builds and drops schedulers on one optimizer: each step
    of the optimizer called a hook per scheduler ever built (children included); removing each with its
    scheduler instead broke a step whose hooks the cyclic collector ran into ("OrderedDict mutated")."""
    optimizer = _optimizer()
    for _ in range(50):
        cs.SequentialLR(optimizer, [cs.LinearLR(optimizer, 0.0, 0.1, 10), cs.CosineDecayLR(optimizer, 0.1, 0.0, 90)])
    assert len(optimizer._optimizer_step_pre_hooks) == 1

    def collect(*_: object) -> None:
        gc.collect()  # frees the composites mid-step

    optimizer.register_step_pre_hook(collect)
    optimizer.step()
    assert len(optimizer._optimizer_step_pre_hooks) == 2
    kept = cs.LinearLR(optimizer, 0.1, 0.01, 10)
    copied = copy.deepcopy(kept)  # its copied optimizer gets a hook of its own
    assert len(optimizer._optimizer_step_pre_hooks) == 2 and len(copied.optimizer._optimizer_step_pre_hooks) == 1
