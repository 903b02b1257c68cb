"""Jump torch's CPU generator (mt19937) ahead by n outputs without generating them.

Eager construction draws random numbers for tensors a checkpoint later overwrites; to
leave the global generator exactly where eager leaves it, exact replay must account for
those draws. Drawing them costs as much as eager init. Mersenne Twister is linear over
GF(2), so its state n steps ahead is g(T) applied to the state, where T is one step of
the recurrence and g(x) = x^n mod phi(x), phi the recurrence's characteristic polynomial
(degree 19937): 10-30 ms whatever n is, ~1 ms for a distance seen before (~2-3 ms for
one a little longer), in this process or, through the cache folder, an earlier one.

phi is what Berlekamp-Massey finds on outputs of torch's own generator: it ships with the
package (``mt19937_phi.bin``, which tests find again), each process checks it against
torch's outputs before use, and nothing here is a constant copied from elsewhere; every
jump is checked by tests against drawing the numbers.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import threading
from pathlib import Path

import numpy as np
import torch

from cs_lightning.cache import Entries, cache_dir, write_atomic
from cs_lightning.errors import UsageError

_N = 624
_DEGREE = 19937
_POLYNOMIAL_BYTES = (_DEGREE + 8) // 8  # a polynomial of degree <= DEGREE, bit i: x^i
# torch's CPU state: u64 seed, i32 left, i32 seeded, u64 next, u64 words[624], ...
_HEADER = struct.Struct("<QiiQ")
_WORDS = _HEADER.size
_STATE_BYTES = 5056


@functools.cache
def available() -> bool:
    """Whether jumping matches drawing on this torch build (checked once, on a private
    generator): if its state layout ever changes, callers draw instead of jumping."""
    generator = torch.Generator().manual_seed(20240229)
    start = generator.get_state()
    torch.empty(3 * _N + 7, dtype=torch.int32).random_(generator=generator)
    try:
        return torch.equal(advance(start, 3 * _N + 7), generator.get_state())
    except (ValueError, AssertionError):
        return False


def advance(state: torch.Tensor, n: int) -> torch.Tensor:
    """The CPU generator state after ``n`` more 32-bit outputs (torch.get_rng_state layout)."""
    if state.dtype != torch.uint8 or state.numel() != _STATE_BYTES:
        raise UsageError(
            f"mt19937.advance: not a CPU generator state: {state.numel()} "
            f"{state.dtype} values, expected {_STATE_BYTES} uint8."
        )
    raw = bytearray(state.numpy().tobytes())
    seed, left, seeded, next_ = _HEADER.unpack_from(raw, 0)
    ready = left - 1  # outputs left in the current block before the next twist
    if n <= ready:
        _HEADER.pack_into(raw, 0, seed, left - n, seeded, next_ + n)
        return torch.frombuffer(raw, dtype=torch.uint8).clone()
    blocks = _twists(left, n)
    used = n - ready - _N * (blocks - 1)  # outputs taken from the last new block
    words = np.frombuffer(bytes(raw[_WORDS : _WORDS + 8 * _N]), dtype="<u8").astype(np.uint32)
    words = _twist_blocks(words, blocks)
    raw[_WORDS : _WORDS + 8 * _N] = words.astype("<u8").tobytes()
    _HEADER.pack_into(raw, 0, seed, _N - used + 1, seeded, used)
    return torch.frombuffer(raw, dtype=torch.uint8).clone()


def _twists(left: int, n: int) -> int:
    """Blocks twisted to move ``n`` outputs on from a state with ``left - 1`` outputs ready."""
    return -(-(n - left + 1) // _N)


def _exponent(blocks: int) -> int:
    """The power of x that ``blocks`` twists take (see ``_twist_blocks``)."""
    return _N * blocks - 1


def worth_jumping(state: torch.Tensor, n: int) -> bool:
    """Whether to jump ``state`` a mid-size ``n`` outputs ahead rather than draw them: when the
    power of x it needs was found before (in this process, or a little below, or in the cache
    folder), a jump costs 1-3 ms; else squaring costs 10-30 ms, worth it only for a distance that
    comes up again (layers of one size skip the same draws), so the second time it is asked."""
    left = _HEADER.unpack_from(state.numpy().tobytes()[: _HEADER.size], 0)[1]
    if n <= left - 1:
        return True  # no twist at all
    k = _exponent(_twists(left, n))
    with _POWERS_LOCK:
        if k in _ASKED or _found_below(k) is not None:
            return True
        _ASKED.add(k)
    return _power_path(k).is_file()


_ASKED: set[int] = set()  # exponents of mid-size skips drawn so far (a second one is jumped)


def _twist_blocks(words: np.ndarray, blocks: int) -> np.ndarray:
    """The 624-word block ``blocks`` twists later: the window 624*blocks steps ahead.

    T^i applied to the state is the window of the word sequence starting i words on, so
    g(T) applied to it is the XOR of the windows at the positions of g's one bits. Taken
    four bits of g at a time, through a table of the sequence XORed with itself shifted by
    each 4-bit pattern: one window per nonzero digit (~4,700) instead of one per one bit
    (~10,000), a few hundred at a time (so each batch stays in cache). g(T) may differ from
    T^k in the low 31 bits of the window's first word, which the recurrence never reads; so
    jump one step short and take the last step for real.
    """
    patterns, starts = _digits(_exponent(blocks))
    # 3 words more than the last window needs: a digit's last bit is 3 words on from where it starts
    table = _pattern_table(_sequence(words, _DEGREE + _N + 3))
    rows, length = table.shape
    windows = np.lib.stride_tricks.as_strided(
        table, (rows, length - _N + 1, _N), (table.strides[0], 4, 4), writeable=False
    )
    window = np.zeros(_N, dtype=np.uint32)
    for start in range(0, len(starts), _BATCH):
        batch = slice(start, start + _BATCH)
        window ^= np.bitwise_xor.reduce(windows[patterns[batch], starts[batch]], axis=0)
    return _sequence(window, _N + 1)[1:]


_BATCH = 256  # windows XORed per numpy call: 256 * 624 words = 640 KB, cache-sized


@functools.lru_cache(maxsize=64)  # distances repeat: layers of one size skip the same draws
def _digits(k: int) -> tuple[np.ndarray, np.ndarray]:
    """The nonzero 4-bit digits of x^k mod phi(x) (bit j of a digit: the coefficient of x^(start + j)),
    and where each starts (kept small: 14 KB an entry)."""
    data = np.frombuffer(_x_power_mod(k).to_bytes(_POLYNOMIAL_BYTES, "little"), np.uint8)
    digits = np.empty(2 * data.size, dtype=np.uint8)
    digits[0::2], digits[1::2] = data & 0xF, data >> 4
    nonzero = np.flatnonzero(digits)
    return digits[nonzero], (4 * nonzero).astype(np.int32)


def _pattern_table(sequence: np.ndarray) -> np.ndarray:
    """Row h, column q: the XOR of ``sequence[q + j]`` over the one bits j of h (16 rows, 4 bits)."""
    length = sequence.size - 3
    table = np.empty((16, length), dtype=np.uint32)
    table[0] = 0
    for j in range(4):  # the patterns with bit j set: those without it, XOR the sequence j words on
        table[1 << j : 2 << j] = table[: 1 << j] ^ sequence[j : j + length]
    return table


def _sequence(words: np.ndarray, length: int) -> np.ndarray:
    """The first ``length`` words of the recurrence starting from window ``words``.

    torch's generator, set to twist ``words`` next, draws the words after them (tempered: each
    output is a fixed invertible map of its word). A 64-bit draw is two outputs, the first in
    the high half. ~0.1 ms for 20,000 words, a third of the recurrence run in numpy; jumps are
    checked against drawing once per process (``available``), so a torch that drew otherwise
    would be found out and drawn instead.
    """
    out = np.empty(max(length, _N), dtype=np.uint32)
    out[:_N] = words
    if length > _N:
        state = bytearray(_fresh_state())
        _HEADER.pack_into(state, 0, 0, 1, 1, 0)  # one output left: the next draw twists
        state[_WORDS : _WORDS + 8 * _N] = words.astype("<u8").tobytes()
        generator = torch.Generator()
        generator.set_state(torch.frombuffer(state, dtype=torch.uint8))
        pairs = torch.empty(-(-(length - _N) // 2), dtype=torch.int64)
        pairs.random_(-(1 << 63), None, generator=generator)  # the full range: all 64 bits of two outputs
        both = pairs.numpy().view(np.uint64)
        drawn = np.stack([both >> np.uint64(32), both & np.uint64(0xFFFFFFFF)], axis=1).astype(np.uint32)
        out[_N:length] = _untemper(drawn.ravel()[: length - _N])
    return out[:length]


@functools.cache
def _fresh_state() -> bytes:
    """A CPU generator's state as torch lays it out, for ``_sequence`` to fill in."""
    return torch.Generator().get_state().numpy().tobytes()


