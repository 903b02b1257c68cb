"""Laws and behaviour of the closed-form schedulers (public API only).

The catalogue under test is every case of tests/reference/cerebras_schedules.json (all
classes, LR and WD, compositions included), built through `build`.
"""

import copy
import gc
import io
import json
import math
import pickle

import numpy
import pytest
import torch
from conftest import REPO
from hypothesis import given
from hypothesis import strategies as st

from cs_lightning.errors import ConfigError, UsageError
from cs_lightning.schedulers import (
    ChainedScheduler,
    ClosedFormError,
    ConstantLR,
    CosineDecayLR,
    ExponentialLR,
    InverseExponentialTimeDecayLR,
    LinearLR,
    LinearWD,
    LRScheduler,
    OneCycleLR,
    ScalePerParamLR,
    Scheduler,
    SequentialLR,
    StepLR,
    WeightDecayScheduler,
    build,
    lightning_config,
    plot,
    table,
)

# LambdaLR/LambdaWD without a function: the reference's fixed one
CASES = json.loads((REPO / "tests/reference/cerebras_schedules.json").read_text())
# Cases that step without ever reaching a negative value: OneCycle's linear last phase
# extrapolates below 0 past its end, where an update is refused (see test_schedulers_parity).
STEPPABLE = [case for case in CASES if all(v >= 0 for row in case["values"] for v in row)]


def _optimizer(case, cls=torch.optim.SGD, **kwargs):
    groups = [{"params": [torch.nn.Parameter(torch.ones(3))], **g} for g in case["param_groups"]]
    return cls(groups, lr=0.1, **kwargs)


def _stepped(scheduler, optimizer, n):
    """Group values after construction and after each of n-1 steps: (n, groups)."""
    key = scheduler.param_group_key
    rows = [[float(g[key]) for g in optimizer.param_groups]]
    for _ in range(n - 1):
        optimizer.step()
        scheduler.step()
        rows.append([float(g[key]) for g in optimizer.param_groups])
    return rows


def _targeted(values, rows):
    """Stepped rows with nan where values() says a group is not scheduled."""
    return [
        [v if not math.isnan(w) else math.nan for v, w in zip(row, want)] for row, want in zip(rows, values.tolist())
    ]


def _same(a, b):
    return all((math.isnan(x) and math.isnan(y)) or x == y for row_a, row_b in zip(a, b) for x, y in zip(row_a, row_b))


@pytest.mark.parametrize("case", STEPPABLE, ids=[c["id"] for c in STEPPABLE])
def test_values_equals_stepping(case):
    optimizer = _optimizer(case)
    (scheduler,) = build(case["spec"], optimizer)
    n = 2 * case["steps"] + 1100  # crosses a precomputed block boundary
    values = scheduler.values(range(n))
    assert values.shape == (n, len(case["param_groups"]))
    stepped = _stepped(scheduler, optimizer, n)
    assert _same(values.tolist(), _targeted(values, stepped))


@given(
    index=st.integers(0, len(CASES) - 1),
    start=st.integers(0, 3000),
    stride=st.integers(1, 7),
    count=st.integers(1, 300),
    seed=st.integers(0, 2**16),
)
def test_any_steps_give_the_values_of_consecutive_ones(index, start, stride, count, seed):
    """Consecutive steps take faster paths (a sequence's children see only their stage, a
    staircase repeats its levels); strided, shuffled and descending steps take the
    general one. Every path gives the same values, bit for bit."""
    case = CASES[index]
    (scheduler,) = build(case["spec"], _optimizer(case))
    steps = range(start, start + stride * count, stride)
    everything = scheduler.values(range(steps[-1] + 1))
    shuffled = torch.tensor(steps)[torch.randperm(count, generator=torch.Generator().manual_seed(seed))]
    assert _same(scheduler.values(steps).tolist(), everything[list(steps)].tolist())
    assert _same(scheduler.values(steps[::-1]).tolist(), everything[list(steps[::-1])].tolist())
    assert _same(scheduler.values(shuffled).tolist(), everything[shuffled].tolist())


def test_stages_of_any_length_agree_with_stepping():
    """torch's scalar pow (a tensor's last few elements) can differ from its vectorized pow
    by an ulp; a sequence pads each stage to whole vector lanes, so every path agrees."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    warmup = LinearLR(optimizer, 0.0, 0.1, total_iters=10)
    decay = ExponentialLR(optimizer, 0.1, total_iters=7, decay_rate=0.9)
    sequence = SequentialLR(optimizer, [warmup, decay], milestones=[10])
    stepped = [row[0] for row in _stepped(sequence, optimizer, 1200)]
    for n in range(1000, 1200):  # the last stage ends at every offset within the lanes
        assert sequence.values(range(n))[:, 0].tolist() == stepped[:n], n


def _long_sequences(optimizer):
    """Sequences whose stages change near where values() starts a new chunk (any power of
    two from 2**16 to 2**20 steps): the stages write into the result side by side."""
    stages = [
        LinearLR(optimizer, 0.0, 0.1, 2**19 - 10),
        CosineDecayLR(optimizer, 0.1, 0.01, 2**19 + 20),
        ExponentialLR(optimizer, 0.01, 7, 0.9),
    ]
    yield SequentialLR(optimizer, stages, [2**19 - 10, 2**20 + 10])
    yield SequentialLR(
        optimizer,
        [ConstantLR(optimizer, 0.1, 2**17 + 3), StepLR(optimizer, 0.1, step_size=999, gamma=0.9)],
        [2**17 + 3],
    )


@pytest.mark.parametrize("index", range(len(CASES) + 2))
def test_long_evaluations_equal_short_ones(index):
    """values() evaluates a long range a chunk at a time: every window of it equals the
    same steps evaluated alone."""
    if index < len(CASES):
        case = CASES[index]
        (scheduler,) = build(case["spec"], _optimizer(case))
    else:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        scheduler = list(_long_sequences(optimizer))[index - len(CASES)]
    n = 2**20 + 5000
    everything = scheduler.values(range(n))
    for start in [*range(2**16 - 50, n, 2**16), n - 100]:
        window = range(start, start + 100)
        assert _same(scheduler.values(window).tolist(), everything[start : start + 100].tolist())


class WritesIntoItsStepsLR(LRScheduler):
    """Breaks the rule that closed forms leave their (shared, cached) float steps as they are."""

    def _get_closed_form(self):
        return self._float_steps().mul_(0.0).add_(0.5)


def test_a_closed_form_writing_into_its_steps_spoils_no_later_evaluation():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    linear = LinearLR(optimizer, 0.0, 1.0, 100)
    before = linear.values(200)
    assert WritesIntoItsStepsLR(optimizer).values(200).unique().tolist() == [0.5]
    assert torch.equal(linear.values(200), before)


def test_schedules_evaluate_in_inference_mode():
    """Lightning validates and predicts under torch.inference_mode(), where tensors have no
    version counter; the first evaluation of a process may come from there."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    with torch.inference_mode():
        scheduler = CosineDecayLR(optimizer, 0.1, 0.01, total_iters=1000)
        inside = scheduler.values(2**20)
    assert torch.equal(inside, scheduler.values(2**20))


