/* Drafting and verification kernels: the loops over a row that numpy makes as several passes.
 *
 * sample_rows: inverse-CDF sampling of one index per row, with the CDF accumulated
 *   left to right in double, exactly as numpy's float64 cumsum accumulates it (so the
 *   same index, bit for bit, as `verification._sample_rows_numpy`), without materialising
 *   the CDF: one pass for the total, one for the count.
 * accept: token and block verification's accepted length per row; block's residual
 *   mass sum_x max(0, joint * p(x) - q(x)) formed element by element in p's precision as
 *   numpy forms it (the float32 product of a float64 joint is computed in double and
 *   rounded), summed in double in one fused pass (four interleaved partial sums; numpy
 *   sums pairwise, so the totals agree to the last few bits, not bit for bit).
 * sample_correction / sample_support: the target's own token, its residual formed and
 *   sampled in two fused passes per row (`_correction`, `verify_support`'s draw).
 * support_accept: `verify_support`'s block rule on the draft support.
 * draft_slot: one slot of the drafter's boot-table walk (`DSparkDrafter._draft_tabulated`):
 *   the row's distribution, its inverse-CDF draw, the token and the next pair.
 * step_uniforms: a verify step's draws (`streams.step_uniforms`), SplitMix64 in integer arithmetic.
 * support_step: a whole verify step on the draft support (`verify_support` with the builtin target's
 *   rows): the accept rule, the target's row at each row's next position, its token, the tokens laid out.
 * target_rows: the builtin target's rows (`BuiltinModel.target_probs`): the bigram row, then the
 *   class bigram and trigram layers, float32 operations in numpy's order, one pass per row.
 * anchor_rows, anchor_logits, anchor_finish: the loops draft_block runs on a slot's rows without pair
 *   rows (below), each on its own, as the cross-architecture check (tests/kernels/harness.c) compares them.
 * row_index: one float32 row's inverse-CDF index as np.cumsum and searchsorted give it (a grammar's redraw).
 * draft_block: a whole drafted block (`DSparkDrafter._block_compiled`) in one call: per slot draft_slot's
 *   loop, then the rows without pair rows (the anchor token's candidates, the target there, the
 *   checkpoint's error uniforms in SplitMix64 integer arithmetic, the slot's error scale), their softmax
 *   with numpy's own ndtri, exp and row sums called on scratch arrays in between, their draw and next
 *   pair, and the block's candidates, target values and q written out. The GIL stays held, since
 *   those calls need it.
 *
 * Arrays arrive through the buffer protocol (numpy's), C-contiguous, with the dtypes
 * `verification` checks before calling; anything else stays on the numpy path. Built
 * without contraction of multiply-add, so every float operation rounds as numpy's does.
 * The GIL is released while a kernel runs (draft_block aside).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_kernels_core.h"

typedef struct {
    Py_buffer view;
    int held;
} Buf;

/* Read-only arrays of at least KEPT_MIN_BYTES (the boot tables, which every step passes again) keep
 * the buffer they export between calls, the last KEPT_SLOTS of them: a call finds them by identity
 * instead of asking numpy again (an export costs about as much as a small kernel's loop). A kept
 * buffer holds its array, so the array lives (and its data stays where it is) while it is kept.
 * Touched only with the GIL held. */
#define KEPT_SLOTS 48
#define KEPT_MIN_BYTES (16 * 1024)
static struct {
    PyObject *obj;
    Py_buffer view;
} kept[KEPT_SLOTS];
static int kept_next;

static int get_buf(PyObject *obj, Buf *b, const char *name, int writable) {
    if (!writable) {
        for (int i = 0; i < KEPT_SLOTS; i++)
            if (kept[i].obj == obj) {
                b->view = kept[i].view;
                b->held = 2;
                return 0;
            }
    }
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) != 0) {
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous%s array", name, writable ? " writable" : "");
        return -1;
    }
    b->held = 1;
    if (!writable && b->view.len >= KEPT_MIN_BYTES && b->view.obj == obj) {
        int slot = kept_next;
        kept_next = (kept_next + 1) % KEPT_SLOTS;
        if (kept[slot].obj != NULL) {
            kept[slot].obj = NULL;
            PyBuffer_Release(&kept[slot].view);
        }
        kept[slot].view = b->view;
        kept[slot].obj = obj;
        b->held = 2;  /* the slot owns the export now */
    }
    return 0;
}

static void release(Buf *b) {
    if (b->held == 1) PyBuffer_Release(&b->view);
    b->held = 0;
}

/* A kernel's array arguments, from position `first` of `args` on, into b[0..count) (those
 * from `writable` on writable); -1 with the error set. The caller releases all of them. */
static int get_arrays(PyObject *args, Py_ssize_t first, Buf *b, const char *const *names, int count, int writable) {
    if (PyTuple_GET_SIZE(args) != first + count) {
        PyErr_Format(PyExc_TypeError, "expected %zd arguments, got %zd", first + count, PyTuple_GET_SIZE(args));
        return -1;
    }
    for (int i = 0; i < count; i++)
        if (get_buf(PyTuple_GET_ITEM(args, first + i), &b[i], names[i], i >= writable)) return -1;
    return 0;
}

static void release_all(Buf *b, int count) {
    for (int i = 0; i < count; i++) release(&b[i]);
}

/* 'f' float32, 'd' float64, 'q' int64, 'i' int32; 0 for anything else. */
static char kind(const Buf *b) {
    const char *f = b->view.format ? b->view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (strcmp(f, "f") == 0 && b->view.itemsize == 4) return 'f';
    if (strcmp(f, "d") == 0 && b->view.itemsize == 8) return 'd';
    if ((strcmp(f, "q") == 0 || strcmp(f, "l") == 0) && b->view.itemsize == 8) return 'q';
    if ((strcmp(f, "i") == 0 || strcmp(f, "l") == 0) && b->view.itemsize == 4) return 'i';
    return 0;
}

/* sample_rows(dist (n, V) float32|float64, u (n,) float64, out (n,) int64) -> None.
 * out[r] = the index `_sample_rows` draws, or -1 for a row without positive mass
 * (the caller samples its fallback). */
static PyObject *sample_rows(PyObject *self, PyObject *args) {
    static const char *const names[3] = {"dist", "u", "out"};
    Buf b[3];
    memset(b, 0, sizeof(b));
    Buf dist, ub, out;
    PyObject *ret = NULL;
    if (get_arrays(args, 0, b, names, 3, 2)) goto done;
    dist = b[0], ub = b[1], out = b[2];
    char dk = kind(&dist);
    if (dist.view.ndim != 2 || (dk != 'f' && dk != 'd') || kind(&ub) != 'd' || kind(&out) != 'q' ||
        ub.view.ndim != 1 || out.view.ndim != 1 || ub.view.shape[0] != dist.view.shape[0] ||
        out.view.shape[0] != dist.view.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "sample_rows: dist (n, V) float32|float64, u (n,) float64, out (n,) int64");
        goto done;
    }
    Py_ssize_t n = dist.view.shape[0], vocab = dist.view.shape[1];
    const void *base = dist.view.buf;
    const double *u = (const double *)ub.view.buf;
    int64_t *idx = (int64_t *)out.view.buf;
    Py_BEGIN_ALLOW_THREADS
    k_sample_rows(dk == 'f', base, n, vocab, u, idx);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    release_all(b, 3);
    return ret;
}

/* Check p (B, k+1, V) and q (B, k, V) of one float dtype; returns the dtype kind or 0 (error set). */
static char check_pq(const Buf *p, const Buf *q, const char *fn) {
    char pk = kind(p);
    if ((pk == 'f' || pk == 'd') && kind(q) == pk && p->view.ndim == 3 && q->view.ndim == 3 &&
        q->view.shape[0] == p->view.shape[0] && q->view.shape[1] == p->view.shape[1] - 1 &&
        q->view.shape[2] == p->view.shape[2])
        return pk;
    PyErr_Format(PyExc_ValueError, "%s: p (B, k+1, V) and q (B, k, V) of one float dtype", fn);
    return 0;
}

/* Check 1-D arrays of length n and the given kinds ('q' int64, 'd' float64). */
static int check_vectors(Buf *b, const char *kinds, int count, Py_ssize_t n, const char *fn) {
    for (int i = 0; i < count; i++)
        if (kind(&b[i]) != kinds[i] || b[i].view.ndim != 1 || b[i].view.shape[0] != n) {
            PyErr_Format(PyExc_ValueError, "%s: argument %d must be a 1-D %s array of length %zd", fn, i + 3,
                         kinds[i] == 'q' ? "int64" : "float64", n);
            return -1;
        }
    return 0;
}

