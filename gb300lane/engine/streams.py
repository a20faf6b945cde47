"""Per-request random streams: uniforms addressed by (request, output position, use, slot).

Every draw the engine makes for a request (a draft slot's sample, a verify
step's accept uniforms, the target's own token) is a pure function of the
request's key and where the draw sits: the output position the step starts
at, what the draw is for, and the slot within the step. Nothing is consumed
from a shared generator, so a request's draws do not depend on which other
requests share its steps, on how many steps came before, or on the order the
batch is built in. What can still change a request's text is the step shape
itself: a different k at the same position draws the same uniforms for the
slots both shapes have and different ones elsewhere, and the verify rule sees
a different block.

The generator is SplitMix64 used counter-based (Steele, Lea and Flood, 2014):
the request key is the stream's seed and (position, use, slot) packed into one
64-bit word is the counter; the output is SplitMix64's finaliser of
key + counter x golden gamma, its top 53 bits as a double in [0, 1). Keys are
themselves finalised, so seeds that differ by one give unrelated streams.
Vectorised over a batch in a handful of numpy integer operations.
"""

from __future__ import annotations

import functools
from typing import cast

import numpy as np

from gb300lane.spec import kernels

#: What a draw is for; part of the counter, so the uses never share a value.
DRAFT, ACCEPT, SAMPLE, NUMERICS = 0, 1, 2, 3
#: A draft redrawn inside a request's grammar (engine/grammar.py).
GRAMMAR = 4

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11, _S16 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11), np.uint64(16)
_MASK = (1 << 64) - 1
#: Domain separators: a seeded request, an unseeded one, a boot.
_SEEDED, _UNSEEDED, _BOOT = 0x5EED, 0xA77, 0xB007
#: Counter layout: position << 16 | use << 8 | slot.
_MAX_POSITION = 1 << 47
_MAX_SLOT = 1 << 8


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array (wraps modulo 2**64, as the C code does)."""
    x = x ^ (x >> _S30)
    x = x * _M1
    x = x ^ (x >> _S27)
    x = x * _M2
    return cast(np.ndarray, x ^ (x >> _S31))


def _key(*words: int) -> int:
    state = np.zeros(1, dtype=np.uint64)
    for w in words:
        state = _mix(state + np.array([w & _MASK], dtype=np.uint64) * _GAMMA)
    return int(state[0])


def request_key(seed: int) -> int:
    """The stream key of a request that carries `seed`."""
    return _key(_SEEDED, seed)


def unseeded_key(engine_seed: int, arrival: int) -> int:
    """The stream key of a request without a seed: the engine's seed and the request's arrival number."""
    return _key(_UNSEEDED, engine_seed, arrival)


def boot_key(boot_seed: int) -> int:
    """The key of one boot's numerics (see `EngineCore`'s boot seed)."""
    return _key(_BOOT, boot_seed)


def _positions(positions: np.ndarray) -> np.ndarray:
    pos = np.asarray(positions, dtype=np.int64)
    if pos.size and (pos.min() < 0 or pos.max() >= _MAX_POSITION):
        raise ValueError(f"positions must lie in [0, 2**47); got [{pos.min()}, {pos.max()}]")
    return pos


def counters(positions: np.ndarray, use: int | np.ndarray, slots: int | np.ndarray) -> np.ndarray:
    """(B, S) counter words for `positions` (B,), `use` (one, or (S,) one per slot), and `slots` (S,) or range(slots)."""
    pos = _positions(positions)
    slot = (
        np.arange(slots, dtype=np.int64) if isinstance(slots, (int, np.integer)) else np.asarray(slots, dtype=np.int64)
    )
    if slot.size and slot.max() >= _MAX_SLOT:
        raise ValueError(f"slots must lie in [0, {_MAX_SLOT}); got {slot.max()}")
    return ((pos[:, None] << 16) | (np.asarray(use, dtype=np.int64) << 8) | slot[None, :]).astype(np.uint64)


def uniforms_at(keys: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Doubles in [0, 1) for stream `keys` (B,) at counter `words` (B, S)."""
    k = np.asarray(keys, dtype=np.uint64).reshape(-1, 1)
    bits = _mix(k + words * _GAMMA) >> _S11
    return bits.astype(np.float64) * (1.0 / (1 << 53))


def uniforms(keys: np.ndarray, positions: np.ndarray, use: int, count: int) -> np.ndarray:
    """(B, count) uniforms for slots 0..count-1 of `use` at each row's output position."""
    return _at_positions(keys, positions, _use_words(use, count))


def step_uniforms(keys: np.ndarray, positions: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A verify step's draws in one pass: DRAFT (B, k), ACCEPT (B, k) and SAMPLE (B,) at each row's position.

    The same values as three `uniforms` calls (the same counter words), for a
    step's fixed cost.
    """
    u = _at_positions(keys, positions, _step_words(k))
    return u[:, :k], u[:, k : 2 * k], u[:, 2 * k]


def _at_positions(keys: np.ndarray, positions: np.ndarray, words: np.ndarray) -> np.ndarray:
    """(B, S) uniforms at counter words (position << 16) | words[s] (`counters`' layout; `words` holds the use
    and slot bits), each row at its own position; positions outside the layout raise, naming the range."""
    compiled = kernels.active()
    pos = np.ascontiguousarray(positions, dtype=np.int64)
    if compiled is not None and pos.ndim == 1:
        # The same counter words and finaliser in one pass (_kernels.c step_uniforms), which checks the positions.
        u = np.empty((pos.shape[0], words.shape[0]))
        if not compiled.step_uniforms(np.ascontiguousarray(keys, dtype=np.uint64), pos, words, u):
            _positions(pos)  # raises, naming the range
        return u
    pos = _positions(pos)
    return uniforms_at(keys, (pos.astype(np.uint64) << _S16)[:, None] | words)


@functools.lru_cache(maxsize=64)
def _use_words(use: int, count: int) -> np.ndarray:
    """The use and slot bits of slots 0..count-1 of `use` (`counters`' layout), built once per (use, count)."""
    words = counters(np.zeros(1, dtype=np.int64), use, count)[0]
    words.flags.writeable = False
    return cast(np.ndarray, words)


@functools.lru_cache(maxsize=32)
def _step_words(k: int) -> np.ndarray:
    """The use and slot bits of a verify step's 2k + 1 counter words (`counters`' layout), built once per k."""
    uses = np.repeat(np.array([DRAFT, ACCEPT, SAMPLE], dtype=np.int64), [k, k, 1])
    slots = np.concatenate([np.arange(k, dtype=np.int64), np.arange(k, dtype=np.int64), [0]])
    if slots.max() >= _MAX_SLOT:
        raise ValueError(f"slots must lie in [0, {_MAX_SLOT}); got {slots.max()}")
    words = counters(np.zeros(1, dtype=np.int64), uses, slots)[0]
    words.flags.writeable = False
    return cast(np.ndarray, words)


def uniforms_by_column(keys: np.ndarray, words: np.ndarray) -> np.ndarray:
    """`uniforms_at` with one stream key per column: (B, S) doubles for keys (S,) at words (B, S).

    Column j holds `uniforms_at(keys[j:j+1], words[:, j:j+1])`: draws from
    several streams in one pass.
    """
    k = np.asarray(keys, dtype=np.uint64).reshape(1, -1)
    bits = _mix(k + words * _GAMMA) >> _S11
    return bits.astype(np.float64) * (1.0 / (1 << 53))