class ReturnsItsStepsLR(LRScheduler):
    """Returns the (shared) float steps themselves as its values."""

    def _get_closed_form(self):
        return self._float_steps()


def test_values_own_their_memory_whatever_a_closed_form_returns():
    """A closed form may return its own steps, a constant or a child's result: values() copies
    it into a tensor of its own, so writing into the result changes no later evaluation."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    steps, constant = ReturnsItsStepsLR(optimizer), ConstantLR(optimizer, 0.1)
    chain = ChainedScheduler([steps, ConstantLR(optimizer, 0.5)])
    cosine = CosineDecayLR(optimizer, 0.1, 0.01, total_iters=200)  # its multiply-add runs into the result
    sequence = SequentialLR(optimizer, [LinearLR(optimizer, 0.0, 0.1, 100), cosine], [100])
    staircase = StepLR(optimizer, 0.1, step_size=7, gamma=0.9)  # its levels are written into the result
    for scheduler in (steps, constant, chain, cosine, sequence, staircase):
        first = scheduler.values(300)
        expected = first.clone()
        first.fill_(7.0)
        assert torch.equal(scheduler.values(300), expected)
        assert first.untyped_storage().nbytes() == first.numel() * first.itemsize
    assert steps.values(300)[:, 0].tolist() == list(range(300))


class DoubledCosineLR(CosineDecayLR):
    """A built-in schedule's subclass that builds on its closed form through super()."""

    def _get_closed_form(self):
        return super()._get_closed_form() * 2


def test_a_subclass_calling_super_is_evaluated_through_its_own_closed_form():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    plain = CosineDecayLR(optimizer, 0.1, 0.01, total_iters=100).values(300)
    doubled = DoubledCosineLR(optimizer, 0.1, 0.01, total_iters=100)
    assert torch.equal(doubled.values(300), plain * 2)
    assert doubled.values(300)[:, 0].tolist() == [row[0] for row in _stepped(doubled, optimizer, 300)]


def test_each_group_gets_its_scale_times_the_schedule_bit_for_bit():
    groups = [{"params": [torch.nn.Parameter(torch.ones(1))], "adjust_learning_rate": a} for a in (1.0, 0.3, 7.0)]
    optimizer = torch.optim.SGD(groups, lr=0.1)
    cosine = CosineDecayLR(optimizer, 0.2, 0.01, total_iters=100)
    unscaled = cosine.values(range(130))[:, :1]
    scaled = ScalePerParamLR(optimizer, cosine)
    values = scaled.values(range(130))
    assert torch.equal(values, unscaled * torch.tensor([1.0, 0.3, 7.0]))
    assert values.tolist() == _stepped(scaled, optimizer, 130)


def test_long_evaluations_agree_with_the_general_path_across_chunks_and_stages():
    """values() of a long range evaluates a chunk at a time, a chunk within one stage by that
    stage's closed form alone, a staircase's chunk by its levels; any tensor of steps takes
    the general path. Both agree bit for bit, also in the chunk that holds the milestone, at
    the chunks' edges and at periods cut by them."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    n, milestone = 3 * 2**17 + 1000, 2**17 + 5
    warmup = LinearLR(optimizer, 0.0, 0.1, milestone)
    sequence = SequentialLR(optimizer, [warmup, CosineDecayLR(optimizer, 0.1, 0.0, n - milestone)], [milestone])
    edges = [k * 2**17 + d for k in range(4) for d in (-2, -1, 0, 1)]
    picked = torch.tensor(sorted({k for k in [*edges, milestone - 1, milestone, n - 1] if 0 <= k < n}))
    picked = torch.cat([picked, torch.randint(0, n, (500,), generator=torch.Generator().manual_seed(0))])
    for scheduler in (sequence, StepLR(optimizer, 0.1, 1000, 0.99), StepLR(optimizer, 0.1, 3, 0.999)):
        everything = scheduler.values(range(n))
        assert torch.equal(scheduler.values(picked), everything[picked])


def test_a_schedule_of_several_groups_gives_each_the_same_values():
    groups = [{"params": [torch.nn.Parameter(torch.ones(1))], "lr": lr} for lr in (0.5, 0.7, 0.9)]
    optimizer = torch.optim.SGD(groups, lr=0.1)
    scheduler = CosineDecayLR(optimizer, 0.2, 0.01, total_iters=100)
    values = scheduler.values(range(130))
    assert torch.equal(values, values[:, :1].expand(-1, 3))
    assert values.tolist() == _stepped(scheduler, optimizer, 130)


@pytest.mark.parametrize("around", [2**24, 2**53])
def test_steps_beyond_exact_floats_take_the_general_path(around):
    """float32 holds every int only up to 2**24: past it, consecutive steps are converted
    from int64 as any other steps are, and the staircase computes each step's period."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    for scheduler in (
        StepLR(optimizer, 1.0, step_size=3, gamma=0.999999),
        CosineDecayLR(optimizer, 1.0, 0.0, total_iters=2**25),
    ):
        steps = range(around - 70, around + 70)
        assert torch.equal(scheduler.values(steps), scheduler.values(torch.tensor(steps)))


@given(index=st.integers(0, len(STEPPABLE) - 1), k=st.integers(0, 1500), more=st.integers(1, 40))
def test_resume_equals_uninterrupted(index, k, more):
    case = STEPPABLE[index]
    optimizer = _optimizer(case)
    (scheduler,) = build(case["spec"], optimizer)
    for _ in range(k):
        scheduler.step()
    saved = scheduler.state_dict()
    frozen = copy.deepcopy(saved)
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    fresh_optimizer = _optimizer(case)
    (resumed,) = build(case["spec"], fresh_optimizer)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert saved == frozen  # loading never mutates its input
    expected = _stepped(scheduler, optimizer, more + 1)
    assert _same(_stepped(resumed, fresh_optimizer, more + 1), expected)


