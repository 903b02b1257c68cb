"""Row replay: each rank's rows of every tensor, made alone, equal eager construction's rows bit for bit,
and the generator ends where eager leaves it; ranks simulated one after another in this process."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from sharded_models import HalfScaled
from torch import nn

from cs_lightning.deferred import mt19937, recording
from cs_lightning.deferred.materialize import deferred_tensors, module_slots
from cs_lightning.deferred.row_replay import replay_rows
from cs_lightning.errors import DeferredInitWarning


def _rows_of_every_rank(build, world: int, agree=lambda ok: ok) -> tuple[dict, list[dict[int, str]]]:
    """Gathered parameters and buffers of ``build()`` replayed rank by rank, and each rank's whole-made list."""
    gathered: dict[str, list[torch.Tensor]] = {}
    demoted = []
    for rank in range(world):
        torch.manual_seed(7)
        with recording():
            module = build()
        entries = deferred_tensors(module_slots(module, {}), {})
        by_sid = {e.ref.sid: e for e in entries}
        params = {id(p) for p in module.parameters()}
        spans, every_rank = {}, {}
        for e in entries:
            if id(e.fake) in params:
                chunks = _chunks(e.fake.shape[0], world)
                row = math.prod(e.fake.shape[1:])
                spans[e.ref.sid] = (*chunks[rank], row)
                every_rank[e.ref.sid] = [(start * row, stop * row) for start, stop in chunks]
        got = {}

        def on_rows(sid: int, flat: torch.Tensor) -> None:
            start, stop, _ = spans[sid]
            got[by_sid[sid].fqns[0]] = flat.view(stop - start, *by_sid[sid].fake.shape[1:]).clone()

        def on_whole(sid: int, executor) -> None:
            value = executor.view(by_sid[sid].ref).clone()
            got[by_sid[sid].fqns[0]] = value[spans[sid][0] : spans[sid][1]] if sid in spans else value

        log = entries[0].fake._cs_recording
        ranges = {sid: (start * row, stop * row) for sid, (start, stop, row) in spans.items()}
        demoted.append(
            replay_rows(
                log,
                ranges=ranges,
                every_rank=every_rank,
                whole=set(by_sid) - set(ranges),
                keep=set(),
                on_rows=on_rows,
                on_whole=on_whole,
                agree=agree,
                draw_skipped_tail=True,
            )
        )
        torch.manual_seed(7)
        build()
        assert torch.equal(torch.get_rng_state(), _after(build)), f"rank {rank}: generator not where eager leaves it"
        for name, value in got.items():
            gathered.setdefault(name, []).append(value)
    return gathered, demoted


