"""cs_lightning.deferred.mt19937: jumping the CPU generator == drawing the numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from cs_lightning.cache import cache_dir
from cs_lightning.deferred import deferred_init, materialize, mt19937
from cs_lightning.deferred.mt19937 import advance, available
from cs_lightning.deferred.replay import skip_outputs


def drawn(state: torch.Tensor, n: int) -> torch.Tensor:
    """The reference: set the state, draw n 32-bit outputs, read the state."""
    torch.set_rng_state(state)
    if n:
        torch.empty(n, dtype=torch.int32).random_()  # one output per element
    return torch.get_rng_state()


def state_after(seed: int, already_drawn: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return drawn(torch.get_rng_state(), already_drawn)


@given(st.integers(0, 2**32 - 1), st.integers(0, 1500), st.integers(0, 3 * 624 + 5))
@settings(max_examples=10)
def test_jump_equals_drawing_around_block_boundaries(seed, already_drawn, n) -> None:
    start = state_after(seed, already_drawn)
    assert torch.equal(advance(start, n), drawn(start, n))


def test_jumps_are_available_on_this_torch_and_refuse_other_states() -> None:
    assert available()
    with pytest.raises(ValueError, match="not a CPU generator state"):
        advance(torch.zeros(7, dtype=torch.uint8), 5)


def _recurrence(words: list[int], length: int) -> list[int]:
    """mt19937's word recurrence as its paper states it, one word at a time (the test's reference)."""
    out = list(words)
    while len(out) < length:
        mixed = (out[-624] & 0x80000000) | (out[-623] & 0x7FFFFFFF)
        out.append(out[-227] ^ (mixed >> 1) ^ (0x9908B0DF if mixed & 1 else 0))
    return out


@given(st.lists(st.integers(0, 2**32 - 1), min_size=624, max_size=624), st.integers(624, 2000))
@settings(max_examples=10)
def test_the_sequence_drawn_through_torch_is_the_recurrence(words, length) -> None:
    """Jumps read the words after a state from torch's own generator, untempering its outputs."""
    got = mt19937._sequence(np.array(words, dtype=np.uint32), length)
    assert got.tolist() == _recurrence(words, length)


def test_a_torch_that_drew_otherwise_is_found_out_and_drawn_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    """If torch's outputs stopped being the tempered words, jumps would go wrong: the check refuses them."""
    monkeypatch.setattr(mt19937, "_untemper", lambda outputs: outputs)
    mt19937.available.cache_clear()
    try:
        assert not available()
    finally:
        mt19937.available.cache_clear()


def test_long_jumps_equal_drawing() -> None:
    for n in (624 * 1000, 10_000_019, 30_000_000):
        start = state_after(7, 311)
        assert torch.equal(advance(start, n), drawn(start, n)), n