def test_numpy_integers_are_saved_as_ints():
    import numpy as np

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    scheduler = SequentialLR(
        optimizer, [LinearLR(optimizer, 0.0, 1.0, np.int64(10)), ConstantLR(optimizer, 1.0)], np.array([10])
    )
    buffer = io.BytesIO()
    torch.save(scheduler.state_dict(), buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["schedulers"][0]["total_iters"] == 10


def test_values_are_side_effect_free():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=1.0)
    scheduler = LinearLR(optimizer, 0.0, 1.0, 10)
    scheduler.step()
    before = (scheduler.state_dict(), optimizer.param_groups[0]["lr"], scheduler.get_last_lr())
    scheduler.values([3, 7, 0, 12])
    assert (scheduler.state_dict(), optimizer.param_groups[0]["lr"], scheduler.get_last_lr()) == before
    assert scheduler.values([3, 7, 0, 12])[:, 0].tolist() == pytest.approx([0.3, 0.7, 0.0, 1.0])


@pytest.mark.parametrize(
    "optimizer_cls,kwargs",
    [
        (torch.optim.SGD, {"momentum": 0.9}),
        (torch.optim.AdamW, {"foreach": True}),
        (torch.optim.AdamW, {"foreach": False}),
        (torch.optim.Adam, {"foreach": True}),
    ],
)
def test_trains_with_torch_optimizers(optimizer_cls, kwargs):
    weight = torch.nn.Parameter(torch.ones(4))
    optimizer = optimizer_cls([weight], lr=0.1, weight_decay=0.01, **kwargs)
    lr = SequentialLR(optimizer, [LinearLR(optimizer, 0.0, 0.1, 5), CosineDecayLR(optimizer, 0.1, 0.0, 10)], [5])
    wd = LinearWD(optimizer, 0.01, 0.0, 15)
    seen = []
    for _ in range(15):
        optimizer.zero_grad()
        (weight**2).sum().backward()
        optimizer.step()
        lr.step()
        wd.step()
        group = optimizer.param_groups[0]
        assert type(group["lr"]) is float and type(group["weight_decay"]) is float
        seen.append((group["lr"], group["weight_decay"]))
    assert [s[0] for s in seen] == lr.values(range(1, 16))[:, 0].tolist()
    assert [s[1] for s in seen] == wd.values(range(1, 16))[:, 0].tolist()
    assert torch.all(weight < 1.0)  # it trained


@pytest.mark.parametrize("steps", [True, [1.5], [True, False], "abc", [[1, 2]], torch.zeros(2, 2, dtype=torch.long)])
def test_values_refuses_what_is_not_steps(steps):
    scheduler = LinearLR(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0), 0.0, 1.0, 10)
    with pytest.raises(TypeError, match=r"LinearLR\.values: got steps=.*1-D sequence of int steps"):
        scheduler.values(steps)


@pytest.mark.parametrize("n", [numpy.int64(7), numpy.int32(7), numpy.uint8(7)])
def test_values_takes_a_numpy_integer_as_an_int(n):
    scheduler = LinearLR(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0), 0.0, 1.0, 10)
    assert torch.equal(scheduler.values(n), scheduler.values(7))


def test_numpy_arrays_are_taken_for_values_as_for_milestones():
    """PiecewiseConstantLR refused np.array values while MultiStepLR took np.array milestones."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    given = build({"PiecewiseConstantLR": {"learning_rates": numpy.array([0.1, 0.01]), "milestones": [3]}}, optimizer)
    listed = build({"PiecewiseConstantLR": {"learning_rates": [0.1, 0.01], "milestones": numpy.array([3])}}, optimizer)
    assert torch.equal(given[0].values(6), listed[0].values(6))
    assert given[0].values(6)[:, 0].tolist() == [pytest.approx(0.1)] * 3 + [pytest.approx(0.01)] * 3


def test_values_on_meta_steps_is_a_clear_type_error():
    scheduler = LinearLR(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0), 0.0, 1.0, 10)
    with pytest.raises(TypeError) as refused:
        scheduler.values(torch.tensor([1, 2], device="meta"))
    assert str(refused.value) == (
        "LinearLR.values: got steps on the meta device, which hold no values; give a CPU tensor, a range or a "
        "list of int steps"
    )


def test_tensor_values_update_one_tensor_in_place():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=1.0)
    scheduler = CosineDecayLR(optimizer, 0.1, 0.01, 20)
    scheduler.set_tensor_values(True)
    held = optimizer.param_groups[0]["lr"]
    assert isinstance(held, torch.Tensor) and held.dtype == torch.float32 and held.ndim == 0
    for step in range(1, 25):
        scheduler.step()
        assert optimizer.param_groups[0]["lr"] is held
        assert held.item() == scheduler.values([step])[0, 0].item()
    scheduler.set_tensor_values(False)
    assert type(optimizer.param_groups[0]["lr"]) is float


@pytest.mark.parametrize("count", [11, 10**9, 2**62])
def test_check_steps_names_the_first_step_a_run_would_refuse(count):
    """Linear OneCycle keeps its last phase going: below 0 from step total_steps on. A run of 10 steps never
    uses step 10; a longer one is refused naming step 10, also past 2**22 steps, where steps are sampled."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    schedule = OneCycleLR(optimizer, 0.01, 0.1, total_steps=10, anneal_strategy="linear")
    schedule.check_steps(10)
    with pytest.raises(ValueError) as refused:
        schedule.check_steps(count)
    assert str(refused.value) == (
        "OneCycleLR: step 10 gives lr=-0.014284580945968628; a learning rate must be >= 0 (torch's optimizers "
        "refuse lr < 0), and finite; fix: change the schedule's arguments (or its _get_closed_form) so that no step gives one"
    )
    assert schedule.values([10])[0, 0].item() == -0.014284580945968628