def _chunks(rows: int, world: int) -> list[tuple[int, int]]:
    """Rows ``[start, stop)`` of each rank: ``torch.chunk`` on dim 0, as FSDP2's ``Shard(0)``."""
    starts = [min(rows, rank * -(-rows // world)) for rank in range(world)]
    return [(start, min(rows, start + -(-rows // world))) for start in starts]


def _after(build) -> torch.Tensor:
    torch.manual_seed(7)
    build()
    return torch.get_rng_state()


def _assert_gathered_is_eager(build, world: int, **kwargs) -> list[dict[int, str]]:
    gathered, demoted = _rows_of_every_rank(build, world, **kwargs)
    torch.manual_seed(7)
    eager = build()
    params = dict(eager.named_parameters())
    expected = {**params, **dict(eager.named_buffers())}
    for name, parts in gathered.items():
        value = torch.cat(parts) if name in params else parts[0]
        assert torch.equal(value, expected[name]), name
    return demoted


class Fills(nn.Module):
    def __init__(self, rows: int, cols: int, kind: str) -> None:
        super().__init__()
        self.first = nn.Parameter(torch.empty(rows, cols))
        self.second = nn.Parameter(torch.empty(cols + 1, rows))
        for p in (self.first, self.second):
            if kind == "normal":
                nn.init.normal_(p, mean=0.1, std=0.5)
            elif kind == "uniform":
                nn.init.uniform_(p, -0.3, 0.2)
            else:
                nn.init.trunc_normal_(p, std=0.02)


@given(
    rows=st.integers(1, 40),
    cols=st.integers(1, 40),
    world=st.integers(2, 5),
    kind=st.sampled_from(["normal", "uniform", "trunc"]),
)
def test_rows_of_fills_are_eager_rows_for_any_shape_and_rank_count(rows: int, cols: int, world: int, kind: str) -> None:
    # sizes under 16 are generated whole (a Box-Muller sample cached in the generator), the rest by rows:
    # 16-chunks cut by a rank's first or last row, and the recomputed tail of sizes not a multiple of 16
    demoted = _assert_gathered_is_eager(lambda: Fills(rows, cols, kind), world)
    small = {
        name
        for name, numel in (("first", rows * cols), ("second", (cols + 1) * rows))
        if numel < 16 and kind != "uniform"
    }
    assert {name for d in demoted for name in d.values()} <= {"normal_.default", "trunc_normal_"}
    assert len(demoted[0]) == len(small)


def test_a_truncated_normal_out_of_bounds_on_any_rank_is_made_whole_on_every_rank() -> None:
    # a rank whose rows were all inside still agrees to the whole call when another's were not
    demoted = _assert_gathered_is_eager(lambda: Fills(33, 20, "trunc"), world=3, agree=lambda ok: False)
    assert demoted == [{}, {}, {}]


class Mixed(nn.Module):
    """A zeroed padding row (a fill through a row view), orthogonal_ (not by rows), kaiming/xavier fans of the
    full shape, a scaled fill, a tie, and buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(29, 18, padding_idx=14)
        self.rotate = nn.Parameter(torch.empty(12, 12))
        nn.init.orthogonal_(self.rotate)
        self.spread = nn.Parameter(torch.empty(27, 5))
        nn.init.kaiming_uniform_(self.spread, a=math.sqrt(5))
        self.mix = nn.Parameter(torch.empty(23, 7))
        nn.init.xavier_normal_(self.mix)
        with torch.no_grad():
            self.mix.mul_(0.5)
        self.head = nn.Linear(18, 29, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("steps", torch.arange(10.0))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_views_ties_and_unsliceable_inits(world: int) -> None:
    demoted = _assert_gathered_is_eager(Mixed, world)
    assert [list(d.values()) for d in demoted] == [["copy_.default"]] * world  # orthogonal_: made whole


@pytest.mark.parametrize(("world", "whole"), [(2, []), (3, ["mul_.Tensor"]), (4, ["mul_.Tensor"])])
def test_a_view_cut_by_one_rank_boundary_is_made_whole_on_every_rank(world: int, whole: list[str]) -> None:
    """Each rank asked only whether the view could be cut at its own rows: at 3 ranks the third kept the
    truncated normal by rows, whose all-reduce the two others, making it whole, never joined (a hang).
    Over 2 ranks the view is rank 0's rows 0-3: it is cut by rows."""
    demoted = _assert_gathered_is_eager(HalfScaled, world)
    assert [list(d.values()) for d in demoted] == [whole] * world


class Wide(nn.Module):
    """Layers whose rows on the other rank are over 1M numbers: those are jumped over, not drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(1024, 2304) for _ in range(3))
        for layer in self.layers:
            nn.init.normal_(layer.weight, std=0.02)  # Linear's own kaiming_uniform_ becomes dead


def test_the_other_ranks_rows_of_large_layers_are_jumped_over_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    assert mt19937.available()  # its one check jumps too: done before counting
    jumps: list[int] = []
    advance = mt19937.advance
    monkeypatch.setattr(mt19937, "advance", lambda state, n: jumps.append(n) or advance(state, n))
    _assert_gathered_is_eager(Wide, world=2)
    rows, half_bias = 1024 * 2304 // 2, 2304 // 2
    # The stream: per layer a dead kaiming_uniform_ of the weight (2 * rows numbers) and the bias's live
    # uniform_, then the three weights' normal_. Rank 0 jumps over the first weight's, then over rank 1's half
    # of each bias with the next weight's (of the last bias: under 1M, drawn), then rank 1's rows of each
    # weight (of the last: eager's trailing draws); rank 1 over rank 0's half of each bias with the weight
    # before it, then over rank 0's rows of each weight.
    assert jumps == [2 * rows] + [half_bias + 2 * rows] * 2 + [rows] * 3 + [half_bias + 2 * rows] * 3 + [rows] * 3


class ReadsAValue(nn.Module):
    """A constructor that reads a random value (the recording runs everything so far then), scales what it
    read in place, and goes on recording."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 21)
        self.register_buffer("ramp", torch.arange(5.0))
        with torch.no_grad():
            self.scale = float(self.a.weight.abs().max())
            self.a.weight.mul_(self.scale)  # by rows, on the rows the read made
        self.b = nn.Linear(21, 18)


@pytest.mark.parametrize("world", [2, 3])
def test_values_made_when_a_constructor_reads_one_are_kept(world: int) -> None:
    with pytest.warns(DeferredInitWarning, match="reads the value of a randomly initialized tensor"):
        demoted = _assert_gathered_is_eager(ReadsAValue, world)
    assert demoted == [{}] * world
