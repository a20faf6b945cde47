"""The kernels on aarch64 (the GB300's Grace CPU): the same C source cross-compiled with Debian's
gcc-aarch64-linux-gnu and run under qemu-user-static, against what the extension computes on this machine.

`tests/kernels/harness.c` runs each kernel's plain-C loop (`gb300lane/spec/_kernels_core.h`, the code the
extension calls) on arrays read from a file and writes them back; it is built twice, natively and for aarch64
(static, so qemu needs no aarch64 libraries), and fed the same inputs the extension is given here. Every output
must be the same bit for bit on both architectures and equal to the extension's (whose agreement with numpy
`tests/test_spec_kernels.py` checks): compiled without contraction of multiply-add, every operation is the same
IEEE operation on either CPU. Marked `aarch64` (integration tier): the cross compiler and qemu must be present
(`bash .ci/run` installs them), else the test fails with the fix unless GB300LANE_SKIP_AARCH64=1.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from gb300lane.spec import kernels

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "tests" / "kernels" / "harness.c"
#: The extension's own flags (setup.py), so the harness rounds as it does.
CFLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-std=c11", "-Wall", "-Wextra", "-Werror"]
CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int64): 2, np.dtype(np.int32): 3}
DTYPES = {v: k for k, v in CODES.items()}

pytestmark = pytest.mark.aarch64


def _write(path: Path, arrays: list[np.ndarray]) -> None:
    with path.open("wb") as f:
        f.write(np.int64(len(arrays)).tobytes())
        for a in arrays:
            f.write(np.array([CODES[a.dtype], a.ndim, *a.shape], dtype="<i8").tobytes())
            f.write(np.ascontiguousarray(a).tobytes())


def _read(path: Path) -> list[np.ndarray]:
    data, at, out = path.read_bytes(), 8, []
    for _ in range(int(np.frombuffer(data[:8], "<i8")[0])):
        code, ndim = np.frombuffer(data[at:at + 16], "<i8")
        shape = tuple(np.frombuffer(data[at + 16:at + 16 + 8 * ndim], "<i8"))
        at += 16 + 8 * int(ndim)
        dtype = DTYPES[int(code)]
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        out.append(np.frombuffer(data[at:at + size], dtype).reshape(shape))
        at += size
    return out


@pytest.fixture(scope="module")
def harnesses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    out = tmp_path_factory.mktemp("harness")
    native, arm = out / "harness-x86_64", out / "harness-aarch64"
    subprocess.run(["gcc", *CFLAGS, "-o", str(native), str(HARNESS), "-lm"], check=True, timeout=300)
    subprocess.run(["aarch64-linux-gnu-gcc", *CFLAGS, "-static", "-o", str(arm), str(HARNESS), "-lm"], check=True,
                   timeout=300)
    kind = subprocess.run(["file", "-b", str(arm)], capture_output=True, text=True, timeout=60).stdout
    assert "ARM aarch64" in kind and "statically linked" in kind, kind
    return {"x86_64": [str(native)], "aarch64": ["qemu-aarch64-static", str(arm)]}


def _dist(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    return rng.dirichlet(np.full(shape[-1], 0.3), size=shape[:-1]).astype(dtype)


def _cases() -> list[tuple[str, str, list[np.ndarray]]]:
    rng = np.random.default_rng(2026)
    cases = []
    for dtype in (np.float32, np.float64):
        for vocab in (1, 7, 64, 257):
            dist = _dist(rng, (9, vocab), dtype)
            dist[2] = 0  # a row without mass: -1
            cases.append(("sample_rows", f"{dtype.__name__}-V{vocab}",
                          [dist, rng.random(9), np.zeros(9, np.int64)]))
        batch, k, vocab = 6, 5, 130
        p, q = _dist(rng, (batch, k + 1, vocab), dtype), _dist(rng, (batch, k, vocab), dtype)
        q = (0.7 * p[:, :k] + 0.3 * q).astype(dtype)
        q[0, 1] = 0  # a draft the drafter gave no mass: divided by the floor
        drafts = rng.integers(0, vocab, (batch, k)).astype(np.int64)
        rows = np.array([0, 1, 2, 3, 4, 5, 1, 3], np.int64)
        for block in (0, 1):
            cases.append(("accept", f"{dtype.__name__}-block{block}", [
                np.array([block], np.int64), p, q, drafts, rows, rng.random((rows.size, k)),
                np.zeros(rows.size, np.int64), np.zeros(rows.size)]))
        taus = rng.integers(0, k + 1, rows.size).astype(np.int64)
        cases.append(("sample_correction", dtype.__name__, [
            p, q, rows, taus, rng.uniform(0.2, 1.0, rows.size), rng.random(rows.size), np.zeros(rows.size, np.int64)]))
    n, vocab, width = 7, 90, 12
    cols = np.stack([rng.choice(vocab, width, replace=False) for _ in range(n)]).astype(np.int64)
    cases.append(("sample_support", "float32", [
        _dist(rng, (n, vocab), np.float32), rng.uniform(0.2, 1.0, n), cols, _dist(rng, (n, width), np.float32),
        np.array([1, 0, 1, 1, 0, 1, 1], np.int64), rng.random(n), np.zeros(n, np.int64)]))
    batch, k, width = 5, 4, 16
    cases.append(("support_accept", "float32", [
        (0.9 * _dist(rng, (batch, k, width), np.float64)).astype(np.float32), _dist(rng, (batch, k, width), np.float32),
        rng.integers(0, width, (batch, k)).astype(np.int64), rng.random((batch, k)), np.zeros(batch, np.int64),
        np.zeros(batch)]))
    m, width, batch = 11, 8, 9
    for remap in (np.zeros(0, np.int32), np.where(rng.random(m) < 0.3, rng.integers(0, 3, m), -1).astype(np.int32)):
        cases.append(("draft_slot", f"remap{remap.size}", [
            _dist(rng, (m, width), np.float64), remap, _dist(rng, (3, width), np.float64),
            np.array([0, 3, -1, 10, 5, 5, 2, -1, 7], np.int64), rng.random(batch),
            np.array([0, 1, 0, 0, 1, 0, 0, 0, 0], np.int64), rng.integers(0, 500, m * width).astype(np.int32),
            rng.integers(-1, m, m * width).astype(np.int32), np.zeros((batch, width)), np.full(batch, -7, np.int64),
            np.full(batch, -7, np.int64), np.full(batch, -7, np.int64)]))
    return cases


CASES = _cases()


@pytest.mark.parametrize(("kernel", "arrays"), [(c[0], c[2]) for c in CASES], ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_the_kernels_compute_the_same_bits_on_aarch64_as_on_x86_64(
    harnesses: dict[str, list[str]], tmp_path: Path, kernel: str, arrays: list[np.ndarray]
) -> None:
    built = kernels.active()
    assert built is not None, f"verification runs on {kernels.describe()}: the extension is the expected result here"
    expected = [a.copy() for a in arrays]
    args = [bool(expected[0][0]), *expected[1:]] if kernel == "accept" else expected
    getattr(built, kernel)(*args)
    _write(tmp_path / "in.bin", arrays)
    for arch, command in harnesses.items():
        out = tmp_path / f"out-{arch}.bin"
        done = subprocess.run([*command, kernel, str(tmp_path / "in.bin"), str(out)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"{arch}: {done.stderr}"
        got = _read(out)
        assert len(got) == len(expected)
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g.dtype == e.dtype and g.shape == e.shape, (arch, i)
            assert g.tobytes() == e.tobytes(), f"{arch}: {kernel} array {i} differs from the extension's:\n{g}\n{e}"
    # The cases reach the kernels' branches: some output moved off its initial value.
    moved = [not np.array_equal(e, a) for e, a in zip(expected, arrays)]
    assert any(moved), kernel