/* accept(block, p, q, drafts (B, k) int64, rows (n,) int64, u (n, k) float64,
 *        tau (n,) int64, scale (n,) float64) -> None
 * The accepted length per row. block = 0: Leviathan et al.'s token rule, as
 * `verification._token_accept` tests it (draft i kept while p > 0 and u * q <= p), scale 1.
 * block = 1: Sun et al.'s block rule, as `verification._block_accept_scalar` reads it: the
 * prefix joint by its clamped running product, then the positions above the last sure
 * accept, highest first, the first passing one deciding; scale is the joint there. The
 * residual of a tested position is formed as `_residuals` forms it and summed in double. */
static PyObject *accept(PyObject *self, PyObject *args) {
    static const char *const names[7] = {"p", "q", "drafts", "rows", "u", "tau", "scale"};
    Buf b[7];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    double *joints = NULL;
    int is_block = PyTuple_GET_SIZE(args) > 0 ? PyObject_IsTrue(PyTuple_GET_ITEM(args, 0)) : 0;
    if (is_block < 0 || get_arrays(args, 1, b, names, 7, 5)) goto done;
    Buf *pb = &b[0], *qb = &b[1];
    char pk = check_pq(pb, qb, "accept");
    if (!pk) goto done;
    Py_ssize_t batch = pb->view.shape[0], kp1 = pb->view.shape[1], k = kp1 - 1, vocab = pb->view.shape[2];
    Py_ssize_t n = b[3].view.ndim == 1 ? b[3].view.shape[0] : -1;
    if (kind(&b[2]) != 'q' || b[2].view.ndim != 2 || b[2].view.shape[0] != batch || b[2].view.shape[1] != k ||
        kind(&b[4]) != 'd' || b[4].view.ndim != 2 || b[4].view.shape[0] != n || b[4].view.shape[1] != k) {
        PyErr_SetString(PyExc_ValueError, "accept: drafts (B, k) int64 and u (n, k) float64");
        goto done;
    }
    Buf vec[3] = {b[3], b[5], b[6]};
    if (check_vectors(vec, "qqd", 3, n, "accept")) goto done;
    const int64_t *rows = b[3].view.buf, *drafts = b[2].view.buf;
    for (Py_ssize_t j = 0; j < n; j++)
        if (rows[j] < 0 || rows[j] >= batch) {
            PyErr_SetString(PyExc_IndexError, "accept: a row is out of range");
            goto done;
        }
    for (Py_ssize_t j = 0; j < batch * k; j++)
        if (drafts[j] < 0 || drafts[j] >= vocab) {
            PyErr_SetString(PyExc_IndexError, "accept: a draft token is out of range");
            goto done;
        }
    joints = PyMem_Malloc((size_t)(k + 1) * sizeof(double));
    if (!joints) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *tau = b[5].view.buf;
    double *scale = b[6].view.buf;
    Py_BEGIN_ALLOW_THREADS
    k_accept(is_block, pk, b[0].view.buf, b[1].view.buf, kp1, vocab, drafts, rows, n, b[4].view.buf, tau, scale,
             joints);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyMem_Free(joints);
    release_all(b, 7);
    return ret;
}

/* sample_correction(p, q, rows (n,) int64, tau (n,) int64, scale (n,) float64,
 *                   u (n,) float64, out (n,) int64) -> None
 * The target's token for each row, as `verification._correction` draws it: from the
 * residual max(0, scale * p_tau - q_tau) (scale * p_k where tau == k), or from p_tau itself
 * where the residual has no mass, by inverse CDF with a float64 running sum. */
static PyObject *sample_correction(PyObject *self, PyObject *args) {
    static const char *const names[7] = {"p", "q", "rows", "tau", "scale", "u", "out"};
    Buf b[7];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    if (get_arrays(args, 0, b, names, 7, 6)) goto done;
    char pk = check_pq(&b[0], &b[1], "sample_correction");
    if (!pk) goto done;
    Py_ssize_t batch = b[0].view.shape[0], kp1 = b[0].view.shape[1], k = kp1 - 1, vocab = b[0].view.shape[2];
    Py_ssize_t n = b[2].view.ndim == 1 ? b[2].view.shape[0] : -1;
    if (check_vectors(&b[2], "qqddq", 5, n, "sample_correction")) goto done;
    const int64_t *rows = b[2].view.buf, *taus = b[3].view.buf;
    for (Py_ssize_t j = 0; j < n; j++)
        if (rows[j] < 0 || rows[j] >= batch || taus[j] < 0 || taus[j] > k) {
            PyErr_SetString(PyExc_IndexError, "sample_correction: a row or accepted length is out of range");
            goto done;
        }
    const double *scales = b[4].view.buf, *us = b[5].view.buf;
    int64_t *out = b[6].view.buf;
    Py_BEGIN_ALLOW_THREADS
    k_sample_correction(pk, b[0].view.buf, b[1].view.buf, kp1, vocab, rows, taus, scales, us, n, out);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    release_all(b, 7);
    return ret;
}

/* sample_support(rows (n, V) float32, scale (n,) float64, cols (n, K) int64, qv (n, K) float32,
 *                has_q (n,) int64, u (n,) float64, out (n,) int64) -> None
 * `verify_support`'s correction: row r's target row scaled by scale[r] (rounded to float32),
 * less the draft's q at its K support columns where has_q[r] (clamped at 0), sampled by
 * inverse CDF with a float64 running sum; where that leaves no mass, the target row itself.
 * The rows are read, never written. */
static PyObject *sample_support(PyObject *self, PyObject *args) {
    static const char *const names[7] = {"rows", "scale", "cols", "qv", "has_q", "u", "out"};
    Buf b[7];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    float *dense_q = NULL;
    if (get_arrays(args, 0, b, names, 7, 6)) goto done;
    Py_ssize_t n = b[0].view.ndim == 2 ? b[0].view.shape[0] : -1, vocab = n >= 0 ? b[0].view.shape[1] : 0;
    Py_ssize_t width = b[2].view.ndim == 2 ? b[2].view.shape[1] : -1;
    if (kind(&b[0]) != 'f' || n < 0 || kind(&b[2]) != 'q' || b[2].view.ndim != 2 || b[2].view.shape[0] != n ||
        kind(&b[3]) != 'f' || b[3].view.ndim != 2 || b[3].view.shape[0] != n || b[3].view.shape[1] != width) {
        PyErr_SetString(PyExc_ValueError, "sample_support: rows (n, V) float32, cols (n, K) int64, qv (n, K) float32");
        goto done;
    }
    Buf vec[4] = {b[1], b[4], b[5], b[6]};
    if (check_vectors(vec, "dqdq", 4, n, "sample_support")) goto done;
    const int64_t *cols = b[2].view.buf, *has_q = b[4].view.buf;
    for (Py_ssize_t j = 0; j < n * width; j++)
        if (cols[j] < 0 || cols[j] >= vocab) {
            PyErr_SetString(PyExc_IndexError, "sample_support: a support column is out of range");
            goto done;
        }
    dense_q = PyMem_Calloc(vocab > 0 ? (size_t)vocab : 1, sizeof(float));
    if (!dense_q) {
        PyErr_NoMemory();
        goto done;
    }
    const double *scales = b[1].view.buf, *us = b[5].view.buf;
    const float *qv = b[3].view.buf;
    int64_t *out = b[6].view.buf;
    Py_BEGIN_ALLOW_THREADS
    k_sample_support(b[0].view.buf, n, vocab, scales, cols, width, qv, has_q, us, out, dense_q);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyMem_Free(dense_q);
    release_all(b, 7);
    return ret;
}

/* support_accept(p_sup (B, k, K) float32, q_sup (B, k, K) float32, choice (B, k) int64,
 *                u (B, k) float64, tau (B,) int64, scale (B,) float64) -> None
 * `verify_support`'s block rule on the draft support: the prefix joint by its clamped
 * running product (`next_joint`, as `accept` forms it), the residual at a position as the mass the
 * target puts outside the support, times the joint, plus the support's clamped differences,
 * and the last passing position, found highest first. */
