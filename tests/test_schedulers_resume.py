"""Resuming schedulers from states that differ from them: other arguments warn, other classes are refused."""

import re
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from cs_lightning import schedulers as cs
from cs_lightning.errors import CheckpointSchedulersError, ConfigError
from cs_lightning.schedulers.resume import check_scheduler_states, saved_class


def _optimizer():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def _stepped(scheduler, steps):
    for _ in range(steps):
        scheduler.optimizer.step()
        scheduler.step()
    return scheduler.state_dict()


def _sequence(optimizer, decay_iters):
    return cs.SequentialLR(
        optimizer,
        [cs.LinearLR(optimizer, 0.0, 0.1, 4), cs.CosineDecayLR(optimizer, 0.1, 0.0, decay_iters)],
        milestones=[4],
    )


def test_the_checkpoints_arguments_replace_the_configured_ones_with_a_warning():
    """As torch and cerebras.pytorch 2.10 do (``__dict__.update``), said once, with each argument."""
    saved = _stepped(cs.LinearLR(_optimizer(), 0.1, 0.0, 10), 5)
    configured = cs.LinearLR(_optimizer(), 0.1, 0.0, 20)
    message = (
        "LinearLR.load_state_dict: the checkpoint's arguments differ from the configured ones "
        "(total_iters=20 -> 10, configured -> checkpoint); the checkpoint's values are used"
    )
    with pytest.warns(UserWarning, match=f"^{re.escape(message)}$") as caught:
        configured.load_state_dict(saved)
    assert len(caught) == 1
    assert configured.total_iters == 10
    assert configured.optimizer.param_groups[0]["lr"] == pytest.approx(0.05)  # step 5 of 10


def test_nested_arguments_are_named_by_their_path_in_one_warning():
    saved = _stepped(_sequence(_optimizer(), 8), 3)
    configured = _sequence(_optimizer(), 16)
    configured.schedulers[0].end_val = 0.2
    with pytest.warns(UserWarning) as caught:
        configured.load_state_dict(saved)
    (warning,) = caught
    assert "(schedulers[0].end_learning_rate=0.2 -> 0.1, schedulers[1].total_iters=16 -> 8, configured" in str(
        warning.message
    )
    assert configured.schedulers[1].total_iters == 8


