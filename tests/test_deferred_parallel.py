"""Exact materialization on several threads: the same bits as eager, for every init pattern."""

import math

import pytest
import torch
from torch import nn

from cs_lightning.deferred import deferred_init, materialize, replay


class Mixed(nn.Module):
    """Default inits overwritten by common explicit ones, ragged sizes and factory parameters."""

    def __init__(self, pattern: str) -> None:
        super().__init__()
        self.embed = nn.Embedding(1003, 129)  # 129,387 elements: not a multiple of 16
        self.up = nn.Linear(129, 2051)
        self.down = nn.Linear(2051, 129)
        self.scale = nn.Parameter(torch.randn(333, 1001))
        self.noise = nn.Parameter(torch.rand(517, 77))
        init = {
            "default": lambda w: None,
            "normal": lambda w: nn.init.normal_(w, std=0.02),
            "uniform": lambda w: nn.init.uniform_(w, -0.1, 0.1),
            "trunc_normal": lambda w: nn.init.trunc_normal_(w, std=0.02),
            "kaiming_normal": nn.init.kaiming_normal_,
            "kaiming_uniform": lambda w: nn.init.kaiming_uniform_(w, a=math.sqrt(5)),
            "xavier_uniform": nn.init.xavier_uniform_,
            "xavier_normal": nn.init.xavier_normal_,
            "orthogonal": nn.init.orthogonal_,
        }[pattern]
        for weight in (self.embed.weight, self.up.weight, self.down.weight):
            init(weight)
        nn.init.zeros_(self.up.bias)
        with torch.no_grad():
            self.scale.mul_(0.5)  # a later op on a storage that was filled on a thread


PATTERNS = [
    "default",
    "normal",
    "uniform",
    "trunc_normal",
    "kaiming_normal",
    "kaiming_uniform",
    "xavier_uniform",
    "xavier_normal",
    "orthogonal",
]


@pytest.fixture
def parallel_fills(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts replays that took the threaded path (the real one runs)."""
    calls: list[int] = []
    real = replay._run_plan

    def counted(plan, ops, executor):  # type: ignore[no-untyped-def]
        calls.append(max(len(stage.shares) for stage in plan.stages))
        return real(plan, ops, executor)

    monkeypatch.setattr(replay, "_run_plan", counted)
    return calls


def assert_materializes_as_eager(build: type[nn.Module], *args: object, seed: int = 11) -> None:
    """Eager construction and record + materialize from the same seed: same tensors, same generator after."""
    torch.manual_seed(seed)
    eager = build(*args)
    eager_after = torch.get_rng_state()
    torch.manual_seed(seed)
    recorded = materialize(deferred_init(build, *args), "cpu")
    for name, value in eager.state_dict().items():
        assert torch.equal(recorded.state_dict()[name], value), name
    assert torch.equal(torch.get_rng_state(), eager_after)  # a later draw is eager's


@pytest.fixture
def two_threads() -> None:
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_parallel_exact_equals_eager(pattern: str, threads: int, parallel_fills: list[int]) -> None:
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # for both: LAPACK's QR (orthogonal_) rounds by thread count
    try:
        assert_materializes_as_eager(Mixed, pattern)
    finally:
        torch.set_num_threads(previous)
    assert parallel_fills == ([] if threads == 1 else [threads])


def test_from_a_partial_state_dict_skipped_draws_stay_exact(parallel_fills: list[int], two_threads: None) -> None:
    torch.manual_seed(3)
    eager = Mixed("normal")
    given = {"up.weight": torch.ones(2051, 129)}
    eager.load_state_dict(given, strict=False)
    eager_after = torch.get_rng_state()
    torch.manual_seed(3)
    recorded = deferred_init(Mixed, "normal")
    materialize(recorded, "cpu", state_dict=given)
    for name, value in eager.state_dict().items():
        assert torch.equal(recorded.state_dict()[name], value), name
    assert torch.equal(torch.get_rng_state(), eager_after)
    assert parallel_fills == [2]


def test_a_fill_that_is_not_first_on_its_storage_keeps_the_replay_serial(
    parallel_fills: list[int], two_threads: None
) -> None:
    def build() -> nn.Module:
        layer = nn.Linear(1024, 1024)
        with torch.no_grad():
            layer.weight.zero_()
            layer.weight[:512].normal_()  # a slice filled after a live write: order matters
        return layer

    torch.manual_seed(5)
    eager = build()
    torch.manual_seed(5)
    recorded = deferred_init(build)
    materialize(recorded, "cpu")
    assert torch.equal(recorded.weight, eager.weight) and torch.equal(recorded.bias, eager.bias)
    assert parallel_fills == []


class Staged(nn.Module):
    """Big fills with ops drawing an unknown count of numbers between them."""

    def __init__(self, truncation: tuple[float, float, float]) -> None:
        super().__init__()
        self.first = nn.Linear(512, 1024)
        self.tiny = nn.Parameter(torch.randn(5))  # under 16 numbers: normal_'s serial path
        self.wide = nn.Parameter(torch.randn(300, dtype=torch.float64))
        self.mask = nn.Parameter(torch.empty(64, 64).bernoulli_(0.3))
        self.second = nn.Linear(1024, 512)
        std, a, b = truncation
        nn.init.trunc_normal_(self.second.weight, std=std, a=a, b=b)


@pytest.mark.parametrize(
    "truncation",
    [
        (0.02, -2.0, 2.0),  # one round, as almost always: speculated
        (1.0, -0.5, 0.5),  # rounds until all fall in [-0.5, 0.5]: a stage end
        (1.0, 0.0, 0.3),
    ],
)  # under 0.3 of the mass: torch's other sampler
def test_ops_drawing_unknown_counts_split_the_replay_into_stages(
    truncation, parallel_fills: list[int], two_threads: None
) -> None:
    assert_materializes_as_eager(Staged, truncation, seed=21)
    assert parallel_fills == [2]


class Rare(nn.Module):
    """A truncated normal whose second round has odds of 1e-3: speculated, and here needed."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(512, 1024)
        self.tail = nn.Parameter(torch.empty(1024))
        nn.init.trunc_normal_(self.tail, std=1.0, a=-4.9, b=4.9)


def _seed_with_a_second_round() -> int:
    for seed in range(100_000):
        torch.manual_seed(seed)
        nn.Linear(512, 1024)
        if torch.empty(1024).normal_().abs().max() > 4.9:  # the first round torch would draw
            return seed
    raise AssertionError("no seed found")


def test_a_speculated_round_that_fails_falls_back_to_eagers_order(
    two_threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans: list[bool] = []
    real = replay._run_plan

    def recorded_outcome(plan, ops, executor):  # type: ignore[no-untyped-def]
        plans.append(real(plan, ops, executor))
        return plans[-1]

    monkeypatch.setattr(replay, "_run_plan", recorded_outcome)
    assert_materializes_as_eager(Rare, seed=_seed_with_a_second_round())
    assert plans == [False]  # the speculation was checked, refused, and the serial replay gave eager's bits