static PyObject *support_accept(PyObject *self, PyObject *args) {
    static const char *const names[6] = {"p_sup", "q_sup", "choice", "u", "tau", "scale"};
    Buf b[6];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    double *joints = NULL;
    if (get_arrays(args, 0, b, names, 6, 4)) goto done;
    Py_ssize_t batch = b[0].view.ndim == 3 ? b[0].view.shape[0] : -1;
    Py_ssize_t k = batch >= 0 ? b[0].view.shape[1] : 0, width = batch >= 0 ? b[0].view.shape[2] : 0;
    int ok = kind(&b[0]) == 'f' && batch >= 0 && kind(&b[1]) == 'f' && b[1].view.ndim == 3 &&
             b[1].view.shape[0] == batch && b[1].view.shape[1] == k && b[1].view.shape[2] == width;
    for (int i = 2; ok && i < 4; i++)
        ok = kind(&b[i]) == (i == 2 ? 'q' : 'd') && b[i].view.ndim == 2 && b[i].view.shape[0] == batch &&
             b[i].view.shape[1] == k;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "support_accept: p_sup and q_sup (B, k, K) float32, choice (B, k) int64, "
                                          "u (B, k) float64");
        goto done;
    }
    Buf vec[2] = {b[4], b[5]};
    if (check_vectors(vec, "qd", 2, batch, "support_accept")) goto done;
    const int64_t *choice = b[2].view.buf;
    for (Py_ssize_t j = 0; j < batch * k; j++)
        if (choice[j] < 0 || choice[j] >= width) {
            PyErr_SetString(PyExc_IndexError, "support_accept: a choice is out of range");
            goto done;
        }
    joints = PyMem_Malloc((size_t)(k + 1) * sizeof(double));
    if (!joints) {
        PyErr_NoMemory();
        goto done;
    }
    const float *ps = b[0].view.buf, *qs = b[1].view.buf;
    const double *us = b[3].view.buf;
    int64_t *tau = b[4].view.buf;
    double *scale = b[5].view.buf;
    Py_BEGIN_ALLOW_THREADS
    k_support_accept(ps, qs, batch, k, width, choice, us, tau, scale, joints);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyMem_Free(joints);
    release_all(b, 6);
    return ret;
}

/* draft_slot(table (M, K) float64, remap (M,) int32 or empty, over (R, K) float64,
 *            pair (B,) int64, u (B,) float64, argmax (B,) int64, cand (M*K,) int32,
 *            next (M*K,) int32, probs (B, K) float64, choice (B,) int64, token (B,) int64,
 *            nxt (B,) int64) -> int
 * One drafter slot for the rows whose context has pair rows (pair >= 0; other rows are
 * left as they are): the row's distribution from the boot table (or its override where
 * remap >= 0), the candidate drawn by inverse CDF as the drafter draws it (a running sum
 * left to right, the count of CDF values below u * total) or the first largest where
 * argmax is set, and the candidate's token and next pair. Returns how many rows have no pair
 * rows (pair < 0), the rows the caller fills in. */
static PyObject *draft_slot(PyObject *self, PyObject *args) {
    static const char *const names[12] = {"table", "remap", "over", "pair", "u", "argmax",
                                          "cand", "next", "probs", "choice", "token", "nxt"};
    Buf b[12];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    if (get_arrays(args, 0, b, names, 12, 8)) goto done;
    Py_ssize_t m = b[0].view.ndim == 2 ? b[0].view.shape[0] : -1, width = m >= 0 ? b[0].view.shape[1] : 0;
    Py_ssize_t batch = b[3].view.ndim == 1 ? b[3].view.shape[0] : -1;
    Py_ssize_t nremap = b[1].view.ndim == 1 ? b[1].view.shape[0] : -1, nover = b[2].view.ndim == 2 ? b[2].view.shape[0] : -1;
    int ok = kind(&b[0]) == 'd' && m >= 0 && batch >= 0 && kind(&b[1]) == 'i' && (nremap == 0 || nremap == m) &&
             kind(&b[2]) == 'd' && nover >= 0 && (nover == 0 || b[2].view.shape[1] == width) &&
             kind(&b[6]) == 'i' && kind(&b[7]) == 'i' && b[6].view.ndim == 1 && b[7].view.ndim == 1 &&
             b[6].view.shape[0] == m * width && b[7].view.shape[0] == m * width &&
             kind(&b[8]) == 'd' && b[8].view.ndim == 2 && b[8].view.shape[0] == batch && b[8].view.shape[1] == width;
    if (!ok || width < 1) {
        PyErr_SetString(PyExc_ValueError, "draft_slot: table (M, K) float64, remap (M,) or (0,) int32, over (R, K) "
                                          "float64, cand and next (M*K,) int32, probs (B, K) float64");
        goto done;
    }
    Buf vec[6] = {b[3], b[4], b[5], b[9], b[10], b[11]};
    if (check_vectors(vec, "qdqqqq", 6, batch, "draft_slot")) goto done;
    const int64_t *pair = b[3].view.buf, *argmax = b[5].view.buf;
    const int32_t *remap = b[1].view.buf;
    Py_ssize_t without = 0;
    for (Py_ssize_t j = 0; j < batch; j++) {
        if (pair[j] >= m || (pair[j] >= 0 && nremap && remap[pair[j]] >= nover)) {
            PyErr_SetString(PyExc_IndexError, "draft_slot: a pair or its override is out of range");
            goto done;
        }
        without += pair[j] < 0;
    }
    const double *table = b[0].view.buf, *over = b[2].view.buf, *u = b[4].view.buf;
    const int32_t *cand = b[6].view.buf, *next = b[7].view.buf;
    double *probs = b[8].view.buf;
    int64_t *choice = b[9].view.buf, *token = b[10].view.buf, *nxt = b[11].view.buf;
    Py_BEGIN_ALLOW_THREADS
    k_draft_slot(table, width, remap, nremap, over, pair, batch, u, argmax, cand, next, probs, choice, token, nxt);
    Py_END_ALLOW_THREADS
    ret = PyLong_FromSsize_t(without);
done:
    release_all(b, 12);
    return ret;
}

/* anchor_rows(rows (n,) int64, cls, prev2, prev (B,) int64, anchor_cand (V, K) int64, tri_keys (N,) int64,
 *             tri_p (N, K) float32, bi_p (C*V, K) float32, tri_logp (N, K) float64, bi_logp (C*V, K) float64,
 *             keep (C,) float64, cand (n, K) int64, p (n, K) float32, logp (n, K) float64, err (n, K) float64,
 *             miss_u (n,) float64, scale (n,) float64, vocab, slot, err_key, miss_key, noise, miss_noise) -> None.
 * Rows, classes and tokens are checked against the tables before the loop. */
