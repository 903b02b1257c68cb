"""Evaluation leaves the process as it found it: torch's thread count, default dtype and
grad mode are never switched, also while other threads run torch; and values() agrees with
stepping whether the steps are a range or any tensor."""

import math
import threading

import pytest
import torch

from cs_lightning.schedulers import (
    CosineDecayLR,
    CyclicLR,
    LambdaLR,
    LinearLR,
    MultiStepLR,
    OneCycleLR,
    PiecewiseConstantLR,
    SequentialLR,
    StepLR,
    plot,
    table,
)


def _global_state():
    return torch.get_num_threads(), torch.get_default_dtype(), torch.is_grad_enabled()


@pytest.fixture
def float64_default():
    """A default dtype other than the schedules' float32, so that a switch to it would show."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _optimizer():
    return torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)


def _schedulers(optimizer, length):
    warmup = LinearLR(optimizer, 0.0, 0.1, 1000)
    return [
        SequentialLR(optimizer, [warmup, CosineDecayLR(optimizer, 0.1, 0.0, length)], [1000]),
        LambdaLR(optimizer, 0.1, lambda k: 0.999 ** (k / 100)),
        StepLR(optimizer, 0.1, step_size=7, gamma=0.9),
        MultiStepLR(optimizer, 0.1, 0.5, [10, 5000]),
        CyclicLR(optimizer, 0.01, 0.1, step_size_up=300, mode="triangular2"),
        OneCycleLR(optimizer, 0.01, 0.1, total_steps=length),
    ]


@pytest.mark.usefixtures("float64_default")
def test_the_public_api_changes_no_global_torch_state(tmp_path):
    before = _global_state()
    optimizer = _optimizer()
    for scheduler in _schedulers(optimizer, 10_000):
        scheduler.values(5000)
        scheduler.values(torch.tensor([3, 0, 4000]))
        for _ in range(3):
            scheduler.step()
        type(scheduler).load_state_dict(scheduler, scheduler.state_dict())
        table(scheduler, 10_000)
        assert _global_state() == before, type(scheduler).__name__
    pytest.importorskip("matplotlib")
    plot(_schedulers(optimizer, 10_000), 10_000).savefig(tmp_path / "lr.png")
    assert _global_state() == before


@pytest.mark.usefixtures("float64_default")
def test_no_other_thread_sees_a_switched_setting_during_a_long_evaluation():
    """A watcher thread reads the settings, and computes with them, for as long as the main
    thread evaluates 2**22 steps of each schedule."""
    before = _global_state()[:2]
    seen, done = [], threading.Event()

    def watch():
        while not done.is_set():
            seen.append((torch.get_num_threads(), torch.get_default_dtype(), (torch.arange(3) * 0.5).dtype))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for scheduler in _schedulers(_optimizer(), 2**22):
            scheduler.values(2**22)
    finally:
        done.set()
        watcher.join()
    assert len(seen) > 10
    assert set(seen) == {(*before, torch.float64)}


def test_concurrent_evaluations_give_the_values_of_serial_ones():
    optimizer = _optimizer()
    schedulers = _schedulers(optimizer, 2**20)
    serial = [scheduler.values(2**20) for scheduler in schedulers]
    results = [None] * len(schedulers)

    def evaluate(index):
        results[index] = schedulers[index].values(2**20)

    threads = [threading.Thread(target=evaluate, args=(index,)) for index in range(len(schedulers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for got, expected in zip(results, serial):
        assert torch.equal(got, expected)


@pytest.mark.parametrize("index", range(6))
def test_any_tensor_of_steps_gives_the_values_of_the_range(index):
    """Pieces (sequence stages, staircase periods) are evaluated per piece: steps in any
    order, repeated or alone, take the same values as the range gives them."""
    scheduler = _schedulers(_optimizer(), 3000)[index]
    everything = scheduler.values(6000)
    steps = torch.tensor([5999, 0, 999, 1000, 1001, 7, 7, 4999, 5000, 2048, 6, 13])
    assert torch.equal(scheduler.values(steps), everything[steps])
    assert torch.equal(scheduler.values(range(5999, -1, -3)), everything[torch.arange(5999, -1, -3)])


def test_a_changed_child_argument_reaches_its_parent_at_the_next_step():
    optimizer = _optimizer()
    decay = CosineDecayLR(optimizer, 0.1, 0.0, 100)
    sequence = SequentialLR(optimizer, [PiecewiseConstantLR(optimizer, [0.05], []), decay], [1])
    sequence.step()
    decay.initial_learning_rate = 0.2
    sequence.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * (1 + math.cos(math.pi / 100)), rel=1e-6)