def test_the_same_arguments_load_without_a_warning():
    saved = _stepped(_sequence(_optimizer(), 8), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _sequence(_optimizer(), 8).load_state_dict(saved)


FIX = "fix: resume with the schedulers it was trained with, or start a new run from its weights (without ckpt_path)"


def test_a_checkpoint_with_another_number_of_schedulers_is_refused():
    optimizer = _optimizer()
    states = [cs.LinearLR(optimizer, 0.1, 0.0, 10).state_dict()]
    two = [cs.LinearLR(optimizer, 0.1, 0.0, 10), cs.CosineDecayWD(optimizer, 0.1, 0.0, 10)]
    with pytest.raises(CheckpointSchedulersError) as raised:
        check_scheduler_states("run.ckpt", states, two)
    assert isinstance(raised.value, ConfigError)
    assert str(raised.value) == f"ckpt_path: 'run.ckpt' holds 1 scheduler, this run 2 schedulers; {FIX}"


class ScaledByFnForTestLR(cs.LRScheduler):
    """A custom schedule of a function argument named neither lr_lambda nor wd_lambda, annotated as one."""

    def __init__(self, optimizer, initial_learning_rate, fn: Callable[[Tensor], Tensor], last_epoch=-1):
        self.initial_learning_rate, self.fn = initial_learning_rate, fn
        super().__init__(optimizer, last_epoch=last_epoch)

    def _get_closed_form(self):
        return self.initial_learning_rate * self.fn(self.last_epoch)


class WiderForTestLR(cs.LRScheduler):
    """Unannotated arguments count as data: a state of ScaledByFnForTestLR, which has initial_learning_rate alone,
    is not taken for one of this class (as if ``end`` had held a function)."""

    def __init__(self, optimizer, initial_learning_rate, end, last_epoch=-1):
        self.initial_learning_rate, self.end = initial_learning_rate, end
        super().__init__(optimizer, last_epoch=last_epoch)

    def _get_closed_form(self):
        return torch.tensor(self.initial_learning_rate)


class ShapedForTestLR(cs.LRScheduler):
    """Every argument annotated, the function one as an optional callable."""

    def __init__(self, optimizer: torch.optim.Optimizer, peak: float, shape: Callable[[Tensor], Tensor] | None) -> None:
        self.peak, self.shape = peak, shape
        super().__init__(optimizer)

    def _get_closed_form(self) -> Tensor:
        return self.peak * self.shape(self.last_epoch)


def _halving(steps):
    return 0.5**steps


@pytest.mark.parametrize(
    ("saved", "configured", "found"),
    [
        (
            lambda o: cs.LinearLR(o, 0.1, 0.0, 10),
            lambda o: cs.CosineDecayLR(o, 0.1, 0.0, 10),
            "schedulers[0] is LinearLR in the checkpoint but CosineDecayLR in this run",
        ),
        (
            lambda o: cs.ChainedLR([cs.LinearLR(o, 0.1, 0.0, 10), cs.StepLR(o, 1.0, 3, 0.5)]),
            lambda o: cs.LinearLR(o, 0.1, 0.0, 10),
            "schedulers[0] is ChainedLR, ChainedScheduler or ChainedWD in the checkpoint but LinearLR in this run",
        ),
        (
            lambda o: _sequence(o, 8),
            lambda o: cs.SequentialLR(
                o, [cs.LinearLR(o, 0.0, 0.1, 4), cs.ExponentialLR(o, 0.1, 8, 0.5)], milestones=[4]
            ),
            "schedulers[0].schedulers[1] is CosineDecayLR in the checkpoint but ExponentialLR in this run",
        ),
        (
            lambda o: cs.SequentialLR(
                o, [cs.LinearLR(o, 0.0, 0.1, 4), cs.ConstantLR(o, 0.1), cs.CosineDecayLR(o, 0.1, 0.0, 8)], [4, 8]
            ),
            lambda o: _sequence(o, 8),
            "schedulers[0].schedulers holds 3 schedulers in the checkpoint, this run 2 schedulers",
        ),
        (
            lambda o: ScaledByFnForTestLR(o, 0.1, _halving),
            lambda o: cs.LinearLR(o, 0.1, 0.0, 10),
            "schedulers[0] is ScaledByFnForTestLR in the checkpoint but LinearLR in this run",
        ),
        (
            lambda o: ShapedForTestLR(o, 0.1, _halving),
            lambda o: cs.LinearLR(o, 0.1, 0.0, 10),
            "schedulers[0] is ShapedForTestLR in the checkpoint but LinearLR in this run",
        ),
        (
            lambda o: cs.LambdaLR(o, 0.1, _halving),
            lambda o: ScaledByFnForTestLR(o, 0.1, _halving),
            "schedulers[0] is LambdaLR in the checkpoint but ScaledByFnForTestLR in this run",
        ),
    ],
    ids=["another class", "chained", "nested", "nested count", "custom fn", "custom typed fn", "lambda"],
)
def test_a_checkpoint_with_another_scheduler_class_is_refused_naming_both(saved, configured, found):
    optimizer = _optimizer()
    with pytest.raises(CheckpointSchedulersError) as raised:
        check_scheduler_states("run.ckpt", [saved(optimizer).state_dict()], [configured(optimizer)])
    assert str(raised.value) == f"ckpt_path: 'run.ckpt': {found}; {FIX}"


def test_the_states_of_the_configured_schedulers_pass_the_check():
    optimizer = _optimizer()
    configured = [_sequence(optimizer, 8), cs.CosineDecayWD(optimizer, 0.1, 0.0, 10)]
    check_scheduler_states("run.ckpt", [s.state_dict() for s in configured], configured)


def test_a_custom_class_whose_annotation_does_not_evaluate_leaves_the_resume_check_working():
    """One bad annotation among the live classes (naming what only a type checker knows) raised its
    AttributeError out of the check that names a checkpoint's scheduler class."""

    class BrokenAnnotationForTestLR(cs.LRScheduler):
        def __init__(
            self, optimizer, peak: float, fn: "torch.optim.lr_scheduler.NoSuchFn | None" = None, last_epoch=-1
        ):
            self.peak, self.fn = peak, fn
            super().__init__(optimizer, last_epoch=last_epoch)

        def _get_closed_form(self):
            return torch.tensor(self.peak)

    # its unreadable argument counts as data, saved in its states
    assert saved_class({"last_epoch": 3, "peak": 0.1, "fn": None}) == "BrokenAnnotationForTestLR"
    assert saved_class({"last_epoch": 3, "peak": 0.1}) == "ShapedForTestLR"


@pytest.mark.parametrize("added", ["before the scheduler is made", "before its state is loaded"])
def test_a_param_group_added_mid_run_resumes_following_the_schedule_from_its_own_value(added, recwarn):
    """A group added at step 3 holding 0.2 follows StepLR from 0.2 (4x the schedule's 0.05 there); resumed from a
    state dict, it kept the schedule's own value instead, 0.0125 for 0.05, silently."""
    whole = _optimizer()
    schedule = cs.StepLR(whole, initial_learning_rate=0.1, step_size=2, gamma=0.5)
    _stepped(schedule, 3)
    whole.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.2})
    saved = _stepped(schedule, 3)

    resumed = _optimizer()
    if added == "before the scheduler is made":
        resumed.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.2})
    again = cs.StepLR(resumed, initial_learning_rate=0.1, step_size=2, gamma=0.5)
    if added == "before its state is loaded":
        resumed.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.7})
    check_scheduler_states("last.ckpt", [saved], [again])  # the csx strategies' check before loading
    again.load_state_dict(saved)
    for _ in range(4):
        assert [g["lr"] for g in resumed.param_groups] == [g["lr"] for g in whole.param_groups]
        _stepped(schedule, 1)
        _stepped(again, 1)
    assert whole.param_groups[1]["lr"] == pytest.approx(0.2 / 0.05 * 0.1 * 0.5**5, rel=1e-6)  # 4x at step 10
    assert not recwarn.list  # where the run is, not an argument that changed