static PyObject *anchor_rows(PyObject *self, PyObject *args) {
    enum { ARRAYS = 17, INPUTS = 11 };
    static const char *const names[ARRAYS] = {"rows", "cls", "prev2", "prev", "anchor_cand", "tri_keys", "tri_p",
                                              "bi_p", "tri_logp", "bi_logp", "keep", "cand", "p", "logp", "err",
                                              "miss_u", "scale"};
    Buf b[ARRAYS];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    long long vocab, slot;
    unsigned long long err_key, miss_key;
    double noise, miss_noise;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs != ARRAYS + 6) {
        PyErr_Format(PyExc_TypeError, "anchor_rows: expected %d arguments, got %zd", ARRAYS + 6, nargs);
        return NULL;
    }
    PyObject *tail = PyTuple_GetSlice(args, ARRAYS, ARRAYS + 6);
    if (tail == NULL) return NULL;
    int parsed = PyArg_ParseTuple(tail, "LLKKdd", &vocab, &slot, &err_key, &miss_key, &noise, &miss_noise);
    Py_DECREF(tail);
    if (!parsed) return NULL;
    PyObject *head = PyTuple_GetSlice(args, 0, ARRAYS);
    if (head == NULL) return NULL;
    int bad = get_arrays(head, 0, b, names, ARRAYS, INPUTS);
    Py_DECREF(head);
    if (bad) goto done;
    Py_ssize_t n = b[0].view.ndim == 1 ? b[0].view.shape[0] : -1, batch = b[1].view.ndim == 1 ? b[1].view.shape[0] : -1;
    Py_ssize_t width = b[4].view.ndim == 2 ? b[4].view.shape[1] : -1, nanchor = width >= 0 ? b[4].view.shape[0] : 0;
    Py_ssize_t ntri = b[5].view.ndim == 1 ? b[5].view.shape[0] : -1;
    Py_ssize_t nbi = b[7].view.ndim == 2 ? b[7].view.shape[0] : -1;
    Py_ssize_t nkeep = b[10].view.ndim == 1 ? b[10].view.shape[0] : -1;
    int ok = n >= 0 && batch >= 0 && width >= 1 && ntri >= 0 && nbi >= 0 && nkeep >= 0 && vocab > 0 && slot >= 0 &&
             slot < 16 && kind(&b[4]) == 'q' && kind(&b[5]) == 'q' && kind(&b[10]) == 'd';
    /* tri_p, bi_p float32 and tri_logp, bi_logp float64, (N, K) and (C*V, K). */
    for (int i = 6; ok && i < 10; i++)
        ok = b[i].view.ndim == 2 && b[i].view.shape[0] == (i % 2 == 0 ? ntri : nbi) && b[i].view.shape[1] == width &&
             kind(&b[i]) == (i < 8 ? 'f' : 'd');
    for (int i = 11; ok && i < 15; i++)
        ok = b[i].view.ndim == 2 && b[i].view.shape[0] == n && b[i].view.shape[1] == width &&
             kind(&b[i]) == (i == 11 ? 'q' : i == 12 ? 'f' : 'd');
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "anchor_rows: anchor_cand (V, K) int64, tri_keys (N,) int64, tri_p (N, K) "
                                          "float32, bi_p (C*V, K) float32, tri_logp and bi_logp float64 alike, keep "
                                          "(C,) float64, cand (n, K) int64, p (n, K) float32, logp and err (n, K) "
                                          "float64, 0 <= slot < 16");
        goto done;
    }
    Buf rows_vec[3] = {b[1], b[2], b[3]};
    Buf out_vec[3] = {b[0], b[15], b[16]};
    if (check_vectors(rows_vec, "qqq", 3, batch, "anchor_rows") || check_vectors(out_vec, "qdd", 3, n, "anchor_rows"))
        goto done;
    const int64_t *rows = b[0].view.buf, *cls = b[1].view.buf, *prev2 = b[2].view.buf, *prev = b[3].view.buf;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t r = rows[j];
        if (r < 0 || r >= batch || cls[r] < 0 || cls[r] >= nkeep || prev[r] < 0 || prev[r] >= nanchor ||
            prev[r] >= vocab || prev2[r] < 0 || prev2[r] >= vocab || (cls[r] * vocab + prev[r]) >= nbi) {
            PyErr_SetString(PyExc_IndexError, "anchor_rows: a row, class or token is out of the tables' range");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    k_anchor_rows(rows, cls, prev2, prev, n, vocab, slot, b[4].view.buf, width, b[5].view.buf, ntri, b[6].view.buf,
                  b[7].view.buf, b[8].view.buf, b[9].view.buf, (uint64_t)err_key, (uint64_t)miss_key, b[10].view.buf,
                  noise, miss_noise, b[11].view.buf, b[12].view.buf, b[13].view.buf, b[14].view.buf, b[15].view.buf,
                  b[16].view.buf);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    release_all(b, ARRAYS);
    return ret;
}

/* anchor_logits(logp (n, K) float64, z (n, K) float64, scale (n,) float64, out (n, K) float64, sharpness) -> None:
 * the drafter's softmax up to its exp, for anchor_rows' rows. */
static PyObject *anchor_logits(PyObject *self, PyObject *args) {
    static const char *const names[4] = {"logp", "z", "scale", "out"};
    Buf b[4];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    if (PyTuple_GET_SIZE(args) != 5) {
        PyErr_Format(PyExc_TypeError, "anchor_logits: expected 5 arguments, got %zd", PyTuple_GET_SIZE(args));
        return NULL;
    }
    double sharpness = PyFloat_AsDouble(PyTuple_GET_ITEM(args, 4));
    if (sharpness == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *head = PyTuple_GetSlice(args, 0, 4);
    if (head == NULL) return NULL;
    int bad = get_arrays(head, 0, b, names, 4, 3);
    Py_DECREF(head);
    if (bad) goto done;
    Py_ssize_t n = b[0].view.ndim == 2 ? b[0].view.shape[0] : -1, width = n >= 0 ? b[0].view.shape[1] : -1;
    int ok = n >= 0 && width >= 1 && kind(&b[0]) == 'd';
    for (int i = 1; ok && i < 4; i += 2)
        ok = kind(&b[i]) == 'd' && b[i].view.ndim == 2 && b[i].view.shape[0] == n && b[i].view.shape[1] == width;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "anchor_logits: logp, z and out (n, K) float64");
        goto done;
    }
    Buf vec[1] = {b[2]};
    if (check_vectors(vec, "d", 1, n, "anchor_logits")) goto done;
    Py_BEGIN_ALLOW_THREADS
    k_anchor_logits(b[0].view.buf, b[1].view.buf, b[2].view.buf, n, width, sharpness, b[3].view.buf);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    release_all(b, 4);
    return ret;
}

/* anchor_finish(rows (n,) int64, dist (n, K) float64, sums (n,) float64, u (B,) float64, argmax (B,) int64,
 *               cand (n, K) int64, anchor_next (C*V, K) int32, cls, prev (B,) int64, probs (B, K) float64, choice,
 *               token, nxt (B,) int64, vocab) -> None: anchor_rows' rows normalised, drawn and written into the
 *               slot's arrays. */
static PyObject *anchor_finish(PyObject *self, PyObject *args) {
    static const char *const names[13] = {"rows", "dist", "sums", "u", "argmax", "cand", "anchor_next", "cls", "prev",
                                          "probs", "choice", "token", "nxt"};
    Buf b[13];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    long long vocab;
    if (PyTuple_GET_SIZE(args) != 14) {
        PyErr_Format(PyExc_TypeError, "anchor_finish: expected 14 arguments, got %zd", PyTuple_GET_SIZE(args));
        return NULL;
    }
    vocab = PyLong_AsLongLong(PyTuple_GET_ITEM(args, 13));
    if (vocab == -1 && PyErr_Occurred()) return NULL;
    PyObject *head = PyTuple_GetSlice(args, 0, 13);
    if (head == NULL) return NULL;
    int bad = get_arrays(head, 0, b, names, 13, 9);
    Py_DECREF(head);
    if (bad) goto done;
    Py_ssize_t n = b[0].view.ndim == 1 ? b[0].view.shape[0] : -1, batch = b[3].view.ndim == 1 ? b[3].view.shape[0] : -1;
    Py_ssize_t width = b[1].view.ndim == 2 ? b[1].view.shape[1] : -1;
    Py_ssize_t nnext = b[6].view.ndim == 2 ? b[6].view.shape[0] : -1;
    int ok = n >= 0 && batch >= 0 && width >= 1 && vocab > 0 && kind(&b[1]) == 'd' && b[1].view.shape[0] == n &&
             kind(&b[5]) == 'q' && b[5].view.ndim == 2 && b[5].view.shape[0] == n && b[5].view.shape[1] == width &&
             kind(&b[6]) == 'i' && nnext >= 0 && b[6].view.shape[1] == width && kind(&b[9]) == 'd' &&
             b[9].view.ndim == 2 && b[9].view.shape[0] == batch && b[9].view.shape[1] == width;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "anchor_finish: dist (n, K) float64, cand (n, K) int64, anchor_next "
                                          "(C*V, K) int32, probs (B, K) float64");
        goto done;
    }
    Buf rows_vec[2] = {b[0], b[2]};
    Buf batch_vec[7] = {b[3], b[4], b[7], b[8], b[10], b[11], b[12]};
    if (check_vectors(rows_vec, "qd", 2, n, "anchor_finish") ||
        check_vectors(batch_vec, "dqqqqqq", 7, batch, "anchor_finish"))
        goto done;
    const int64_t *rows = b[0].view.buf, *cls = b[7].view.buf, *prev = b[8].view.buf;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t r = rows[j];
        if (r < 0 || r >= batch || cls[r] < 0 || prev[r] < 0 || prev[r] >= vocab || cls[r] * vocab + prev[r] >= nnext) {
            PyErr_SetString(PyExc_IndexError, "anchor_finish: a row, class or token is out of range");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    k_anchor_finish(rows, n, b[1].view.buf, b[2].view.buf, width, b[3].view.buf, b[4].view.buf, b[5].view.buf,
                    b[6].view.buf, cls, prev, vocab, b[9].view.buf, b[10].view.buf, b[11].view.buf, b[12].view.buf);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    release_all(b, 13);
    return ret;
}

/* target_rows(cls, c2, c1 (n,) int64, bigram (V, V) float32, bi_keys (N2,) int64, bi_indptr (N2 + 1,) int64,
 *             bi_cols int32, bi_ml float32, bi_lam (N2,) float32, tri_keys, tri_indptr, tri_cols, tri_ml, tri_lam,
 *             out (n, V) float32) -> None. Tokens, classes and the sparse rows are checked before the loop. */