def _untemper(outputs: np.ndarray) -> np.ndarray:
    """The words whose tempered values are ``outputs`` (mt19937's tempering, undone step by step)."""
    y = outputs ^ (outputs >> np.uint32(18))
    y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
    x = y
    for _ in range(4):  # y = x ^ ((x << 7) & mask): each round fixes 7 more bits of x
        x = y ^ ((x << np.uint32(7)) & np.uint32(0x9D2C5680))
    return x ^ (x >> np.uint32(11)) ^ (x >> np.uint32(22))


def _x_power_mod(k: int) -> int:
    """x^k mod phi(x), polynomials over GF(2) as Python ints (bit i: coefficient of x^i).

    From scratch it takes ~20 squarings (10-30 ms), so each is kept in the cache folder:
    a fresh process materializing the same model jumps the same distances. A power a
    little above one already found is that one shifted and reduced (~1-2 ms). Sharded
    replay jumps over the other ranks' rows of each tensor: the distances repeat layer
    after layer, up to one block (624 words) more or less as the stream's place in its
    block varies.
    """
    with _POWERS_LOCK:  # parallel replay jumps from several threads
        found = _POWERS.pop(k, None)
        below = _found_below(k)
        base = None if below is None else (_POWERS[below], k - below)
    if found is None and base is not None:
        found = _reduce(base[0] << base[1], _phi(), _reduction_table())
    elif found is None:
        found = _stored_power(k)
    if found is None:
        found = _power_by_squaring(k)
        _store_power(k, found)
    with _POWERS_LOCK:
        _POWERS.pop(k, None)
        _POWERS[k] = found  # most recently used last
        while len(_POWERS) > _KEPT:
            del _POWERS[next(iter(_POWERS))]
    return found