def test_a_tensor_lr_the_group_holds_is_filled_in_place_as_torch_fills_it():
    """Adam(params, lr=torch.tensor(...)): torch's LinearLR keeps that tensor object; ours too (it was a float)."""
    ours_optimizer = torch.optim.Adam([torch.nn.Parameter(torch.ones(2))], lr=torch.tensor(0.01, dtype=torch.float64))
    torch_optimizer = torch.optim.Adam([torch.nn.Parameter(torch.ones(2))], lr=torch.tensor(0.01, dtype=torch.float64))
    ours_held, torch_held = ours_optimizer.param_groups[0]["lr"], torch_optimizer.param_groups[0]["lr"]
    ours = LinearLR(ours_optimizer, 0.005, 0.01, 4)
    reference = torch.optim.lr_scheduler.LinearLR(torch_optimizer, 0.5, 1.0, 4)
    for _ in range(6):
        assert ours_optimizer.param_groups[0]["lr"] is ours_held and torch_optimizer.param_groups[0]["lr"] is torch_held
        assert ours_held.dtype == torch.float64 and ours_held.item() == pytest.approx(torch_held.item(), rel=1e-6)
        for optimizer, scheduler in ((ours_optimizer, ours), (torch_optimizer, reference)):
            optimizer.step()
            scheduler.step()
    assert ours_held.item() == pytest.approx(0.01, rel=1e-6)


def test_a_tensor_lr_shared_by_groups_is_not_changed_for_an_untargeted_group():
    """The optimizer's default tensor is every group's that gives no lr: writing one group's value must leave the
    others' alone, so the targeted group gets a tensor of its own."""
    default = torch.tensor(0.01)
    optimizer = torch.optim.Adam(
        [
            {"params": [torch.nn.Parameter(torch.ones(2))], "tags": ["decay"]},
            {"params": [torch.nn.Parameter(torch.ones(2))]},
        ],
        lr=default,
    )
    LinearLR(optimizer, 0.5, 1.0, 4, param_group_tags="decay")
    decay, other = (group["lr"] for group in optimizer.param_groups)
    assert other is default and default.item() == pytest.approx(0.01)
    assert isinstance(decay, torch.Tensor) and decay is not default and decay.item() == pytest.approx(0.5)


def test_a_composite_keeps_its_tensor_values_through_load_state_dict():
    """Loading writes once, from the parent: the children do not swap the tensors it holds for floats."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=1.0)
    sequence = SequentialLR(optimizer, [LinearLR(optimizer, 0.0, 1.0, 5), CosineDecayLR(optimizer, 1.0, 0.0, 10)], [5])
    sequence.set_tensor_values(True)
    held = optimizer.param_groups[0]["lr"]
    for _ in range(3):
        sequence.step()
    state = sequence.state_dict()
    for _ in range(4):
        sequence.step()
    sequence.load_state_dict(state)
    assert optimizer.param_groups[0]["lr"] is held
    assert held.item() == pytest.approx(0.6)
    sequence.step()
    assert held.item() == pytest.approx(0.8) and sequence.get_last_lr() == [held.item()]


def test_tags_schedule_only_matching_groups():
    groups = [
        {"params": [torch.nn.Parameter(torch.ones(1))], "lr": 0.5, "tags": {"decay"}},
        {"params": [torch.nn.Parameter(torch.ones(1))], "lr": 0.7},
    ]
    optimizer = torch.optim.SGD(groups, lr=0.1)
    scheduler = StepLR(optimizer, 0.2, step_size=2, gamma=0.5, param_group_tags="decay")
    for _ in range(4):
        scheduler.step()
    assert optimizer.param_groups[1]["lr"] == 0.7
    assert scheduler.get_last_lr() == [pytest.approx(0.05), None]
    assert math.isnan(scheduler.values(3)[0, 1])


def test_is_a_torch_scheduler_with_torch_methods():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    scheduler = ExponentialLR(optimizer, 0.1, total_iters=1, decay_rate=0.5)
    assert isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler)
    scheduler.step()
    assert scheduler.get_last_lr() == [torch.tensor(0.05).item()]  # float32 values
    assert scheduler.last_epoch.item() == 1
    with pytest.warns(UserWarning, match=r"epoch parameter in `scheduler.step\(\)` was not necessary"):
        scheduler.step(3)  # deprecated in torch: jump to step 3
    assert scheduler.last_epoch.item() == 3
    assert scheduler.get_last_lr() == [torch.tensor(0.0125).item()]
    scheduler.step()
    assert scheduler.get_last_lr() == [torch.tensor(0.00625).item()]
    assert lightning_config(scheduler) == {"scheduler": scheduler, "interval": "step", "frequency": 1}
    with pytest.raises(ValueError, match=r"lightning_config\(frequency=0\): .* leave it out"):
        lightning_config(scheduler, frequency=0)
    with pytest.raises(TypeError, match=r"lightning_config\(scheduler=...\) got SGD, not a scheduler; pass the"):
        lightning_config(optimizer)  # type: ignore[arg-type]
    assert lightning_config(scheduler, frequency=2, name="lr")["frequency"] == 2


def test_sequential_children_count_from_their_milestone_and_nest():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    inner = SequentialLR(optimizer, [ConstantLR(optimizer, 1.0), LinearLR(optimizer, 1.0, 0.0, 4)], [3])
    outer = SequentialLR(optimizer, [LinearLR(optimizer, 0.0, 1.0, 5), inner], [5])
    got = outer.values(16)[:, 0].tolist()
    # warmup 0..4, then the inner sequence from its own step 0: 3 constant steps, a decay
    expected = [k / 5 for k in range(5)] + [1.0] * 3 + [1 - j / 4 for j in range(4)] + [0.0] * 4
    assert got == pytest.approx(expected, abs=1e-7)


@pytest.mark.parametrize("parent", [SequentialLR, ChainedScheduler])
def test_stepping_a_composed_schedule_is_refused_and_writes_nothing(parent):
    """Its values would replace the parent's, past the parent's refusal of a negative one (a linear OneCycleLR
    goes below 0 after total_steps), while the parent reports its own."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    cycle = OneCycleLR(optimizer, initial_learning_rate=0.01, max_lr=0.1, total_steps=4, anneal_strategy="linear")
    children = [cycle, ConstantLR(optimizer, 0.5)]
    whole = SequentialLR(optimizer, children, [2]) if parent is SequentialLR else ChainedScheduler(children)
    held = optimizer.param_groups[0]["lr"]
    with pytest.raises(
        UsageError,
        match=rf"^OneCycleLR.step\(\): this OneCycleLR is composed into a {parent.__name__}, .*fix: step the {parent.__name__} only$",
    ):
        cycle.step()
    assert optimizer.param_groups[0]["lr"] == held == whole.get_last_lr()[0]
    whole.step()
    assert optimizer.param_groups[0]["lr"] == whole.values([1])[0, 0].item()


