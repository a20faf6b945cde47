"""Per-request random streams: addressed uniforms that look independent wherever they are read."""

from __future__ import annotations

import numpy as np
import pytest

from gb300lane.engine.streams import ACCEPT, DRAFT, SAMPLE, boot_key, request_key, uniforms, unseeded_key

# Chi-square critical value for 63 degrees of freedom at p = 1e-6: a uniform stream passes
# all the bin tests below with probability above 1 - 1e-5 whatever the keys are.
CHI2_63_1E6 = 130.0


def _chi2(u: np.ndarray, bins: int = 64) -> float:
    counts = np.bincount((u.reshape(-1) * bins).astype(np.int64), minlength=bins)
    expected = u.size / bins
    return float(((counts - expected) ** 2 / expected).sum())


def test_a_draw_is_a_pure_function_of_key_position_use_and_slot():
    keys = np.array([request_key(s) for s in (1, 2, 3)], dtype=np.uint64)
    pos = np.array([0, 17, 5])
    a = uniforms(keys, pos, DRAFT, 5)
    assert np.array_equal(a, uniforms(keys, pos, DRAFT, 5))
    # Rows do not see each other: a row alone draws what it drew in the batch.
    assert np.array_equal(uniforms(keys[1:2], pos[1:2], DRAFT, 5)[0], a[1])
    # A shorter block reads the same first slots.
    assert np.array_equal(uniforms(keys, pos, DRAFT, 3), a[:, :3])
    assert ((a >= 0.0) & (a < 1.0)).all()


@pytest.mark.slow
@pytest.mark.parametrize("axis", ["seeds", "positions", "uses", "slots"])
def test_uniforms_along_every_address_axis_are_uniform_and_uncorrelated(axis):
    n = 64_000
    seeds = np.arange(n)
    if axis == "seeds":  # neighbouring seeds, the same position
        keys = np.array([request_key(int(s)) for s in seeds], dtype=np.uint64)
        u = uniforms(keys, np.zeros(n, dtype=np.int64), DRAFT, 2)
    elif axis == "positions":  # one request, consecutive positions
        key = np.full(n, request_key(7), dtype=np.uint64)
        u = uniforms(key, seeds, ACCEPT, 2)
    elif axis == "uses":
        key = np.full(n, request_key(7), dtype=np.uint64)
        u = np.stack([uniforms(key, seeds, use, 1)[:, 0] for use in (DRAFT, SAMPLE)], axis=1)
    else:
        key = np.full(n // 8, request_key(7), dtype=np.uint64)
        u = uniforms(key, np.arange(n // 8), DRAFT, 16).reshape(-1, 2)
    assert _chi2(u[:, 0]) < CHI2_63_1E6
    assert _chi2(u[:, 1]) < CHI2_63_1E6
    # Pairs along the axis fill the unit square evenly (8 x 8 cells), and do not correlate.
    pair_cells = (u[:, 0] * 8).astype(np.int64) * 8 + (u[:, 1] * 8).astype(np.int64)
    assert _chi2(pair_cells / 64.0) < CHI2_63_1E6
    assert abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 5.0 / np.sqrt(u.shape[0])


def test_seeded_unseeded_and_boot_keys_never_coincide_for_the_same_number():
    assert len({request_key(3), unseeded_key(3, 0), unseeded_key(0, 3), boot_key(3)}) == 4


def test_addresses_outside_the_counter_layout_are_refused():
    key = np.array([request_key(1)], dtype=np.uint64)
    with pytest.raises(ValueError, match="positions"):
        uniforms(key, np.array([-1]), DRAFT, 1)
    with pytest.raises(ValueError, match="slots"):
        uniforms(key, np.array([0]), DRAFT, 300)