_POWERS: dict[int, int] = {}  # k -> x^k mod phi, least recently used first
_POWERS_LOCK = threading.Lock()
_KEPT = 64
_NEAR = 1 << 14  # shifting by up to this many bits and reducing beats squaring from scratch


def _found_below(k: int) -> int | None:
    """The largest exponent found in this process from ``k - _NEAR`` to ``k``, from which x^k is
    a shift and a reduction away; None if there is none. Called holding ``_POWERS_LOCK``."""
    return max((j for j in _POWERS if 0 <= k - j <= _NEAR), default=None)


def _stored_power(k: int) -> int | None:
    """x^k mod phi as an earlier process found it, or None. The file holds a digest of phi,
    k and the power: a damaged file, or one found for another phi, does not match it. (The
    digest guards against accidents, not against someone who writes the cache folder.)"""
    try:
        data = _power_path(k).read_bytes()
    except OSError:
        return None
    digest, power = data[:32], data[32:]
    if len(power) != _POLYNOMIAL_BYTES or digest != _power_digest(k, power):
        return None
    return int.from_bytes(power, "little")


def _store_power(k: int, power: int) -> None:
    if k <= _NEAR:  # a few squarings of short polynomials: not worth a file
        return
    data = power.to_bytes(_POLYNOMIAL_BYTES, "little")
    try:
        write_atomic(_power_path(k), _power_digest(k, data) + data)
    except OSError:  # a read-only cache costs the squarings next time, nothing else
        pass


def _power_path(k: int) -> Path:
    return _folder() / f"x{k}.bin"


def _power_digest(k: int, power: bytes) -> bytes:
    return hashlib.sha256(_phi().to_bytes(_POLYNOMIAL_BYTES, "little") + k.to_bytes(16, "little") + power).digest()


def _folder() -> Path:
    return cache_dir() / "mt19937"


def stored() -> Entries:
    """What this module keeps in the cache folder: the powers of x found by squaring (2.5 KB
    each; ``cs-lightning cache clear`` removes them, found again when needed)."""
    return Entries(_folder(), "x*.bin")