def test_a_composite_thrown_away_no_longer_claims_its_children():
    """One whose construction failed, one made for a table: their children step again."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    refused, shown = LinearLR(optimizer, 0.1, 0.2, 5), LinearLR(optimizer, 0.1, 0.2, 5)
    with pytest.raises(ValueError, match="starts at 0"):
        ChainedScheduler([refused, ConstantLR(optimizer, 0.0, 5)])
    table(SequentialLR(optimizer, [shown, ConstantLR(optimizer, 0.2, 5)], [5]), 10)
    gc.collect()
    for schedule in (refused, shown):
        schedule.step()
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.12, rel=1e-6)


def test_a_composite_unpickled_still_claims_its_children():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    whole = SequentialLR(optimizer, [LinearLR(optimizer, 0.1, 0.2, 5), ConstantLR(optimizer, 0.2, 5)], [5])
    copied = pickle.loads(pickle.dumps(whole))
    with pytest.raises(UsageError, match="composed into a SequentialLR"):
        copied.schedulers[0].step()
    copied.schedulers[0].end_learning_rate = 0.4  # a child's change still reaches its parent
    assert copied.values([4])[0, 0].item() == pytest.approx(0.1 + 0.3 * 4 / 5, rel=1e-6)


@pytest.mark.parametrize("call", [lambda o, s: ChainedScheduler(o, s), lambda o, s: ChainedScheduler(s, o)])
def test_a_chain_given_an_optimizer_says_it_takes_none(call):
    """torch's ChainedScheduler takes (schedulers, optimizer); the error names no optimizer repr."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    with pytest.raises(
        TypeError, match=r"^ChainedScheduler: got an optimizer; ChainedScheduler takes none .*fix: Chai"
    ):
        call(optimizer, [ConstantLR(optimizer, 0.5)])


def test_a_chain_in_a_chain_evaluates_every_child_at_its_step():
    """cerebras.pytorch 2.10 leaves a nested composite's children at their first step (REFERENCE.md)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    decay, step = LinearLR(optimizer, 1.0, 0.0, 10), StepLR(optimizer, 1.0, 2, 0.5)
    halving = ExponentialLR(optimizer, 1.0, 4, 0.5)
    outer = ChainedScheduler([ChainedScheduler([decay, step]), halving])
    expected = [(1 - k / 10) * 0.5 ** (k // 2) * 0.5 ** (k / 4) for k in range(10)]
    assert outer.values(10)[:, 0].tolist() == pytest.approx(expected, rel=1e-6)


def test_changing_an_argument_takes_effect_next_step():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    scheduler = LinearLR(optimizer, 0.0, 1.0, 10)
    scheduler.step()
    scheduler.end_learning_rate = 2.0
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.4)


def test_starts_after_last_epoch():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    SequentialLR(optimizer, [LinearLR(optimizer, 0.0, 1.0, 10), ConstantLR(optimizer, 1.0)], [10], last_epoch=4)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5)


# -- custom schedulers ----------------------------------------------------------------


class DocsWarmupLR(LRScheduler):
    """The shape of Cerebras' "Write a Custom Learning Rate Scheduler" example."""

    def __init__(self, optimizer, initial_learning_rate, end_learning_rate, total_iters, last_epoch=-1):
        self.initial_learning_rate = initial_learning_rate
        self.end_learning_rate = end_learning_rate
        super().__init__(optimizer, total_iters=total_iters, last_epoch=last_epoch)

    def _get_closed_form(self):
        progress = torch.div(self.last_epoch, self.total_iters)
        warm = progress * (self.end_learning_rate - self.initial_learning_rate) + self.initial_learning_rate
        return torch.where(self.last_epoch < self.total_iters, warm, torch.tensor(self.end_learning_rate))


def test_docs_custom_scheduler_steps_resolves_and_resumes():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    (scheduler,) = build(
        {"docswarmuplr": {"initial_learning_rate": 0.0, "end_learning_rate": 0.4, "total_iters": 4}}, optimizer
    )
    assert type(scheduler) is DocsWarmupLR
    assert _stepped(scheduler, optimizer, 6) == [[pytest.approx(v)] for v in (0, 0.1, 0.2, 0.3, 0.4, 0.4)]
    assert scheduler.state_dict() == {
        "last_epoch": 5,
        "initial_learning_rate": 0.0,
        "end_learning_rate": 0.4,
        "total_iters": 4,
    }
    (chained,) = build(
        {
            "SequentialLR": {
                "schedulers": [
                    {"DocsWarmupLR": {"initial_learning_rate": 0.0, "end_learning_rate": 0.4, "total_iters": 4}},
                    {"ConstantLR": {"learning_rate": 0.4}},
                ]
            }
        },
        optimizer,
    )
    assert chained.milestones == [4]


class OlderNameLR(LRScheduler):
    def __init__(self, optimizer):
        super().__init__(optimizer)

    def _get_closed_form_lr(self):
        return torch.pow(0.5, self.last_epoch.float())


def test_older_closed_form_name_still_works():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    assert OlderNameLR(optimizer).values(3)[:, 0].tolist() == [1.0, 0.5, 0.25]


class CerebrasStyleLR(LRScheduler):
    """As cerebras.pytorch's own schedulers are written: constants made on ``self.device``."""

    def __init__(self, optimizer, halved, last_epoch=-1):
        self.halved = halved
        super().__init__(optimizer, last_epoch=last_epoch)

    def _get_closed_form(self):
        value = torch.tensor(self.halved, dtype=torch.float32, device=self.device)
        return value * torch.pow(torch.tensor(0.5, device=self.device), self.last_epoch)


class OwnDeviceLR(CerebrasStyleLR):
    def __init__(self, optimizer, halved):
        self.device = torch.device("cpu")  # as an earlier release's error told custom schedulers to
        super().__init__(optimizer, halved)


@pytest.mark.parametrize("cls", [CerebrasStyleLR, OwnDeviceLR])
def test_a_schedule_written_for_cerebras_pytorch_reads_its_device(cls):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    schedule = cls(optimizer, 0.75)
    assert schedule.values(3)[:, 0].tolist() == [0.75, 0.375, 0.1875]
    schedule.step()
    assert optimizer.param_groups[0]["lr"] == 0.375