static PyObject *target_rows(PyObject *self, PyObject *args) {
    static const char *const names[15] = {"cls", "c2", "c1", "bigram", "bi_keys", "bi_indptr", "bi_cols", "bi_ml",
                                          "bi_lam", "tri_keys", "tri_indptr", "tri_cols", "tri_ml", "tri_lam", "out"};
    Buf b[15];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    if (get_arrays(args, 0, b, names, 15, 14)) goto done;
    Py_ssize_t n = b[0].view.ndim == 1 ? b[0].view.shape[0] : -1;
    Py_ssize_t vocab = b[3].view.ndim == 2 ? b[3].view.shape[0] : -1;
    int ok = n >= 0 && vocab > 0 && b[3].view.shape[1] == vocab && kind(&b[3]) == 'f' && kind(&b[14]) == 'f' &&
             b[14].view.ndim == 2 && b[14].view.shape[0] == n && b[14].view.shape[1] == vocab;
    for (int layer = 0; ok && layer < 2; layer++) {
        Buf *l = &b[4 + 5 * layer];
        Py_ssize_t rows = l[0].view.ndim == 1 ? l[0].view.shape[0] : -1;
        ok = rows >= 0 && kind(&l[0]) == 'q' && kind(&l[1]) == 'q' && l[1].view.ndim == 1 &&
             l[1].view.shape[0] == rows + 1 && kind(&l[2]) == 'i' && kind(&l[3]) == 'f' && l[2].view.ndim == 1 &&
             l[3].view.ndim == 1 && l[2].view.shape[0] == l[3].view.shape[0] && kind(&l[4]) == 'f' &&
             l[4].view.ndim == 1 && l[4].view.shape[0] == rows;
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "target_rows: bigram (V, V) float32, per layer keys (N,) int64, indptr "
                                          "(N + 1,) int64, cols int32 and ml float32 inside the vocabulary, lam (N,) "
                                          "float32, out (n, V) float32");
        goto done;
    }
    Buf vec[3] = {b[0], b[1], b[2]};
    if (check_vectors(vec, "qqq", 3, n, "target_rows")) goto done;
    const int64_t *cls = b[0].view.buf, *c2 = b[1].view.buf, *c1 = b[2].view.buf;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (cls[j] < 0 || c2[j] < 0 || c2[j] >= vocab || c1[j] < 0 || c1[j] >= vocab) {
            PyErr_SetString(PyExc_IndexError, "target_rows: a class or token is out of range");
            goto done;
        }
        /* The contexts this row reads: their entries lie inside cols and ml and name vocabulary columns. */
        for (int layer = 0; layer < 2; layer++) {
            Buf *l = &b[4 + 5 * layer];
            int64_t key = layer == 0 ? cls[j] * vocab + c1[j] : (cls[j] * vocab + c2[j]) * vocab + c1[j];
            ptrdiff_t r = k_csr_row(l[0].view.buf, l[0].view.shape[0], key);
            if (r < 0) continue;
            const int64_t *indptr = l[1].view.buf;
            const int32_t *cols = l[2].view.buf;
            int good = indptr[r] >= 0 && indptr[r] <= indptr[r + 1] && indptr[r + 1] <= l[2].view.shape[0];
            for (int64_t f = indptr[r]; good && f < indptr[r + 1]; f++) good = cols[f] >= 0 && cols[f] < vocab;
            if (!good) {
                PyErr_SetString(PyExc_IndexError, "target_rows: a context's sparse row is out of range");
                goto done;
            }
        }
    }
    Py_BEGIN_ALLOW_THREADS
    k_target_rows(cls, c2, c1, n, vocab, b[3].view.buf, b[4].view.buf, b[4].view.shape[0], b[5].view.buf,
                  b[6].view.buf, b[7].view.buf, b[8].view.buf, b[9].view.buf, b[9].view.shape[0], b[10].view.buf,
                  b[11].view.buf, b[12].view.buf, b[13].view.buf, b[14].view.buf);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    release_all(b, 15);
    return ret;
}

/* support_step(block, p_sup (B, k, K) float32, q_sup (B, k, K) float32, choice (B, k) int64, u_accept (B, k) float64,
 *              u_sample (B,) float64, cand (B, k, K) int64, drafts (B, k) int64, cls (B,) int64, full (B, k + 2) int64,
 *              bigram, bi_keys, bi_indptr, bi_cols, bi_ml, bi_lam, tri_keys, tri_indptr, tri_cols, tri_ml, tri_lam
 *              (target_rows' tables), tau (B,) int64, tokens (B, k + 1) int64, scale (B,) float64) -> None.
 * A whole verify step on the draft support in one call: the accept rule (standard, or block as support_accept
 * forms it), the target's row at each row's next position, its correction token, and the tokens laid out. */
static PyObject *support_step(PyObject *self, PyObject *args) {
    enum { ARRAYS = 23, INPUTS = 20 };
    static const char *const names[ARRAYS] = {"p_sup", "q_sup", "choice", "u_accept", "u_sample", "cand", "drafts",
                                              "cls", "full", "bigram", "bi_keys", "bi_indptr", "bi_cols", "bi_ml",
                                              "bi_lam", "tri_keys", "tri_indptr", "tri_cols", "tri_ml", "tri_lam",
                                              "tau", "tokens", "scale"};
    Buf b[ARRAYS];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    double *joints = NULL;
    float *rowbuf = NULL, *dense_q = NULL;
    if (PyTuple_GET_SIZE(args) != ARRAYS + 1) {
        PyErr_Format(PyExc_TypeError, "support_step: expected %d arguments, got %zd", ARRAYS + 1, PyTuple_GET_SIZE(args));
        return NULL;
    }
    int is_block = PyObject_IsTrue(PyTuple_GET_ITEM(args, 0));
    if (is_block < 0) return NULL;
    PyObject *rest = PyTuple_GetSlice(args, 1, ARRAYS + 1);
    if (rest == NULL) return NULL;
    int bad = get_arrays(rest, 0, b, names, ARRAYS, INPUTS);
    Py_DECREF(rest);
    if (bad) goto done;
    Py_ssize_t batch = b[0].view.ndim == 3 ? b[0].view.shape[0] : -1, k = batch >= 0 ? b[0].view.shape[1] : 0;
    Py_ssize_t width = batch >= 0 ? b[0].view.shape[2] : 0;
    Py_ssize_t vocab = b[9].view.ndim == 2 ? b[9].view.shape[0] : -1;
    int ok = batch >= 0 && k >= 1 && width >= 1 && vocab > 0 && b[9].view.shape[1] == vocab && kind(&b[9]) == 'f' &&
             kind(&b[0]) == 'f' && kind(&b[1]) == 'f' && kind(&b[5]) == 'q';
    for (int i = 1; ok && i < 6; i += 4)  /* q_sup and cand: (B, k, K) */
        ok = b[i].view.ndim == 3 && b[i].view.shape[0] == batch && b[i].view.shape[1] == k && b[i].view.shape[2] == width;
    for (int i = 2; ok && i < 7; i++) {  /* choice, u_accept, drafts (B, k); u_sample (B,) */
        if (i == 4 || i == 5) continue;
        ok = b[i].view.ndim == 2 && b[i].view.shape[0] == batch && b[i].view.shape[1] == k &&
             kind(&b[i]) == (i == 3 ? 'd' : 'q');
    }
    ok = ok && kind(&b[8]) == 'q' && b[8].view.ndim == 2 && b[8].view.shape[0] == batch && b[8].view.shape[1] == k + 2 &&
         kind(&b[21]) == 'q' && b[21].view.ndim == 2 && b[21].view.shape[0] == batch && b[21].view.shape[1] == k + 1;
    for (int layer = 0; ok && layer < 2; layer++) {
        Buf *l = &b[10 + 5 * layer];
        Py_ssize_t rows = l[0].view.ndim == 1 ? l[0].view.shape[0] : -1;
        ok = rows >= 0 && kind(&l[0]) == 'q' && kind(&l[1]) == 'q' && l[1].view.ndim == 1 &&
             l[1].view.shape[0] == rows + 1 && kind(&l[2]) == 'i' && kind(&l[3]) == 'f' && l[2].view.ndim == 1 &&
             l[3].view.ndim == 1 && l[2].view.shape[0] == l[3].view.shape[0] && kind(&l[4]) == 'f' &&
             l[4].view.ndim == 1 && l[4].view.shape[0] == rows;
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "support_step: p_sup, q_sup (B, k, K) float32 with k >= 1, cand (B, k, K) "
                                          "int64, choice and drafts (B, k) int64, u_accept (B, k) float64, full "
                                          "(B, k + 2) int64, tokens (B, k + 1) int64, target_rows' tables");
        goto done;
    }
    Buf vec[4] = {b[4], b[7], b[20], b[22]};
    if (check_vectors(vec, "dqqd", 4, batch, "support_step")) goto done;
    const int64_t *choice = b[2].view.buf, *cand = b[5].view.buf, *cls = b[7].view.buf, *full = b[8].view.buf;
    for (Py_ssize_t j = 0; j < batch * k; j++)
        if (choice[j] < 0 || choice[j] >= width) {
            PyErr_SetString(PyExc_IndexError, "support_step: a drafted candidate is out of range");
            goto done;
        }
    for (Py_ssize_t j = 0; j < batch * k * width; j++)
        if (cand[j] < 0 || cand[j] >= vocab) {
            PyErr_SetString(PyExc_IndexError, "support_step: a support column is out of range");
            goto done;
        }
    for (Py_ssize_t j = 0; j < batch * (k + 2); j++)
        if (full[j] < 0 || full[j] >= vocab || (j % (k + 2) == 0 && cls[j / (k + 2)] < 0)) {
            PyErr_SetString(PyExc_IndexError, "support_step: a class or token is out of range");
            goto done;
        }
    joints = PyMem_Malloc((size_t)(k + 1) * sizeof(double));
    rowbuf = PyMem_Malloc((size_t)(batch > 0 ? batch : 1) * (size_t)vocab * sizeof(float));
    dense_q = PyMem_Calloc((size_t)GROUP * (size_t)vocab, sizeof(float));
    if (!joints || !rowbuf || !dense_q) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *tau = b[20].view.buf;
    double *scale = b[22].view.buf;
    if (is_block)
        k_support_accept(b[0].view.buf, b[1].view.buf, batch, k, width, choice, b[3].view.buf, tau, scale, joints);
    else
        k_support_standard(b[0].view.buf, b[1].view.buf, batch, k, width, choice, b[3].view.buf, tau, scale);
    /* The contexts the rows read next: their sparse entries lie inside cols and name vocabulary columns. */
    for (Py_ssize_t r = 0; r < batch; r++) {
        const int64_t *ctx = full + r * (k + 2) + tau[r];
        for (int layer = 0; layer < 2; layer++) {
            Buf *l = &b[10 + 5 * layer];
            int64_t key = layer == 0 ? cls[r] * vocab + ctx[1] : (cls[r] * vocab + ctx[0]) * vocab + ctx[1];
            ptrdiff_t row = k_csr_row(l[0].view.buf, l[0].view.shape[0], key);
            if (row < 0) continue;
            const int64_t *indptr = l[1].view.buf;
            const int32_t *cols = l[2].view.buf;
            int good = indptr[row] >= 0 && indptr[row] <= indptr[row + 1] && indptr[row + 1] <= l[2].view.shape[0];
            for (int64_t f = indptr[row]; good && f < indptr[row + 1]; f++) good = cols[f] >= 0 && cols[f] < vocab;
            if (!good) {
                PyErr_SetString(PyExc_IndexError, "support_step: a context's sparse row is out of range");
                goto done;
            }
        }
    }
    Py_BEGIN_ALLOW_THREADS
    k_support_emit(batch, k, width, b[1].view.buf, cand, b[6].view.buf, cls, full, b[4].view.buf, tau, scale, vocab,
                   b[9].view.buf, b[10].view.buf, b[10].view.shape[0], b[11].view.buf, b[12].view.buf, b[13].view.buf,
                   b[14].view.buf, b[15].view.buf, b[15].view.shape[0], b[16].view.buf, b[17].view.buf,
                   b[18].view.buf, b[19].view.buf, b[21].view.buf, rowbuf, dense_q);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyMem_Free(joints);
    PyMem_Free(rowbuf);
    PyMem_Free(dense_q);
    release_all(b, ARRAYS);
    return ret;
}