def test_a_state_naming_a_param_group_the_optimizer_lacks_is_refused_and_changes_nothing():
    whole = _optimizer()
    schedule = cs.StepLR(whole, initial_learning_rate=0.1, step_size=2, gamma=0.5)
    _stepped(schedule, 3)
    whole.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.2})
    saved = _stepped(schedule, 1)
    fewer = cs.StepLR(_optimizer(), initial_learning_rate=0.1, step_size=3, gamma=0.5)
    before = fewer.state_dict()
    with pytest.raises(ValueError, match=r"^StepLR.load_state_dict: the state schedules param_groups\[1\], .*fix: add"):
        fewer.load_state_dict(saved)
    assert fewer.state_dict() == before


def test_a_group_added_after_the_state_was_taken_joins_at_the_next_step():
    """A state without that group, loaded into a scheduler that had adopted it: it joins again from its value."""
    optimizer = _optimizer()
    schedule = cs.ExponentialLR(optimizer, 0.1, 1, 0.5)
    early = schedule.state_dict()
    _stepped(schedule, 2)
    optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.4})
    _stepped(schedule, 1)
    schedule.load_state_dict(early)
    _stepped(schedule, 2)
    # it held 0.2 when the state (step 0, value 0.1) was loaded: twice the schedule from there
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.1 * 0.5**2, 2 * 0.1 * 0.5**2], rel=1e-6)