class IfLR(LRScheduler):
    def __init__(self, optimizer):
        super().__init__(optimizer)

    def _get_closed_form(self):
        if self.last_epoch < 10:
            return torch.tensor(0.1)
        return torch.tensor(0.01)


class MinLR(IfLR):
    def _get_closed_form(self):
        return torch.tensor(0.1) * min(self.last_epoch, 10)


class ItemLR(IfLR):
    def _get_closed_form(self):
        return torch.tensor(0.1 / (1 + self.last_epoch.item()))


class AllLR(IfLR):
    def _get_closed_form(self):
        return torch.tensor(0.1) if bool((self.last_epoch < 10).all()) else torch.tensor(0.01)


@pytest.mark.parametrize("cls", [IfLR, MinLR, ItemLR, AllLR])
def test_python_control_flow_on_the_step_fails_at_construction(cls):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    with pytest.raises(ClosedFormError, match=rf"{cls.__name__}\._get_closed_form .*torch\.where"):
        cls(optimizer)
    assert optimizer.param_groups[0]["lr"] == 1.0  # nothing written


def test_a_closed_form_that_is_merely_broken_keeps_its_own_error():
    class BrokenLR(IfLR):
        def _get_closed_form(self):
            raise KeyError("missing table")

    with pytest.raises(KeyError, match="missing table"):
        BrokenLR(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0))


class ArgsAfterSuperLR(LRScheduler):
    def __init__(self, optimizer, lr0):
        super().__init__(optimizer)
        self.lr0 = lr0

    def _get_closed_form(self):
        return self.lr0 * torch.ones_like(self.last_epoch, dtype=torch.float32)


class ReturnsNoneLR(IfLR):
    def _get_closed_form(self):
        pass


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda o: ArgsAfterSuperLR(o, 0.1),
            "ArgsAfterSuperLR._get_closed_form reads self.lr0, which is not set yet: store the arguments "
            "(self.lr0 = ...) before calling super().__init__(), which evaluates the closed form",
        ),
        (
            ReturnsNoneLR,
            "ReturnsNoneLR._get_closed_form returned None; return the value at self.last_epoch: a tensor "
            "computed from it with torch ops (or a number, for a constant)",
        ),
    ],
    ids=["arguments_after_super", "returns_none"],
)
def test_a_custom_scheduler_breaking_the_contract_is_told_which_rule(make, message):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    with pytest.raises(ClosedFormError) as raised:
        make(optimizer)
    assert str(raised.value) == message
    assert optimizer.param_groups[0]["lr"] == 1.0  # nothing written


def test_the_base_classes_state_both_rules_of_a_subclass():
    doc = " ".join(Scheduler.__doc__.split())
    assert "store each argument before calling ``super().__init__()``: it evaluates the closed form" in doc
    assert "store each argument under its own name (``self.period = period``)" in doc
    for cls in (LRScheduler, WeightDecayScheduler):
        assert "store each argument under its own name, before calling ``super().__init__()``" in " ".join(
            cls.__doc__.split()
        )


# -- plot and table ---------------------------------------------------------------------


def test_table_and_plot(tmp_path):
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    schedulers = [LinearLR(optimizer, 0.0, 0.1, 10), LinearWD(optimizer, 0.1, 0.0, 10)]
    text = table(schedulers, 21, every=10)
    lines = text.splitlines()
    assert lines[0].split() == ["step", "LinearLR", "group", "0", "lr", "LinearWD", "group", "0", "weight_decay"]
    assert [line.split() for line in lines[1:]] == [["0", "0", "0.1"], ["10", "0.1", "0"], ["20", "0.1", "0"]]
    with pytest.raises(ValueError, match="table: got every=0"):
        table(schedulers, 21, every=0)
    figure = plot(schedulers, 21)
    figure.savefig(tmp_path / "schedule.png")
    assert (tmp_path / "schedule.png").stat().st_size > 1000
    assert [ax.get_ylabel() for ax in figure.axes] == ["lr", "weight_decay"]
    assert figure.axes[0].lines[0].get_ydata()[10] == pytest.approx(0.1)


def _scaled_groups(scales):
    groups = [
        {"params": [torch.nn.Parameter(torch.ones(1))], "adjust_learning_rate": a, "tags": {f"t{k}"}}
        for k, a in enumerate(scales)
    ]
    optimizer = torch.optim.SGD(groups, lr=0.1)
    return ScalePerParamLR(optimizer, CosineDecayLR(optimizer, 0.2, 0.01, total_iters=100))


@pytest.mark.parametrize("draw", [table, plot])
def test_a_torch_scheduler_given_to_table_or_plot_is_told_how_to_convert_it(draw):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    with pytest.raises(TypeError, match=rf"^{draw.__name__}: got StepLR; give a cs_lightning scheduler .*convert_sch"):
        draw(torch.optim.lr_scheduler.StepLR(optimizer, 3), 10)
    with pytest.raises(TypeError, match=rf"^{draw.__name__}: got no scheduler; give a cs_lightning scheduler"):
        draw([], 10)
    draw((schedule for schedule in [LinearLR(optimizer, 0.0, 1.0, 5)]), 10)  # any iterable of them


def test_plot_draws_groups_of_one_schedule_as_one_curve_naming_them_all():
    """Groups of the same scale would be drawn on top of each other, the legend naming curves one cannot see."""
    figure = plot(_scaled_groups([1.0, 0.5, 0.5, 0.25]), 50)
    (ax,) = figure.axes
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels == [
        "ScalePerParamLR group 0 (t0)",
        "ScalePerParamLR groups 1 (t1), 2 (t2)",
        "ScalePerParamLR group 3 (t3)",
    ]
    assert [line.get_ydata()[0] for line in ax.lines] == [pytest.approx(0.2), pytest.approx(0.1), pytest.approx(0.05)]