/* step_uniforms(keys (B,) uint64, positions (B,) int64, words (S,) uint64, out (B, S) float64) -> bool:
 * `streams.uniforms_at(keys, (positions << 16) | words)`, SplitMix64 counter-based, integer arithmetic;
 * False (out unwritten) where a position lies outside [0, 2**47). */
static PyObject *step_uniforms(PyObject *self, PyObject *args) {
    static const char *const names[4] = {"keys", "positions", "words", "out"};
    Buf b[4];
    memset(b, 0, sizeof(b));
    PyObject *ret = NULL;
    if (get_arrays(args, 0, b, names, 4, 3)) goto done;
    Py_ssize_t n = b[0].view.ndim == 1 ? b[0].view.shape[0] : -1, width = b[2].view.ndim == 1 ? b[2].view.shape[0] : -1;
    if (n < 0 || width < 0 || b[0].view.itemsize != 8 || b[2].view.itemsize != 8 || kind(&b[1]) != 'q' ||
        b[1].view.ndim != 1 || b[1].view.shape[0] != n || kind(&b[3]) != 'd' || b[3].view.ndim != 2 ||
        b[3].view.shape[0] != n || b[3].view.shape[1] != width) {
        PyErr_SetString(PyExc_ValueError, "step_uniforms: keys (B,) uint64, positions (B,) int64, words (S,) uint64, "
                                          "out (B, S) float64");
        goto done;
    }
    const uint64_t *keys = b[0].view.buf, *words = b[2].view.buf;
    const int64_t *pos = b[1].view.buf;
    double *out = b[3].view.buf;
    for (Py_ssize_t r = 0; r < n; r++)
        if (pos[r] < 0 || pos[r] >= ((int64_t)1 << 47)) {
            ret = Py_False;  /* a position outside the counter layout: the caller says which */
            Py_INCREF(ret);
            goto done;
        }
    for (Py_ssize_t r = 0; r < n; r++) {
        uint64_t base = (uint64_t)pos[r] << 16;
        for (Py_ssize_t j = 0; j < width; j++) out[r * width + j] = k_uniform(keys[r], base | words[j]);
    }
    ret = Py_True;
    Py_INCREF(ret);
done:
    release_all(b, 4);
    return ret;
}

/* row_index(row (V,) float32, u) -> int: `np.searchsorted(np.cumsum(row), u * cdf[-1], side="right")` clipped to
 * V - 1, as grammar.constrain_drafts redraws a draft: the running sum in float32 left to right (np.cumsum's),
 * the threshold and the comparisons in double (searchsorted's common type of a float32 CDF and a float64 key). */
static PyObject *row_index(PyObject *self, PyObject *args) {
    PyObject *obj;
    double u;
    if (!PyArg_ParseTuple(args, "Od", &obj, &u)) return NULL;
    Buf b;
    memset(&b, 0, sizeof(b));
    if (get_buf(obj, &b, "row", 0)) return NULL;
    PyObject *ret = NULL;
    if (kind(&b) != 'f' || b.view.ndim != 1 || b.view.shape[0] < 1) {
        PyErr_SetString(PyExc_ValueError, "row_index: row (V,) float32 with V >= 1");
        goto done;
    }
    const float *row = b.view.buf;
    Py_ssize_t vocab = b.view.shape[0], count = 0;
    float run = 0.0f;
    for (Py_ssize_t i = 0; i < vocab; i++) run = i ? run + row[i] : row[0];
    double threshold = u * (double)run;
    run = 0.0f;
    for (Py_ssize_t i = 0; i < vocab; i++) {
        run = i ? run + row[i] : row[0];
        count += (double)run <= threshold;
    }
    ret = PyLong_FromSsize_t(count < vocab ? count : vocab - 1);
done:
    release(&b);
    return ret;
}

/* One op of draft_block's (ndtri, exp, add.reduce), called on the first n rows of its scratch arrays:
 * fn(a[:n], 1, None, b[:n]) for the reduce (with_axis), fn(a[:n], b[:n]) otherwise; -1 with the error set. */
static int call_on_rows(PyObject *fn, PyObject *a, PyObject *b, Py_ssize_t n, int with_axis) {
    PyObject *an = PySequence_GetSlice(a, 0, n);
    PyObject *bn = an ? PySequence_GetSlice(b, 0, n) : NULL;
    PyObject *got = NULL;
    if (bn) {
        if (with_axis) {
            PyObject *axis = PyLong_FromLong(1);
            if (axis) got = PyObject_CallFunctionObjArgs(fn, an, axis, Py_None, bn, NULL);
            Py_XDECREF(axis);
        } else {
            got = PyObject_CallFunctionObjArgs(fn, an, bn, NULL);
        }
    }
    Py_XDECREF(an);
    Py_XDECREF(bn);
    if (got == NULL) return -1;
    Py_DECREF(got);
    return 0;
}