def _power_by_squaring(k: int) -> int:
    phi, table = _phi(), _reduction_table()
    result = 1
    for bit in bin(k)[2:]:
        result = _reduce(_square(result), phi, table)
        if bit == "1":
            result <<= 1
            if result >> _DEGREE & 1:
                result ^= phi
    return result


# Byte b with its bits moved to the even positions of 16: bit j goes to bit 2j.
_SPREAD = np.array([sum((b >> j & 1) << 2 * j for j in range(8)) for b in range(256)], dtype="<u2")


def _square(p: int) -> int:
    """p(x)^2 over GF(2): the bits of p spread out to the even positions."""
    data = np.frombuffer(p.to_bytes(max(1, (p.bit_length() + 7) // 8), "little"), np.uint8)
    return int.from_bytes(_SPREAD[data].tobytes(), "little")


def _reduce(p: int, phi: int, table: dict[int, int]) -> int:
    while p.bit_length() > _DEGREE + 7:  # clear the top eight bits at once
        shift = p.bit_length() - 8 - _DEGREE
        p ^= table[(p >> (_DEGREE + shift)) & 0xFF] << shift
    while p.bit_length() > _DEGREE:
        p ^= phi << (p.bit_length() - 1 - _DEGREE)
    return p


@functools.cache
def _reduction_table() -> dict[int, int]:
    """For each top byte b, the multiple of phi whose bits DEGREE..DEGREE+7 equal b."""
    phi, table = _phi(), {}
    for q in range(256):
        product = 0
        for j in range(8):
            if q >> j & 1:
                product ^= phi << j
        table[(product >> _DEGREE) & 0xFF] = product
    return table


@functools.cache
def _phi() -> int:
    """The characteristic polynomial of the recurrence.

    Read from the file shipped beside this module and checked against 256 further bits of
    torch's sequence (a wrong polynomial passes with probability 2^-256): ~1 ms. Should the
    file be missing or fail the check, Berlekamp-Massey finds phi again (~0.1 s).
    """
    bits = _low_bits(2 * _DEGREE + 356)
    try:
        phi = int.from_bytes(_SHIPPED_PHI.read_bytes(), "little")
        if phi.bit_length() == _DEGREE + 1 and _annihilates(_reciprocal(phi), bits):
            return phi
    except OSError:
        pass
    return _reciprocal(_connection_polynomial(bits[: 2 * _DEGREE + 100]))


_SHIPPED_PHI = Path(__file__).with_name("mt19937_phi.bin")


def _low_bits(count: int) -> np.ndarray:
    """The lowest bit of each of the first ``count`` outputs of a generator seeded with 5489, as uint8."""
    draws = torch.empty(count, dtype=torch.int32)
    draws.random_(generator=torch.Generator().manual_seed(5489))  # one output each
    return (draws.numpy() & 1).astype(np.uint8)


def _connection_polynomial(bits: np.ndarray) -> int:
    """Berlekamp-Massey over GF(2): the shortest recurrence the bits satisfy."""
    c, b, length, gap, window = 1, 1, 0, 1, 0
    for i, s in enumerate(bits.tolist()):
        window = (window << 1) | s  # bit j: the (i-j)-th bit of the sequence
        if (c & window).bit_count() & 1 == 0:
            gap += 1
        elif 2 * length <= i:
            c, b, length, gap = c ^ (b << gap), c, i + 1 - length, 1
        else:
            c ^= b << gap
            gap += 1
    if length != _DEGREE:
        raise AssertionError(f"mt19937: linear complexity {length}, expected {_DEGREE}")
    return c


def _annihilates(c: int, bits: np.ndarray) -> bool:
    """Whether recurrence ``c`` holds at the last 256 positions of ``bits``."""
    # bit m: bits[len - 1 - m] (packbits puts bits[0] first and pads the last byte's low bits)
    reversed_bits = int.from_bytes(np.packbits(bits).tobytes(), "big") >> (-len(bits) % 8)
    mask = (1 << (_DEGREE + 1)) - 1
    return all(
        (c & (reversed_bits >> (len(bits) - 1 - i)) & mask).bit_count() % 2 == 0
        for i in range(len(bits) - 256, len(bits))
    )


def _reciprocal(p: int) -> int:
    """p(x) with its coefficients reversed over degree DEGREE."""
    return int(f"{p:0{_DEGREE + 1}b}"[::-1], 2)