def test_a_jump_a_little_longer_than_a_known_one_is_derived_from_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sharded replay jumps the same distances layer after layer, give or take a block: after the first,
    no power of x is computed from scratch, and every jump still equals drawing."""
    mt19937._POWERS.clear()
    start = state_after(3, 100)
    assert torch.equal(advance(start, 2_000_000), drawn(start, 2_000_000))
    monkeypatch.setattr(mt19937, "_power_by_squaring", lambda k: pytest.fail(f"x^{k} computed from scratch"))
    for n in (2_000_000, 2_000_624, 2_005_000):
        assert torch.equal(advance(start, n), drawn(start, n)), n


def test_materialize_jumps_over_large_skipped_draws_exactly() -> None:
    """16.7M-element weights: their skipped draws are jumped over, not drawn."""

    def build() -> nn.Module:
        model = nn.Sequential(nn.Linear(4096, 4096), nn.Linear(16, 4))
        nn.init.normal_(model[0].weight, std=0.02)  # the default init becomes dead
        return model

    torch.manual_seed(11)
    checkpoint = {k: v for k, v in build().state_dict().items() if k.startswith("0.")}
    torch.manual_seed(12)
    eager = build()
    eager.load_state_dict(checkpoint, strict=False)
    eager_rng = torch.get_rng_state()
    torch.manual_seed(12)
    lazy = materialize(deferred_init(build), state_dict=checkpoint)
    assert torch.equal(torch.get_rng_state(), eager_rng)
    assert torch.equal(lazy[1].weight, eager[1].weight)
    assert torch.equal(lazy[0].weight, eager[0].weight)


def test_the_shipped_polynomial_is_what_berlekamp_massey_finds() -> None:
    bits = mt19937._low_bits(2 * mt19937._DEGREE + 100)
    found = mt19937._reciprocal(mt19937._connection_polynomial(bits))
    assert mt19937._SHIPPED_PHI.read_bytes() == found.to_bytes(mt19937._POLYNOMIAL_BYTES, "little")


@pytest.mark.parametrize("count", [2 * 19937 + 356, 2 * 19937 + 360, 2 * 19937 + 361])  # 6, 0 and 7 padding bits
def test_the_recurrence_check_holds_for_phi_alone(count: int) -> None:
    bits = mt19937._low_bits(count)
    phi = int.from_bytes(mt19937._SHIPPED_PHI.read_bytes(), "little")
    assert mt19937._annihilates(mt19937._reciprocal(phi), bits)
    assert not mt19937._annihilates(mt19937._reciprocal(phi ^ (1 << 777)), bits)
    bits[-3] ^= 1  # one bit of the sequence off, among the last 256 checked
    assert not mt19937._annihilates(mt19937._reciprocal(phi), bits)


@pytest.mark.parametrize("damage", ["missing", "truncated", "wrong"])
def test_a_damaged_polynomial_file_is_refused_and_phi_found_again(
    damage: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = mt19937._SHIPPED_PHI.read_bytes()
    phi = int.from_bytes(shipped, "little")
    damaged = tmp_path / "phi.bin"
    if damage == "truncated":
        damaged.write_bytes(shipped[:100])
    elif damage == "wrong":
        damaged.write_bytes((phi ^ (1 << 777)).to_bytes(len(shipped), "little"))
    monkeypatch.setattr(mt19937, "_SHIPPED_PHI", damaged)
    monkeypatch.setattr(mt19937, "_connection_polynomial", counted(mt19937._connection_polynomial))
    mt19937._phi.cache_clear()
    try:
        assert mt19937._phi() == phi
        assert mt19937._connection_polynomial.calls == 1  # type: ignore[attr-defined]
    finally:
        mt19937._phi.cache_clear()
    generator = torch.Generator().manual_seed(1)
    start = generator.get_state()
    torch.empty(5 * 624 + 3, dtype=torch.int32).random_(generator=generator)
    assert torch.equal(mt19937.advance(start, 5 * 624 + 3), generator.get_state())


def counted(function):
    def wrapper(*args):
        wrapper.calls += 1
        return function(*args)

    wrapper.calls = 0
    return wrapper


@pytest.mark.parametrize("pairs", [True, False])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 624, 625, (1 << 18) * 2 - 1, (1 << 18) * 2 + 3])
def test_skipping_by_drawing_takes_exactly_n_outputs(n: int, pairs: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below the jump threshold the skip draws int64 pairs (and one float32 for an odd n), or
    float32 singles where int64 draws would not take two outputs each: the generator ends
    where n one-output draws leave it, across scratch chunks."""
    from cs_lightning.deferred import replay

    assert replay._pairs_drawn_by_int64()  # this torch build draws int64 as pairs
    monkeypatch.setattr(replay, "_pairs_drawn_by_int64", lambda: pairs)
    start = state_after(5, 17)
    generator = torch.Generator()
    generator.set_state(start)
    skip_outputs(generator, n, jump_from=1 << 40)
    assert torch.equal(generator.get_state(), drawn(start, n))