/* draft_block(tables (3k-tuple: table (M, K) float64, remap (M,) or (0,) int32, over (R, K) float64 per slot),
 *             keeps (k-tuple of (C,) float64), ops (ndtri, exp, add.reduce),
 *             pair_keys (M,) int64, cls, prev2, prev (B,) int64, u (k, B) float64, argmax (B,) int64,
 *             cand_flat, next_flat (M*K,) int32, cand_table (M, K) int32, p_table (M, K) float32,
 *             anchor_cand (V, K) int64, tri_keys (N,) int64, tri_p (N, K) float32, bi_p (C*V, K) float32,
 *             tri_logp (N, K) float64, bi_logp (C*V, K) float64, anchor_next (C*V, K) int32,
 *             err, z, logits (B, K) float64 and sums (B,) float64 (scratch the ops write),
 *             tokens (B, k) int64, cand (B, k, K) int64, p (B, k, K) float32, q (B, k, K) float32,
 *             choice (B, k) int64, vocab, err_key, miss_key, noise, miss_noise, sharpness) -> None.
 * A whole drafted block (`DSparkDrafter._draft_tabulated` on the kernels) in one call: the rows' first pair
 * looked up in pair_keys, then per slot draft_slot, anchor_rows on the rows without pair rows, numpy's ndtri,
 * anchor_logits, numpy's exp and row sums, anchor_finish, and the slot's candidates, target values and q
 * (the distribution as float32, one-hot at the choice where argmax is set) written into the block. The ops
 * are numpy's own functions on the scratch arrays' first rows, so every value is the numpy path's. */
static PyObject *draft_block(PyObject *self, PyObject *args) {
    enum { HEAD = 3, ARRAYS = 26, INPUTS = 17, SCALARS = 6 };
    static const char *const names[ARRAYS] = {
        "pair_keys", "cls", "prev2", "prev", "u", "argmax", "cand_flat", "next_flat", "cand_table", "p_table",
        "anchor_cand", "tri_keys", "tri_p", "bi_p", "tri_logp", "bi_logp", "anchor_next", "err", "z", "logits",
        "sums", "tokens", "cand", "p", "q", "choice"};
    Buf b[ARRAYS], st[3 * 16], kb[16];
    memset(b, 0, sizeof(b));
    memset(st, 0, sizeof(st));
    memset(kb, 0, sizeof(kb));
    PyObject *ret = NULL;
    char *scratch = NULL;
    Py_ssize_t k = 0;
    long long vocab;
    unsigned long long err_key, miss_key;
    double noise, miss_noise, sharpness;
    if (PyTuple_GET_SIZE(args) != HEAD + ARRAYS + SCALARS) {
        PyErr_Format(PyExc_TypeError, "draft_block: expected %d arguments, got %zd", HEAD + ARRAYS + SCALARS,
                     PyTuple_GET_SIZE(args));
        return NULL;
    }
    PyObject *tables = PyTuple_GET_ITEM(args, 0), *keeps = PyTuple_GET_ITEM(args, 1), *ops = PyTuple_GET_ITEM(args, 2);
    if (!PyTuple_Check(keeps) || !PyTuple_Check(tables) || !PyTuple_Check(ops) || PyTuple_GET_SIZE(ops) != 3 ||
        (k = PyTuple_GET_SIZE(keeps)) < 1 || k > 16 || PyTuple_GET_SIZE(tables) != 3 * k) {
        PyErr_SetString(PyExc_TypeError, "draft_block: tables a 3k-tuple, keeps a k-tuple (1 <= k <= 16), ops a "
                                         "3-tuple (ndtri, exp, add.reduce)");
        return NULL;
    }
    PyObject *tail = PyTuple_GetSlice(args, HEAD + ARRAYS, HEAD + ARRAYS + SCALARS);
    if (tail == NULL) return NULL;
    int parsed = PyArg_ParseTuple(tail, "LKKddd", &vocab, &err_key, &miss_key, &noise, &miss_noise, &sharpness);
    Py_DECREF(tail);
    if (!parsed) return NULL;
    PyObject *mid = PyTuple_GetSlice(args, HEAD, HEAD + ARRAYS);
    if (mid == NULL) return NULL;
    int bad = get_arrays(mid, 0, b, names, ARRAYS, INPUTS);
    Py_DECREF(mid);
    if (bad) goto done;
    for (Py_ssize_t i = 0; i < 3 * k; i++)
        if (get_buf(PyTuple_GET_ITEM(tables, i), &st[i], i % 3 == 0 ? "table" : i % 3 == 1 ? "remap" : "over", 0))
            goto done;
    for (Py_ssize_t i = 0; i < k; i++)
        if (get_buf(PyTuple_GET_ITEM(keeps, i), &kb[i], "keep", 0)) goto done;
    Py_ssize_t m = b[0].view.ndim == 1 ? b[0].view.shape[0] : -1, batch = b[1].view.ndim == 1 ? b[1].view.shape[0] : -1;
    Py_ssize_t width = b[8].view.ndim == 2 ? b[8].view.shape[1] : -1;
    Py_ssize_t nanchor = b[10].view.ndim == 2 ? b[10].view.shape[0] : -1, ntri = b[11].view.ndim == 1 ? b[11].view.shape[0] : -1;
    Py_ssize_t nbi = b[13].view.ndim == 2 ? b[13].view.shape[0] : -1, nnext = b[16].view.ndim == 2 ? b[16].view.shape[0] : -1;
    Py_ssize_t nkeep = kb[0].view.ndim == 1 ? kb[0].view.shape[0] : -1;
    /* Each array's kind and shape: (rows, cols) with -1 for a 1-D array and -2 for a 3-D (B, k, K) one. */
    const struct { int i; char kind; Py_ssize_t rows, cols; } shapes[] = {
        {0, 'q', m, -1}, {4, 'd', k, batch}, {6, 'i', m * width, -1}, {7, 'i', m * width, -1}, {8, 'i', m, width},
        {9, 'f', m, width}, {10, 'q', nanchor, width}, {11, 'q', ntri, -1}, {12, 'f', ntri, width},
        {13, 'f', nbi, width}, {14, 'd', ntri, width}, {15, 'd', nbi, width}, {16, 'i', nnext, width},
        {17, 'd', batch, width}, {18, 'd', batch, width}, {19, 'd', batch, width}, {20, 'd', batch, -1},
        {21, 'q', batch, k}, {22, 'q', batch, -2}, {23, 'f', batch, -2}, {24, 'f', batch, -2}, {25, 'q', batch, k}};
    int ok = m >= 0 && batch >= 0 && width >= 1 && nanchor >= 0 && ntri >= 0 && nbi >= 0 && nnext >= 0 && nkeep >= 0 &&
             vocab > 0;
    for (size_t s = 0; ok && s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const Buf *a = &b[shapes[s].i];
        Py_ssize_t cols = shapes[s].cols;
        ok = kind(a) == shapes[s].kind && a->view.shape[0] == shapes[s].rows &&
             (cols == -1 ? a->view.ndim == 1
                         : cols == -2 ? a->view.ndim == 3 && a->view.shape[1] == k && a->view.shape[2] == width
                                      : a->view.ndim == 2 && a->view.shape[1] == cols);
    }
    for (Py_ssize_t s = 0; ok && s < k; s++) {
        const Buf *t = &st[3 * s], *r = &st[3 * s + 1], *o = &st[3 * s + 2];
        ok = kind(t) == 'd' && t->view.ndim == 2 && t->view.shape[0] == m && t->view.shape[1] == width &&
             kind(r) == 'i' && r->view.ndim == 1 && (r->view.shape[0] == 0 || r->view.shape[0] == m) &&
             kind(o) == 'd' && o->view.ndim == 2 && (o->view.shape[0] == 0 || o->view.shape[1] == width) &&
             kind(&kb[s]) == 'd' && kb[s].view.ndim == 1 && kb[s].view.shape[0] == nkeep;
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "draft_block: per slot a table (M, K) float64, remap (M,) or (0,) int32 and "
                                          "over (R, K) float64, keeps (C,) float64; u (k, B) float64; the boot tables "
                                          "as draft_slot and anchor_rows take them; scratch (B, K) float64; the block "
                                          "(B, k), (B, k, K)");
        goto done;
    }
    Buf vec[4] = {b[1], b[2], b[3], b[5]};
    if (check_vectors(vec, "qqqq", 4, batch, "draft_block")) goto done;
    const int64_t *cls = b[1].view.buf, *argmax = b[5].view.buf, *pair_keys = b[0].view.buf;
    const double *u = b[4].view.buf;
    const int32_t *cand_flat = b[6].view.buf, *next_flat = b[7].view.buf, *cand_table = b[8].view.buf;
    const float *p_table = b[9].view.buf;
    const int32_t *anchor_next = b[16].view.buf;
    double *err = b[17].view.buf, *z = b[18].view.buf, *logits = b[19].view.buf, *sums = b[20].view.buf;
    int64_t *tokens_out = b[21].view.buf, *cand_out = b[22].view.buf, *choice_out = b[25].view.buf;
    float *p_out = b[23].view.buf, *q_out = b[24].view.buf;
    for (Py_ssize_t j = 0; j < batch; j++) {
        const int64_t *p2 = b[2].view.buf, *p1 = b[3].view.buf;
        if (cls[j] < 0 || cls[j] >= nkeep || p2[j] < 0 || p2[j] >= vocab || p1[j] < 0 || p1[j] >= vocab) {
            PyErr_SetString(PyExc_IndexError, "draft_block: a class or token is out of the tables' range");
            goto done;
        }
    }
    /* Per row: pair, next pair, the two last tokens, token, choice, anchor rows (int64), then the slot's
     * distribution, the anchor rows' candidates, log-target, target, miss uniform and scale. */
    size_t ints = (size_t)(batch > 0 ? batch : 1), cells = ints * (size_t)width;
    scratch = PyMem_Malloc(ints * 7 * sizeof(int64_t) + cells * (2 * sizeof(double) + sizeof(int64_t) + sizeof(float)) +
                           ints * 2 * sizeof(double));
    if (!scratch) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *pair = (int64_t *)scratch, *nxt = pair + ints, *prev2 = nxt + ints, *prev = prev2 + ints;
    int64_t *token = prev + ints, *choice = token + ints, *rows = choice + ints;
    double *probs = (double *)(rows + ints), *a_logp = probs + cells;
    int64_t *a_cand = (int64_t *)(a_logp + cells);
    double *a_miss = (double *)(a_cand + cells), *a_scale = a_miss + ints;
    float *a_p = (float *)(a_scale + ints);
    memcpy(prev2, b[2].view.buf, ints * sizeof(int64_t));
    memcpy(prev, b[3].view.buf, ints * sizeof(int64_t));
    for (Py_ssize_t j = 0; j < batch; j++)
        pair[j] = k_csr_row(pair_keys, m, (cls[j] * vocab + prev2[j]) * vocab + prev[j]);
    PyObject *ndtri_fn = PyTuple_GET_ITEM(ops, 0), *exp_fn = PyTuple_GET_ITEM(ops, 1), *sum_fn = PyTuple_GET_ITEM(ops, 2);
    PyObject *err_obj = PyTuple_GET_ITEM(args, HEAD + 17), *z_obj = PyTuple_GET_ITEM(args, HEAD + 18);
    PyObject *logits_obj = PyTuple_GET_ITEM(args, HEAD + 19), *sums_obj = PyTuple_GET_ITEM(args, HEAD + 20);
    for (Py_ssize_t s = 0; s < k; s++) {
        const Buf *t = &st[3 * s], *r = &st[3 * s + 1], *o = &st[3 * s + 2];
        Py_ssize_t nremap = r->view.shape[0], nover = o->view.shape[0];
        const int32_t *remap = r->view.buf;
        Py_ssize_t n = 0;
        for (Py_ssize_t j = 0; j < batch; j++) {
            if (pair[j] < -1 || pair[j] >= m || (pair[j] >= 0 && nremap && remap[pair[j]] >= nover)) {
                PyErr_SetString(PyExc_IndexError, "draft_block: a pair or its override is out of range");
                goto done;
            }
            if (pair[j] < 0) {
                int64_t c = cls[j], a = prev[j];
                if (a < 0 || a >= vocab || a >= nanchor || prev2[j] < 0 || prev2[j] >= vocab || c * vocab + a >= nbi ||
                    c * vocab + a >= nnext) {
                    PyErr_SetString(PyExc_IndexError, "draft_block: a row's class or token is out of the tables' range");
                    goto done;
                }
                rows[n++] = j;
            }
        }
        const double *us = u + s * batch;
        k_draft_slot(t->view.buf, width, remap, nremap, o->view.buf, pair, batch, us, argmax, cand_flat, next_flat,
                     probs, choice, token, nxt);
        if (n) {
            k_anchor_rows(rows, cls, prev2, prev, n, vocab, s, b[10].view.buf, width, b[11].view.buf, ntri,
                          b[12].view.buf, b[13].view.buf, b[14].view.buf, b[15].view.buf, (uint64_t)err_key,
                          (uint64_t)miss_key, kb[s].view.buf, noise, miss_noise, a_cand, a_p, a_logp, err, a_miss,
                          a_scale);
            if (call_on_rows(ndtri_fn, err_obj, z_obj, n, 0)) goto done;
            k_anchor_logits(a_logp, z, a_scale, n, width, sharpness, logits);
            if (call_on_rows(exp_fn, logits_obj, logits_obj, n, 0) || call_on_rows(sum_fn, logits_obj, sums_obj, n, 1))
                goto done;
            k_anchor_finish(rows, n, logits, sums, width, us, argmax, a_cand, anchor_next, cls, prev, vocab, probs,
                            choice, token, nxt);
        }
        /* The slot's column of the block: the table row's candidates and target values, or the anchor row's. */
        for (Py_ssize_t j = 0, a = 0; j < batch; j++) {
            if (token[j] < 0 || token[j] >= vocab || nxt[j] < -1 || nxt[j] >= m) {
                PyErr_SetString(PyExc_IndexError, "draft_block: a drafted token or its next pair is out of range");
                goto done;
            }
            Py_ssize_t at = (j * k + s) * width;
            tokens_out[j * k + s] = token[j];
            choice_out[j * k + s] = choice[j];
            if (pair[j] >= 0) {
                for (Py_ssize_t x = 0; x < width; x++) {
                    cand_out[at + x] = cand_table[pair[j] * width + x];
                    p_out[at + x] = p_table[pair[j] * width + x];
                }
            } else {
                memcpy(cand_out + at, a_cand + a * width, (size_t)width * sizeof(int64_t));
                memcpy(p_out + at, a_p + a * width, (size_t)width * sizeof(float));
                a++;
            }
            for (Py_ssize_t x = 0; x < width; x++)
                q_out[at + x] = argmax[j] ? (float)(x == choice[j]) : (float)probs[j * width + x];
        }
        int64_t *swap = pair;
        pair = nxt;
        nxt = swap;
        memcpy(prev2, prev, ints * sizeof(int64_t));
        memcpy(prev, token, ints * sizeof(int64_t));
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyMem_Free(scratch);
    release_all(b, ARRAYS);
    release_all(st, (int)(3 * k));
    release_all(kb, (int)k);
    return ret;
}