def test_plot_puts_a_long_legend_beside_the_panel(tmp_path):
    """Thirty groups (a Model Zoo layer-wise decay): the legend covered the curves and squeezed the panel away."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "constrained_layout not applied" among others
        figure = plot(_scaled_groups([0.9**k for k in range(30)]), 50)
        figure.savefig(tmp_path / "lr.png")  # lays the figure out
    (ax,) = figure.axes
    assert len(ax.get_legend().get_texts()) == 30
    panel, legend = ax.get_window_extent(), ax.get_legend().get_window_extent()
    assert legend.x0 >= panel.x1  # beside the curves, not over them
    assert panel.height > 100  # pixels: the panel keeps its room


def _huge_schedule():
    """Warmup, then a staircase of three levels, over 10**9 steps; and a staircase weight decay."""
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    warmup = LinearLR(optimizer, 0.0, 0.3, 1000)
    stairs = build(
        {"PiecewiseConstantLR": {"learning_rates": [0.3, 0.2, 0.1], "milestones": [400_000_000, 700_000_000]}},
        optimizer,
    )[0]
    return [
        SequentialLR(optimizer, [warmup, stairs], [1000]),
        build({"StepWD": {"initial_val": 0.1, "step_size": 250_000_000, "gamma": 0.5}}, optimizer)[0],
    ]


def test_a_table_of_more_than_100_jumps_lists_the_milestone_then_the_first_jumps():
    """A StepLR after a warmup drops every 10 steps: 196 jumps in 2000 steps. The table listed none of
    them, not even the milestone where the warmup ends; now the milestone and the first 99 drops."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    schedule = SequentialLR(optimizer, [LinearLR(optimizer, 0.0, 1.0, 37), StepLR(optimizer, 1.0, 10, 0.99)], [37])
    rows = {int(line.split()[0]): float(line.split()[1]) for line in table(schedule, 2000).splitlines()[1:]}
    drops = [37 + 10 * k for k in range(1, 100)]  # the first 99 of StepLR's drops, 47 to 1027
    assert set(rows) == {0, 37, *drops, *range(100, 2000, 100), 1999}
    assert rows[37] == 1.0 and rows[1027] == pytest.approx(0.99**99, rel=1e-5)


@given(
    exponent=st.sampled_from([0.5, 1, 1.2, 1.3, 1.5, 2, 3, 7.5, 40]),
    total=st.integers(1, 10**6),
    steps=st.integers(2, 3000),
)
def test_a_table_of_a_staircase_inverse_time_decay_lists_its_drops(exponent, total, steps):
    """Its drops fall at the steps where floor(k^e / T) grows: 37, 74, ... for e = 1, T = 37 (the table showed
    every 10th step and hid them); every step once k^e grows by T or more per step; none once it overflows."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    schedule = InverseExponentialTimeDecayLR(optimizer, 0.1, exponent, total, 0.5, staircase=True)
    values = schedule.values(steps)[:, 0]
    drops = (values[1:] != values[:-1]).nonzero().flatten().add(1).tolist()
    rows = {int(line.split()[0]) for line in table(schedule, steps).splitlines()[1:]}
    assert set(drops[:100]) <= rows
    evenly = {*range(0, steps, max(1, steps // 20)), steps - 1}  # the table's evenly spaced rows
    assert rows - evenly <= set(drops)  # and no step where nothing changes


def test_table_of_a_billion_steps_samples_rows_and_lists_every_jump():
    schedulers = _huge_schedule()
    lines = table(schedulers, 10**9).splitlines()
    rows = {int(line.split()[0]): [float(v) for v in line.split()[1:]] for line in lines[1:]}
    jumps = {1000, 250_000_000, 400_001_000, 500_000_000, 700_001_000, 750_000_000}
    assert jumps <= set(rows) and set(range(0, 10**9, 5 * 10**7)) <= set(rows)
    assert len(rows) == 20 + 1 + len(jumps - set(range(0, 10**9, 5 * 10**7)))
    assert rows[400_001_000] == [pytest.approx(0.2), pytest.approx(0.05)]
    assert rows[700_001_000] == [pytest.approx(0.1), pytest.approx(0.025)]
    # a sampled row is what evaluating the consecutive steps up to it gives (float32 steps, as on a CS-X)
    window = [float(s.values(range(10**9 - 64, 10**9))[-1, 0]) for s in schedulers]
    assert (
        rows[999_999_999]
        == [pytest.approx(v, rel=1e-5) for v in window]
        == [pytest.approx(0.1), pytest.approx(0.00625)]
    )


def test_plot_of_a_billion_steps_draws_each_jump_as_a_step():
    figure = plot(_huge_schedule(), 10**9)
    x, y = list(figure.axes[0].lines[0].get_xdata()), list(figure.axes[0].lines[0].get_ydata())
    assert x == sorted(set(x)) and x[0] == 0 and x[-1] == 10**9 - 1 and len(x) < 2100
    for jump, before, after in ((400_001_000, 0.3, 0.2), (700_001_000, 0.2, 0.1)):
        i = x.index(jump)  # the step before a jump is drawn too: the line drops within one step
        assert (x[i - 1], y[i - 1], y[i]) == (jump - 1, pytest.approx(before), pytest.approx(after))
    wd_x = list(figure.axes[1].lines[0].get_xdata())
    assert {249_999_999, 250_000_000, 749_999_999, 750_000_000} <= set(wd_x)


def test_values_of_more_steps_than_memory_holds_say_so():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    schedule = LinearLR(optimizer, 0.1, 0.0, 100)
    with pytest.raises(
        MemoryError,
        match=r"^LinearLR.values: 1000000000000 steps x 1 param group of torch.float32 "
        r"need 4000.0 GB, more than the [0-9.]+ GB of memory available; fix: ask "
        r"for the steps you need \(a range with a stride",
    ):
        schedule.values(10**12)
    assert schedule.values(range(0, 10**12, 10**11)).squeeze(1).tolist() == [pytest.approx(0.1)] + [0.0] * 9


@given(total=st.integers(1, 5000), initial=st.floats(1e-6, 1.0), end=st.floats(0.0, 1e-6))
def test_cosine_decay_rounds_as_cerebras_pytorch(total, initial, end):
    """cerebras.pytorch 2.10 computes torch.div(pi, T) (pi rounded to float32 first), then
    min(k, T) times that, cos, + 1, * 0.5, * (initial - end), + end, all in float32. For
    about a third of all T, pi / T rounded from float64 differs in the last bit."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    n = -(-(2 * total + 1) // 64) * 64  # whole vector lanes, as values() computes them
    k = torch.arange(n)
    angle = torch.div(math.pi, total).mul(torch.minimum(torch.tensor(float(total)), k.float()))
    expected = angle.cos().add(1).mul(0.5).mul(initial - end).add(end)
    got = CosineDecayLR(optimizer, initial, end, total_iters=total).values(n)[:, 0]
    assert torch.equal(got, expected)