def forget_powers() -> None:
    """This process's powers of x, as a new process starts (the cache folder stays)."""
    mt19937._POWERS.clear()
    mt19937._ASKED.clear()
    mt19937._digits.cache_clear()


def test_a_power_found_by_an_earlier_process_is_read_from_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh process jumps the distances its model needs without squaring again."""
    start = state_after(9, 5)
    forget_powers()
    assert torch.equal(advance(start, 50_000_000), drawn(start, 50_000_000))
    stored = list((cache_dir() / "mt19937").glob("x*.bin"))
    assert len(stored) == 1
    forget_powers()  # as a new process starts
    monkeypatch.setattr(mt19937, "_power_by_squaring", lambda k: pytest.fail(f"x^{k} computed from scratch"))
    assert torch.equal(advance(start, 50_000_000), drawn(start, 50_000_000))


@pytest.mark.parametrize("damage", ["flip a bit", "truncate", "empty", "longer"])
def test_a_damaged_stored_power_is_ignored_and_rewritten(damage: str) -> None:
    start = state_after(9, 5)
    forget_powers()
    advance(start, 50_000_000)
    (stored,) = (cache_dir() / "mt19937").glob("x*.bin")
    whole = stored.read_bytes()
    flipped = bytes([*whole[:100], whole[100] ^ 1, *whole[101:]])  # inside the power: a wrong jump if used
    longer = whole + bytes(8)  # the right power with zeros after it: not what was written
    damaged = {"flip a bit": flipped, "truncate": whole[: len(whole) // 2], "empty": b"", "longer": longer}[damage]
    stored.write_bytes(damaged)
    forget_powers()
    assert torch.equal(advance(start, 50_000_000), drawn(start, 50_000_000))
    assert stored.read_bytes() == whole  # rewritten


def test_a_distance_is_worth_jumping_once_met_in_this_process_or_an_earlier_one() -> None:
    start = state_after(4, 3)
    forget_powers()
    assert mt19937.worth_jumping(start, 10)  # within the current block: no twist
    assert not mt19937.worth_jumping(start, 3_000_000)  # new: draw it
    assert mt19937.worth_jumping(start, 3_000_000)  # met again: its power will serve the rest
    forget_powers()
    assert not mt19937.worth_jumping(start, 3_000_000)
    advance(start, 3_000_000)
    assert mt19937.worth_jumping(start, 3_000_000 + 624)  # a block further: derived from the one found
    forget_powers()
    assert mt19937.worth_jumping(start, 3_000_000)  # found in the cache folder


def test_mid_size_skips_of_a_known_distance_are_jumped_and_stay_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three 2M-element weights, each re-initialized as soon as built, leave three 2M-output
    gaps of dead draws: in a first process the first gap is drawn and the next two jumped (below
    the usual threshold); in the next process all three. Eager's values and generator either way."""

    def build() -> nn.Module:
        layers = []
        for _ in range(3):
            layers.append(nn.Linear(2048, 1024, bias=False))
            nn.init.normal_(layers[-1].weight, std=0.02)  # its default init becomes dead
        return nn.Sequential(*layers)

    jumps: list[int] = []
    real_advance = mt19937.advance
    monkeypatch.setattr(mt19937, "advance", lambda state, n: jumps.append(n) or real_advance(state, n))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one stream of pieces: the gaps are the skips
    try:
        for run in range(2):
            forget_powers()  # each run as a fresh process; the cache folder is kept
            jumps.clear()
            torch.manual_seed(21)
            eager = build()
            eager_rng = torch.get_rng_state()
            torch.manual_seed(21)
            lazy = materialize(deferred_init(build))
            assert torch.equal(torch.get_rng_state(), eager_rng)
            for a, b in zip(lazy.parameters(), eager.parameters()):
                assert torch.equal(a, b)
            assert len([n for n in jumps if 1 << 20 <= n < 1 << 23]) == 2 + run, (run, jumps)
    finally:
        torch.set_num_threads(threads)