static PyMethodDef methods[] = {
    {"sample_rows", sample_rows, METH_VARARGS, "Inverse-CDF index per row (numpy's float64 cumsum, fused)."},
    {"row_index", row_index, METH_VARARGS, "A float32 row's inverse-CDF index (np.cumsum, then searchsorted right)."},
    {"accept", accept, METH_VARARGS, "Token or block verification's accepted length (and prefix joint) per row."},
    {"sample_correction", sample_correction, METH_VARARGS, "The target's correction token per row."},
    {"sample_support", sample_support, METH_VARARGS, "verify_support's correction token per row."},
    {"support_accept", support_accept, METH_VARARGS, "verify_support's block rule: accepted length and joint."},
    {"draft_slot", draft_slot, METH_VARARGS, "One drafter slot from the boot tables: distribution, draw, token, next."},
    {"step_uniforms", step_uniforms, METH_VARARGS, "A verify step's uniforms: SplitMix64 at (position, use, slot)."},
    {"support_step", support_step, METH_VARARGS, "A verify step on the draft support: accept, target row, token."},
    {"target_rows", target_rows, METH_VARARGS, "The builtin target's rows: bigram row, class bigram, trigram layers."},
    {"anchor_rows", anchor_rows, METH_VARARGS, "A drafter slot's rows without pair rows, up to their error's ndtri."},
    {"anchor_logits", anchor_logits, METH_VARARGS, "The drafter's softmax up to its exp, for anchor_rows' rows."},
    {"anchor_finish", anchor_finish, METH_VARARGS, "anchor_rows' rows normalised and drawn: choice, token, next pair."},
    {"draft_block", draft_block, METH_VARARGS, "A whole drafted block from the boot tables: every slot in one call."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "Verification kernels (see _kernels.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
