"""The kernels on aarch64 (the GB300's Grace CPU): the same C source cross-compiled with Debian's
gcc-aarch64-linux-gnu and run under qemu-user-static, against what the extension computes on this machine.

`tests/kernels/harness.c` runs each kernel's plain-C loop (`gb300lane/spec/_kernels_core.h`, the code the
extension calls) on arrays read from a file and writes them back; it is built twice, natively and for aarch64
(static, so qemu needs no aarch64 libraries), and fed the same inputs the extension is given here. Every output
must be the same bit for bit on both architectures and equal to the extension's (whose agreement with numpy
`tests/spec/test_kernels.py` checks): compiled without contraction of multiply-add, every operation is the same
IEEE operation on either CPU. Marked `aarch64` (integration tier): the cross compiler and qemu must be present
(`bash .ci/run` installs them), else the test fails with the fix unless GB300LANE_SKIP_AARCH64=1.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from gb300lane.spec import kernels

ROOT = Path(__file__).resolve().parents[2]
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
        code, ndim = np.frombuffer(data[at : at + 16], "<i8")
        shape = tuple(np.frombuffer(data[at + 16 : at + 16 + 8 * ndim], "<i8"))
        at += 16 + 8 * int(ndim)
        dtype = DTYPES[int(code)]
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        out.append(np.frombuffer(data[at : at + size], dtype).reshape(shape))
        at += size
    return out


@pytest.fixture(scope="module")
def harnesses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    out = tmp_path_factory.mktemp("harness")
    native, arm = out / "harness-x86_64", out / "harness-aarch64"
    subprocess.run(["gcc", *CFLAGS, "-o", str(native), str(HARNESS), "-lm"], check=True, timeout=300)
    subprocess.run(
        ["aarch64-linux-gnu-gcc", *CFLAGS, "-static", "-o", str(arm), str(HARNESS), "-lm"], check=True, timeout=300
    )
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
            cases.append(("sample_rows", f"{dtype.__name__}-V{vocab}", [dist, rng.random(9), np.zeros(9, np.int64)]))
        batch, k, vocab = 6, 5, 130
        p, q = _dist(rng, (batch, k + 1, vocab), dtype), _dist(rng, (batch, k, vocab), dtype)
        q = (0.7 * p[:, :k] + 0.3 * q).astype(dtype)
        q[0, 1] = 0  # a draft the drafter gave no mass: divided by the floor
        drafts = rng.integers(0, vocab, (batch, k)).astype(np.int64)
        rows = np.array([0, 1, 2, 3, 4, 5, 1, 3], np.int64)
        for block in (0, 1):
            cases.append(
                (
                    "accept",
                    f"{dtype.__name__}-block{block}",
                    [
                        np.array([block], np.int64),
                        p,
                        q,
                        drafts,
                        rows,
                        rng.random((rows.size, k)),
                        np.zeros(rows.size, np.int64),
                        np.zeros(rows.size),
                    ],
                )
            )
        taus = rng.integers(0, k + 1, rows.size).astype(np.int64)
        cases.append(
            (
                "sample_correction",
                dtype.__name__,
                [
                    p,
                    q,
                    rows,
                    taus,
                    rng.uniform(0.2, 1.0, rows.size),
                    rng.random(rows.size),
                    np.zeros(rows.size, np.int64),
                ],
            )
        )
    n, vocab, width = 7, 90, 12
    cols = np.stack([rng.choice(vocab, width, replace=False) for _ in range(n)]).astype(np.int64)
    cases.append(
        (
            "sample_support",
            "float32",
            [
                _dist(rng, (n, vocab), np.float32),
                rng.uniform(0.2, 1.0, n),
                cols,
                _dist(rng, (n, width), np.float32),
                np.array([1, 0, 1, 1, 0, 1, 1], np.int64),
                rng.random(n),
                np.zeros(n, np.int64),
            ],
        )
    )
    batch, k, width = 5, 4, 16
    cases.append(
        (
            "support_accept",
            "float32",
            [
                (0.9 * _dist(rng, (batch, k, width), np.float64)).astype(np.float32),
                _dist(rng, (batch, k, width), np.float32),
                rng.integers(0, width, (batch, k)).astype(np.int64),
                rng.random((batch, k)),
                np.zeros(batch, np.int64),
                np.zeros(batch),
            ],
        )
    )
    m, width, batch = 11, 8, 9
    for remap in (np.zeros(0, np.int32), np.where(rng.random(m) < 0.3, rng.integers(0, 3, m), -1).astype(np.int32)):
        cases.append(
            (
                "draft_slot",
                f"remap{remap.size}",
                [
                    _dist(rng, (m, width), np.float64),
                    remap,
                    _dist(rng, (3, width), np.float64),
                    np.array([0, 3, -1, 10, 5, 5, 2, -1, 7], np.int64),
                    rng.random(batch),
                    np.array([0, 1, 0, 0, 1, 0, 0, 0, 0], np.int64),
                    rng.integers(0, 500, m * width).astype(np.int32),
                    rng.integers(-1, m, m * width).astype(np.int32),
                    np.zeros((batch, width)),
                    np.full(batch, -7, np.int64),
                    np.full(batch, -7, np.int64),
                    np.full(batch, -7, np.int64),
                ],
            )
        )
    cases.extend(_engine_cases(rng))
    return cases


def _target_tables(rng: np.random.Generator, classes: int, vocab: int) -> list[np.ndarray]:
    """A small builtin-style target: bigram rows, then class bigram and trigram layers as sorted sparse rows."""
    bigram = _dist(rng, (vocab, vocab), np.float32)
    layers = []
    for contexts in (classes * vocab, classes * vocab * vocab):
        keys = np.sort(rng.choice(contexts, size=min(contexts, 3 * vocab), replace=False)).astype(np.int64)
        lengths = rng.integers(0, 5, keys.size)
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        cols = np.concatenate([rng.choice(vocab, n, replace=False) for n in lengths]).astype(np.int32)
        layers += [
            keys,
            indptr,
            cols,
            rng.random(cols.size).astype(np.float32),
            rng.uniform(0.1, 0.9, keys.size).astype(np.float32),
        ]
    return [bigram, *layers]


def _engine_cases(rng: np.random.Generator) -> list[tuple[str, str, list[np.ndarray]]]:
    """The engine's drafting and verify-step kernels, on small tables of the shapes the engine passes."""
    cases = []
    classes, vocab, width, batch, k = 2, 12, 4, 6, 3
    tables = _target_tables(rng, classes, vocab)
    tri_keys = tables[6]
    cls = rng.integers(0, classes, batch).astype(np.int64)
    # Contexts the trigram layer has, and others.
    c2, c1 = rng.integers(0, vocab, batch).astype(np.int64), rng.integers(0, vocab, batch).astype(np.int64)
    c2[:3], c1[:3] = (tri_keys[:3] // vocab) % vocab, tri_keys[:3] % vocab
    cls[:3] = tri_keys[:3] // (vocab * vocab)
    cases.append(("target_rows", "tables", [cls, c2, c1, *tables, np.zeros((batch, vocab), np.float32)]))
    tri_p = _dist(rng, (tri_keys.size, width), np.float32)
    bi_p = _dist(rng, (classes * vocab, width), np.float32)
    logs = [np.log(np.maximum(t, 1e-30).astype(np.float64)) for t in (tri_p, bi_p)]
    rows = np.array([0, 2, 3, 5], np.int64)
    n = rows.size
    cases.append(
        (
            "anchor_rows",
            "slot2",
            [
                rows,
                cls,
                c2,
                c1,
                rng.integers(0, vocab, (vocab, width)).astype(np.int64),
                tri_keys,
                tri_p,
                bi_p,
                *logs,
                rng.uniform(0.3, 0.9, classes),
                np.zeros((n, width), np.int64),
                np.zeros((n, width), np.float32),
                np.zeros((n, width)),
                np.zeros((n, width)),
                np.zeros(n),
                np.zeros(n),
                np.array([vocab], np.int64),
                np.array([2], np.int64),
                np.array([0x5EED], np.int64),
                np.array([0xA77], np.int64),
                np.array([0.4]),
                np.array([2.5]),
            ],
        )
    )
    cases.append(
        (
            "anchor_logits",
            "scaled",
            [
                np.log(_dist(rng, (n, width), np.float64)),
                rng.standard_normal((n, width)),
                np.array([0.0, 0.4, 2.5, 0.4]),
                np.zeros((n, width)),
                np.array([1.3]),
            ],
        )
    )
    dist = rng.random((n, width)) + 0.01
    cases.append(
        (
            "anchor_finish",
            "rows",
            [
                rows,
                dist,
                dist.sum(axis=1),
                rng.random(batch),
                np.array([0, 1, 0, 0, 0, 0], np.int64),
                rng.integers(0, vocab, (n, width)).astype(np.int64),
                rng.integers(-1, 40, (classes * vocab, width)).astype(np.int32),
                cls,
                c1,
                np.zeros((batch, width)),
                np.full(batch, -7, np.int64),
                np.full(batch, -7, np.int64),
                np.full(batch, -7, np.int64),
                np.array([vocab], np.int64),
            ],
        )
    )
    for block in (0, 1):
        cand = np.stack([np.stack([rng.permutation(vocab)[:width] for _ in range(k)]) for _ in range(batch)])
        choice = rng.integers(0, width, (batch, k)).astype(np.int64)
        drafts = np.take_along_axis(cand, choice[:, :, None], axis=2)[:, :, 0].copy()
        full = np.concatenate([np.stack([c2, c1], axis=1), drafts], axis=1).astype(np.int64)
        p_sup = (0.9 * _dist(rng, (batch, k, width), np.float64)).astype(np.float32)
        cases.append(
            (
                "support_step",
                ("standard", "block")[block],
                [
                    np.array([block], np.int64),
                    p_sup,
                    _dist(rng, (batch, k, width), np.float32),
                    choice,
                    rng.random((batch, k)),
                    rng.random(batch),
                    cand.astype(np.int64),
                    drafts,
                    cls,
                    full,
                    *tables,
                    np.full(batch, -7, np.int64),
                    np.full((batch, k + 1), -7, np.int64),
                    np.zeros(batch),
                ],
            )
        )
    return cases


#: Kernels whose first array is their flag, and how many of their last arrays are scalars, as the
#: extension takes them (the harness reads every argument as an array).
FLAG_FIRST = {"accept", "support_step"}
TRAILING_SCALARS = {"anchor_rows": 6, "anchor_logits": 1, "anchor_finish": 1}


def _extension_args(kernel: str, arrays: list[np.ndarray]) -> list:
    args: list = list(arrays)
    if kernel in FLAG_FIRST:
        args[0] = bool(args[0][0])
    scalars = TRAILING_SCALARS.get(kernel, 0)
    if scalars:
        args[-scalars:] = [a.item() for a in args[-scalars:]]
    return args


CASES = _cases()


@pytest.mark.parametrize(("kernel", "arrays"), [(c[0], c[2]) for c in CASES], ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_the_kernels_compute_the_same_bits_on_aarch64_as_on_x86_64(
    harnesses: dict[str, list[str]], tmp_path: Path, kernel: str, arrays: list[np.ndarray]
) -> None:
    built = kernels.active()
    assert built is not None, f"verification runs on {kernels.describe()}: the extension is the expected result here"
    expected = [a.copy() for a in arrays]
    getattr(built, kernel)(*_extension_args(kernel, expected))
    _write(tmp_path / "in.bin", arrays)
    for arch, command in harnesses.items():
        out = tmp_path / f"out-{arch}.bin"
        done = subprocess.run(
            [*command, kernel, str(tmp_path / "in.bin"), str(out)], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{arch}: {done.stderr}"
        got = _read(out)
        assert len(got) == len(expected)
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g.dtype == e.dtype and g.shape == e.shape, (arch, i)
            assert g.tobytes() == e.tobytes(), f"{arch}: {kernel} array {i} differs from the extension's:\n{g}\n{e}"
    # The cases reach the kernels' branches: some output moved off its initial value.
    moved = [not np.array_equal(e, a) for e, a in zip(expected, arrays)]
    assert any(moved), kernel