def test_lambda_takes_a_function_of_the_step_tensor_and_resumes():
    def decay(k):
        return torch.exp(-k.float() / 10)

    def make():
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
        return optimizer, build({"LambdaLR": {"initial_learning_rate": 0.2, "lr_lambda": decay}}, optimizer)[0]

    optimizer, scheduler = make()
    values = scheduler.values(1500)
    assert values[:5, 0].tolist() == pytest.approx([0.2 * math.exp(-k / 10) for k in range(5)], rel=1e-6)
    assert _same(values.tolist(), _stepped(scheduler, optimizer, 1500))
    assert scheduler.state_dict() == {"last_epoch": 1499, "initial_learning_rate": 0.2, "param_group_tags": None}
    fresh_optimizer, fresh = make()
    fresh.load_state_dict(scheduler.state_dict())
    assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]


def test_lambda_takes_the_dotted_path_of_its_function_from_yaml(tmp_path, monkeypatch):
    (tmp_path / "my_decays.py").write_text("import torch\n\ndef halving(k):\n    return torch.pow(0.5, k)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0, weight_decay=0.1)
    specs = [
        {"LambdaLR": {"initial_learning_rate": 0.2, "lr_lambda": "my_decays.halving"}},
        {"LambdaWD": {"initial_val": 0.1, "wd_lambda": "my_decays.halving"}},
    ]
    lr, wd = build(specs, optimizer)
    assert lr.values(4)[:, 0].tolist() == pytest.approx([0.2, 0.1, 0.05, 0.025])
    assert wd.values(3)[:, 0].tolist() == pytest.approx([0.1, 0.05, 0.025])
    assert "lr_lambda" not in lr.state_dict()  # a function is given by the config, not saved


FUNCTION_FIX = "fix: give module.function, its module importable or its file listed under imports:"


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        (
            "no_such_module_here.decay",
            "'no_such_module_here' cannot be imported (No module named 'no_such_module_here')",
        ),
        ("math.no_such_function", "module 'math' has no 'no_such_function'"),
        (
            "lambda k: 0.95 ** k",
            "'lambda k: 0.95 ** k' is not a dotted import path such as 'package.module.Name': its module part "
            "'lambda k: 0' is not a dotted Python name",
        ),
        ("math.pi", None),
    ],
)
def test_lambda_refuses_a_dotted_path_that_is_no_function_in_one_line(path, problem):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    with pytest.raises(ConfigError) as raised:
        build({"LambdaLR": {"initial_learning_rate": 0.2, "lr_lambda": path}}, optimizer)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"schedulers.LambdaLR.lr_lambda: got {path!r}; ")
    if problem is None:  # imports, but is a number
        assert message.endswith("lr_lambda must be a function of the step tensor; fix: correct the value")
    else:
        assert message.endswith(f"; {problem}; {FUNCTION_FIX}")


def test_lambda_without_a_function_is_the_reference_one():
    """cerebras.pytorch 2.10's LambdaLR (and Model Zoo's) takes no function: it hard-codes k / 30 * 0.95**k,
    times the initial value twice. Its numbers, from the wheel, are the parity cases lr_lambda/wd_lambda."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    (scheduler,) = build({"LambdaLR": {"initial_learning_rate": 0.5}}, optimizer)
    expected = [0.5 * 0.5 * k / 30 * 0.95**k for k in range(40)]
    assert scheduler.values(40)[:, 0].tolist() == pytest.approx(expected, rel=1e-6)
    scheduler.initial_learning_rate = 0.25  # the function reads the current initial value
    assert scheduler.values([3])[0, 0].item() == pytest.approx(0.25 * 0.25 * 3 / 30 * 0.95**3, rel=1e-6)


def test_changing_a_child_argument_reaches_the_parent():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    warmup = LinearLR(optimizer, 0.0, 1.0, 10)
    sequence = SequentialLR(optimizer, [warmup, ConstantLR(optimizer, 1.0)], [10])
    sequence.step()
    warmup.end_learning_rate = 2.0
    sequence.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.4)


def test_a_chain_reads_its_childrens_initial_values_when_it_evaluates():
    """As cerebras.pytorch's ChainedScheduler: a later child's initial value is read live."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    decay = LinearLR(optimizer, 1.0, 0.5, 10)
    chain = ChainedScheduler([ConstantLR(optimizer, 0.2), decay])
    state = chain.state_dict()
    decay.initial_learning_rate, decay.end_learning_rate = 2.0, 1.0  # the same relative decay
    assert chain.values([0, 10])[:, 0].tolist() == pytest.approx([0.2, 0.1])
    state["schedulers"][1].update(initial_learning_rate=4.0, end_learning_rate=1.0)
    with pytest.warns(
        UserWarning, match=r"\(schedulers\[1\]\.initial_learning_rate=2\.0 -> 4\.0, configured -> checkpoint\)"
    ):
        chain.load_state_dict(state)
    assert chain.values([0, 10])[:, 0].tolist() == pytest.approx([0.2, 0.05])


class LongFailsLR(LRScheduler):
    """Fine for a block of steps, fails on long step tensors (not step-dependent)."""

    def __init__(self, optimizer):
        super().__init__(optimizer)

    def _get_closed_form(self):
        if self.last_epoch.numel() > 5000:
            raise MemoryError("too many steps")
        return torch.full(self.last_epoch.shape, 0.1)


def test_values_restores_the_thread_count_also_on_error():
    before = torch.get_num_threads()
    scheduler = LongFailsLR(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0))
    with pytest.raises(MemoryError):
        scheduler.values(1 << 17)
    assert torch.get_num_threads() == before
    scheduler.values(100)
    assert torch.get_num_threads() == before


def test_a_pending_value_reads_its_base_and_never_writes_it():
    """Asking a pending multiply-add for its tensor twice, for a head and the whole, or into a
    result gives the same numbers: nothing runs in place on what the closed form made."""
    from cs_lightning.schedulers.evaluation import Affine

    base = torch.linspace(0, 1, 300)
    kept = base.clone()
    value = Affine(base, 0.5, 0.25)
    first, second, head = value.tensor(), value.tensor(), value.head(100).tensor()
    into = torch.empty(300)
    value.into(into)
    assert torch.equal(base, kept)
    assert torch.equal(first, second) and torch.equal(first, into) and torch.equal(first[:100], head)
    assert torch.equal(first, base * 0.5 + 0.25)
