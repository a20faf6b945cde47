/* The kernels' arithmetic in plain C: every loop `_kernels.c` runs with the GIL released, over plain pointers.
 *
 * `_kernels.c` (the Python extension) checks its arguments and calls these; `tests/kernels_harness.c` calls
 * them without Python, so the same source is compiled and checked for x86-64 and aarch64 (a cross compiler and
 * qemu-user, `tests/test_spec_kernels_aarch64.py`). Built without contraction of multiply-add
 * (-ffp-contract=off), so every float operation rounds as numpy's does on either. Nothing here is x86-only
 * except the AVX2 clone of the residual loops, which the preprocessor keeps to x86-64 GCC.
 */
#ifndef GB300LANE_KERNELS_CORE_H
#define GB300LANE_KERNELS_CORE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Four rows at a time: each row's running sum is its own chain of dependent adds (the
 * order numpy's cumsum adds in), and interleaving four chains keeps the adder busy.
 * A short last group repeats its first row in the unused lanes. */
#define SAMPLE_GROUP(T)                                                                        \
    do {                                                                                       \
        const T *a = (const T *)base + r0 * vocab;                                             \
        const T *b = (const T *)base + (live > 1 ? r0 + 1 : r0) * vocab;                       \
        const T *c = (const T *)base + (live > 2 ? r0 + 2 : r0) * vocab;                       \
        const T *d = (const T *)base + (live > 3 ? r0 + 3 : r0) * vocab;                       \
        double ta = 0.0, tb = 0.0, tc = 0.0, td = 0.0;                                         \
        for (ptrdiff_t j = 0; j < vocab; j++) {                                               \
            ta += (double)a[j];                                                                \
            tb += (double)b[j];                                                                \
            tc += (double)c[j];                                                                \
            td += (double)d[j];                                                                \
        }                                                                                      \
        double total[4] = {ta, tb, tc, td};                                                    \
        double ha = u[r0] * ta, hb = u[live > 1 ? r0 + 1 : r0] * tb;                           \
        double hc = u[live > 2 ? r0 + 2 : r0] * tc, hd = u[live > 3 ? r0 + 3 : r0] * td;       \
        double ca = 0.0, cb = 0.0, cc = 0.0, cd = 0.0;                                         \
        int64_t na = 0, nb = 0, nc = 0, nd = 0;                                                \
        for (ptrdiff_t j = 0; j < vocab; j++) {                                               \
            ca += (double)a[j];                                                                \
            cb += (double)b[j];                                                                \
            cc += (double)c[j];                                                                \
            cd += (double)d[j];                                                                \
            na += ca <= ha;                                                                    \
            nb += cb <= hb;                                                                    \
            nc += cc <= hc;                                                                    \
            nd += cd <= hd;                                                                    \
        }                                                                                      \
        int64_t count[4] = {na, nb, nc, nd};                                                   \
        for (int g = 0; g < live; g++)                                                         \
            idx[r0 + g] = !(total[g] > 0.0) ? -1 : count[g] < vocab ? count[g] : vocab - 1;    \
    } while (0)
#define GROUP 4

/* max(d, 0) as arithmetic, so the loop has no branch (half of a residual's elements are
 * clamped, at random): (d + |d|) / 2 is d for d > 0 and 0 otherwise, exactly (doubling a
 * probability cannot overflow), and a NaN stays NaN, as np.maximum keeps it. */
#define RELU(d, ABS) (((d) + ABS(d)) * 0.5f)

/* The residual mass of one (p, q) row pair at `joint`, with numpy's element arithmetic
 * (float rows form the product in double and round it, then subtract and clamp in float),
 * in four partial sums (columns j mod 4), so the adds do not wait on each other. */
#define RESIDUAL(T, CAST, ABS)                                             \
    do {                                                                   \
        double s[4] = {0.0, 0.0, 0.0, 0.0};                                \
        ptrdiff_t j = 0;                                                  \
        for (; j + 4 <= vocab; j += 4)                                     \
            for (int g = 0; g < 4; g++) {                                  \
                T d = CAST((double)p[j + g] * joint) - q[j + g];           \
                s[g] += (double)RELU(d, ABS);                              \
            }                                                              \
        for (; j < vocab; j++) {                                           \
            T d = CAST((double)p[j] * joint) - q[j];                       \
            s[0] += (double)RELU(d, ABS);                                  \
        }                                                                  \
        return (s[0] + s[1]) + (s[2] + s[3]);                              \
    } while (0)

#define AS_FLOAT(x) ((float)(x))
#define AS_DOUBLE(x) (x)

/* On x86-64 the residual loops are also compiled for AVX2 (four doubles a step instead of SSE2's
 * two) and the loader picks the variant the CPU has; the arithmetic is the same IEEE operations. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WIDE __attribute__((target_clones("avx2", "default")))
#else
#define WIDE
#endif

WIDE static double residual_f(const float *p, const float *q, ptrdiff_t vocab, double joint) {
    RESIDUAL(float, AS_FLOAT, fabsf);
}

WIDE static double residual_d(const double *p, const double *q, ptrdiff_t vocab, double joint) {
    RESIDUAL(double, AS_DOUBLE, fabs);
}

/* One step of block verification's prefix joint, min(1, joint * p(x) / q(x)): 0 stays 0, a
 * draft the target gives no mass makes it 0, and a q of 0 divides by 1e-300 instead (the clamp
 * then gives 1, as an infinite ratio would). */
static inline double next_joint(double joint, double a, double b) {
    if (!(joint > 0.0)) return joint;
    if (a <= 0.0) return 0.0;
    double ratio = joint * a / (b > 1e-300 ? b : 1e-300);
    return ratio < 1.0 ? ratio : 1.0;
}

#define TOKEN_ROW(T)                                                                            \
    do {                                                                                        \
        const T *prow = (const T *)pbase + r * kp1 * vocab;                              \
        const T *qrow = (const T *)qbase + r * k * vocab;                                \
        ptrdiff_t t = 0;                                                                       \
        while (t < k) {                                                                         \
            double a = (double)prow[t * vocab + x[t]], b = (double)qrow[t * vocab + x[t]];      \
            if (!(a > 0.0 && uu[t] * b <= a)) break;                                            \
            t++;                                                                                \
        }                                                                                       \
        tau[j] = t;                                                                             \
        scale[j] = 1.0;                                                                         \
    } while (0)

#define BLOCK_ROW(T, RESID)                                                                     \
    do {                                                                                        \
        const T *prow = (const T *)pbase + r * kp1 * vocab;                              \
        const T *qrow = (const T *)qbase + r * k * vocab;                                \
        double joint = 1.0;                                                                     \
        joints[0] = 1.0;                                                                        \
        for (ptrdiff_t i = 0; i < k; i++)                                                      \
            joints[i + 1] = joint =                                                             \
                next_joint(joint, (double)prow[i * vocab + x[i]], (double)qrow[i * vocab + x[i]]); \
        ptrdiff_t t = 0;                                                                       \
        if (k > 0 && uu[k - 1] <= joints[k] && joints[k] > 0.0) {                               \
            t = k;                                                                              \
        } else {                                                                                \
            for (ptrdiff_t i = k - 1; i > 0; i--) {                                            \
                double pj = joints[i];                                                          \
                if (pj >= 1.0) {                                                                \
                    t = i;                                                                      \
                    break;                                                                      \
                }                                                                               \
                if (pj <= 0.0 || uu[i - 1] > pj) continue;                                      \
                double res = RESID(prow + i * vocab, qrow + i * vocab, vocab, pj);              \
                if (uu[i - 1] <= res / (res + 1.0 - pj)) {                                      \
                    t = i;                                                                      \
                    break;                                                                      \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        tau[j] = t;                                                                             \
        scale[j] = joints[t];                                                                   \
    } while (0)

/* One correction row's two passes: the total, then the count of CDF values at or below
 * u * total, over v_j = max(0, round(scale * p_j) - q_j) (q absent: the bonus row). */
#define CORRECTION_ROW(T, CAST, ABS)                                                  \
    do {                                                                              \
        double total = 0.0;                                                           \
        for (ptrdiff_t c = 0; c < vocab; c++) {                                      \
            T v = CAST((double)prow[c] * s);                                          \
            if (qrow) v = RELU(v - qrow[c], ABS);                                     \
            total += (double)v;                                                       \
        }                                                                             \
        if (!(total > 0.0)) {                                                         \
            /* No residual mass: the target's own row, as `_correction` falls back. */ \
            s = 1.0;                                                                  \
            qrow = NULL;                                                              \
            total = 0.0;                                                              \
            for (ptrdiff_t c = 0; c < vocab; c++) total += (double)prow[c];          \
        }                                                                             \
        double threshold = uu * total, cdf = 0.0;                                     \
        int64_t count = 0;                                                            \
        for (ptrdiff_t c = 0; c < vocab; c++) {                                      \
            T v = CAST((double)prow[c] * s);                                          \
            if (qrow) v = RELU(v - qrow[c], ABS);                                     \
            cdf += (double)v;                                                         \
            count += cdf <= threshold;                                                \
        }                                                                             \
        out[j] = count < vocab ? count : vocab - 1;                                   \
    } while (0)

/* sample_rows' loop: dist (n, vocab) of float32 (`is_float`) or float64, u (n,), idx (n,). */
static void k_sample_rows(int is_float, const void *base, ptrdiff_t n, ptrdiff_t vocab, const double *u, int64_t *idx) {
    for (ptrdiff_t r0 = 0; r0 < n; r0 += GROUP) {
        int live = n - r0 < GROUP ? (int)(n - r0) : GROUP;  /* a short last group repeats its first row */
        if (vocab == 0) {
            for (int g = 0; g < live; g++) idx[r0 + g] = -1;
        } else if (is_float) {
            SAMPLE_GROUP(float);
        } else {
            SAMPLE_GROUP(double);
        }
    }
}

/* accept's loop: p (B, k+1, vocab) and q (B, k, vocab) of float32 (pk 'f') or float64, drafts (B, k),
 * rows (n,), u (n, k); tau and scale (n,) written; joints has room for k + 1 doubles. */
static void k_accept(int is_block, char pk, const void *pbase, const void *qbase, ptrdiff_t kp1, ptrdiff_t vocab,
                     const int64_t *drafts, const int64_t *rows, ptrdiff_t n, const double *u, int64_t *tau,
                     double *scale, double *joints) {
    ptrdiff_t k = kp1 - 1;
    for (ptrdiff_t j = 0; j < n; j++) {
        ptrdiff_t r = rows[j];
        const int64_t *x = drafts + r * k;
        const double *uu = u + j * k;
        if (!is_block) {
            if (pk == 'f')
                TOKEN_ROW(float);
            else
                TOKEN_ROW(double);
        } else if (pk == 'f') {
            BLOCK_ROW(float, residual_f);
        } else {
            BLOCK_ROW(double, residual_d);
        }
    }
}

/* sample_correction's loop: p (B, k+1, vocab), q (B, k, vocab) of float32 (pk 'f') or float64, rows, taus,
 * scales, us (n,); out (n,) written. */
static void k_sample_correction(char pk, const void *pbase, const void *qbase, ptrdiff_t kp1, ptrdiff_t vocab,
                                const int64_t *rows, const int64_t *taus, const double *scales, const double *us,
                                ptrdiff_t n, int64_t *out) {
    ptrdiff_t k = kp1 - 1;
    for (ptrdiff_t j = 0; j < n; j++) {
        ptrdiff_t r = rows[j], t = taus[j];
        double s = scales[j], uu = us[j];
        if (vocab == 0) {
            out[j] = -1;
            continue;
        }
        if (pk == 'f') {
            const float *prow = (const float *)pbase + (r * kp1 + t) * vocab;
            const float *qrow = t < k ? (const float *)qbase + (r * k + t) * vocab : NULL;
            CORRECTION_ROW(float, AS_FLOAT, fabsf);
        } else {
            const double *prow = (const double *)pbase + (r * kp1 + t) * vocab;
            const double *qrow = t < k ? (const double *)qbase + (r * k + t) * vocab : NULL;
            CORRECTION_ROW(double, AS_DOUBLE, fabs);
        }
    }
}

/* sample_support's loop: rowsbuf (n, vocab) float32, scales (n,), cols (n, width), qv (n, width) float32,
 * has_q and us (n,); out (n,) written; dense_q: vocab zeroed floats of scratch (left zeroed). */
static void k_sample_support(const float *rowsbuf, ptrdiff_t n, ptrdiff_t vocab, const double *scales,
                             const int64_t *cols, ptrdiff_t width, const float *qv, const int64_t *has_q,
                             const double *us, int64_t *out, float *dense_q) {
    for (ptrdiff_t j = 0; j < n; j++) {
        const float *prow = rowsbuf + j * vocab;
        const int64_t *cj = cols + j * width;
        double s = scales[j], uu = us[j];
        if (vocab == 0) {
            out[j] = -1;
            continue;
        }
        /* The draft's q scattered into a zero row, so the correction reads it as `sample_correction`
         * reads a q row (zero off the support, where the target row is taken as it is). */
        const float *qrow = NULL;
        if (has_q[j]) {
            for (ptrdiff_t i = 0; i < width; i++) dense_q[cj[i]] = qv[j * width + i];
            qrow = dense_q;
        }
        CORRECTION_ROW(float, AS_FLOAT, fabsf);
        if (has_q[j])
            for (ptrdiff_t i = 0; i < width; i++) dense_q[cj[i]] = 0.0f;
    }
}

/* support_accept's loop: ps and qs (batch, k, width) float32, choice (batch, k), us (batch, k); tau and scale
 * (batch,) written; joints has room for k + 1 doubles. */
static void k_support_accept(const float *ps, const float *qs, ptrdiff_t batch, ptrdiff_t k, ptrdiff_t width,
                             const int64_t *choice, const double *us, int64_t *tau, double *scale, double *joints) {
    for (ptrdiff_t r = 0; r < batch; r++) {
        const float *pr = ps + r * k * width, *qr = qs + r * k * width;
        const int64_t *ch = choice + r * k;
        const double *u = us + r * k;
        double joint = 1.0;
        joints[0] = 1.0;
        for (ptrdiff_t i = 0; i < k; i++)
            joints[i + 1] = joint = next_joint(joint, (double)pr[i * width + ch[i]], (double)qr[i * width + ch[i]]);
        ptrdiff_t t = 0;
        for (ptrdiff_t i = k - 1; i >= 0; i--) {
            double pj = joints[i + 1];
            int pass;
            if (i == k - 1) {
                pass = u[i] <= pj && pj > 0.0;
            } else if (pj >= 1.0) {
                pass = 1;
            } else if (!(pj > 0.0) || !(u[i] <= pj)) {
                pass = 0;
            } else {
                const float *pn = pr + (i + 1) * width, *qn = qr + (i + 1) * width;
                double inside = 0.0, clamped = 0.0;
                for (ptrdiff_t c = 0; c < width; c++) {
                    double pc = (double)pn[c], d = pj * pc - (double)qn[c];
                    inside += pc;
                    clamped += d > 0.0 ? d : (d != d ? d : 0.0);
                }
                double outside = 1.0 - inside;
                double resid = pj * (outside > 0.0 ? outside : 0.0) + clamped;
                pass = u[i] <= resid / (resid + 1.0 - pj);
            }
            if (pass) {
                t = i + 1;
                break;
            }
        }
        tau[r] = t;
        scale[r] = joints[t];
    }
}

/* draft_slot's loop: table (m, width), remap (nremap,) (0: none), over (R, width), pair, u, argmax (batch,),
 * cand and next (m * width,); probs (batch, width), choice, token, nxt (batch,) written where pair >= 0. */
static void k_draft_slot(const double *table, ptrdiff_t width, const int32_t *remap, ptrdiff_t nremap,
                         const double *over, const int64_t *pair, ptrdiff_t batch, const double *u,
                         const int64_t *argmax, const int32_t *cand, const int32_t *next, double *probs,
                         int64_t *choice, int64_t *token, int64_t *nxt) {
    for (ptrdiff_t j = 0; j < batch; j++) {
        ptrdiff_t r = pair[j];
        if (r < 0) continue;
        const double *src = nremap && remap[r] >= 0 ? over + (ptrdiff_t)remap[r] * width : table + r * width;
        double *dst = probs + j * width;
        memcpy(dst, src, (size_t)width * sizeof(double));
        int64_t c = 0;
        if (argmax[j]) {
            /* np.argmax: the first largest, a NaN counting as largest. */
            double best = dst[0];
            for (ptrdiff_t x = 0; x < width && best == best; x++)
                if (dst[x] > best || dst[x] != dst[x]) {
                    best = dst[x];
                    c = x;
                }
        } else {
            double cdf[width > 0 ? width : 1];
            double run = 0.0;
            for (ptrdiff_t x = 0; x < width; x++) cdf[x] = run = run + dst[x];
            double threshold = u[j] * cdf[width - 1];
            for (ptrdiff_t x = 0; x < width; x++) c += cdf[x] < threshold;
        }
        choice[j] = c;
        token[j] = cand[r * width + c];
        nxt[j] = next[r * width + c];
    }
}

/* SplitMix64's finaliser (streams._mix), wrapping modulo 2**64 as numpy's uint64 arithmetic does. */
static inline uint64_t k_mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* streams.uniforms_at for one word: the top 53 bits of the mixed word as a double in [0, 1). */
static inline double k_uniform(uint64_t key, uint64_t word) {
    return (double)(k_mix(key + word * 0x9E3779B97F4A7C15ULL) >> 11) * (1.0 / 9007199254740992.0);
}

/* anchor_rows' loop (`DSparkDrafter._anchor_rows` before its ndtri and softmax), per row j of n (batch row
 * rows[j] of cls, prev2 and prev; the outputs are indexed by j):
 * key3 = (cls * V + prev2) * V + prev; the anchor token's candidates; the target there (the trigram
 * row of key3 where tri_keys has it, else the (cls, prev) bigram row) and its log (tabulated with numpy's
 * log at boot); the checkpoint's unit-error
 * uniforms at (key3, candidate, slot) clipped to [1e-12, 1 - 1e-12] and the miss uniform (`_errors`);
 * and the slot's error scale (noise where miss_u < keep[cls], else miss_noise). */
static void k_anchor_rows(const int64_t *rows, const int64_t *cls, const int64_t *prev2, const int64_t *prev,
                          ptrdiff_t n, int64_t vocab,
                          int64_t slot, const int64_t *anchor_cand, ptrdiff_t width, const int64_t *tri_keys,
                          ptrdiff_t ntri, const float *tri_p, const float *bi_p, const double *tri_logp,
                          const double *bi_logp, uint64_t err_key, uint64_t miss_key,
                          const double *keep, double noise, double miss_noise, int64_t *cand, float *p, double *logp,
                          double *err, double *miss_u, double *scale) {
    for (ptrdiff_t j = 0; j < n; j++) {
        int64_t r = rows[j], cj = cls[r], pj = prev[r];
        int64_t key3 = (cj * vocab + prev2[r]) * vocab + pj;
        /* _csr_lookup: searchsorted (left), clipped to the last row, kept where the key matches. */
        ptrdiff_t lo = 0, hi = ntri;
        while (lo < hi) {
            ptrdiff_t mid = lo + (hi - lo) / 2;
            if (tri_keys[mid] < key3) lo = mid + 1;
            else hi = mid;
        }
        if (lo > ntri - 1) lo = ntri - 1;
        int tri = ntri > 0 && tri_keys[lo] == key3;
        ptrdiff_t at = tri ? lo * width : (cj * vocab + pj) * width;
        const float *src = (tri ? tri_p : bi_p) + at;
        const double *lsrc = (tri ? tri_logp : bi_logp) + at;
        uint64_t ctx = ((uint64_t)key3 << 4) | (uint64_t)slot;
        uint64_t base = (ctx - (uint64_t)slot) * (uint64_t)vocab + (uint64_t)slot;
        for (ptrdiff_t x = 0; x < width; x++) {
            int64_t c = anchor_cand[pj * width + x];
            cand[j * width + x] = c;
            p[j * width + x] = src[x];
            logp[j * width + x] = lsrc[x];
            double u = k_uniform(err_key, ((uint64_t)c << 4) + base);
            if (u < 1e-12) u = 1e-12;
            if (u > 1.0 - 1e-12) u = 1.0 - 1e-12;
            err[j * width + x] = u;
        }
        double m = k_uniform(miss_key, ctx);
        miss_u[j] = m;
        scale[j] = m < keep[cj] ? noise : miss_noise;
    }
}

/* _csr_lookup for one key: its row in sorted keys[0..n), or -1 (searchsorted left, clipped, compared). */
static inline ptrdiff_t k_csr_row(const int64_t *keys, ptrdiff_t n, int64_t key) {
    if (n <= 0) return -1;
    ptrdiff_t lo = 0, hi = n;
    while (lo < hi) {
        ptrdiff_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    if (lo > n - 1) lo = n - 1;
    return keys[lo] == key ? lo : -1;
}

/* One interpolation layer on a row: row *= 1 - lam, then row[col] += lam * ml over the context's entries
 * (float32 throughout, as numpy's float32 operations round). */
static inline void k_layer(float *row, float lam, const int64_t *indptr, const int32_t *cols, const float *ml,
                           ptrdiff_t ctx, ptrdiff_t vocab) {
    float keep = 1.0f - lam;
    for (ptrdiff_t x = 0; x < vocab; x++) row[x] *= keep;
    for (int64_t f = indptr[ctx]; f < indptr[ctx + 1]; f++) row[cols[f]] += lam * ml[f];
}

/* BuiltinModel.target_probs' rows: per row the bigram row of c1, then the class bigram layer, then the
 * trigram layer, where the model has those contexts. */
static void k_target_rows(const int64_t *cls, const int64_t *c2, const int64_t *c1, ptrdiff_t n, int64_t vocab,
                          const float *bigram, const int64_t *bi_keys, ptrdiff_t nbi, const int64_t *bi_indptr,
                          const int32_t *bi_cols, const float *bi_ml, const float *bi_lam, const int64_t *tri_keys,
                          ptrdiff_t ntri, const int64_t *tri_indptr, const int32_t *tri_cols, const float *tri_ml,
                          const float *tri_lam, float *out) {
    for (ptrdiff_t j = 0; j < n; j++) {
        float *row = out + j * vocab;
        memcpy(row, bigram + c1[j] * vocab, (size_t)vocab * sizeof(float));
        int64_t base = cls[j] * vocab;
        ptrdiff_t b = k_csr_row(bi_keys, nbi, base + c1[j]);
        if (b >= 0) k_layer(row, bi_lam[b], bi_indptr, bi_cols, bi_ml, b, vocab);
        ptrdiff_t t = k_csr_row(tri_keys, ntri, (base + c2[j]) * vocab + c1[j]);
        if (t >= 0) k_layer(row, tri_lam[t], tri_indptr, tri_cols, tri_ml, t, vocab);
    }
}

/* The inverse-CDF draw of one distribution row (a running sum left to right, the count of CDF values
 * below u * total), or its first largest value where `argmax` is set: `drafter._draw` and draft_slot's. */
static inline int64_t k_draw(const double *row, ptrdiff_t width, double u, int argmax) {
    int64_t c = 0;
    if (argmax) {
        double best = row[0];
        for (ptrdiff_t x = 0; x < width && best == best; x++)
            if (row[x] > best || row[x] != row[x]) {
                best = row[x];
                c = x;
            }
        return c;
    }
    double cdf[width > 0 ? width : 1];
    double run = 0.0;
    for (ptrdiff_t x = 0; x < width; x++) cdf[x] = run = run + row[x];
    double threshold = u * cdf[width - 1];
    for (ptrdiff_t x = 0; x < width; x++) c += cdf[x] < threshold;
    return c;
}

/* The drafter's softmax up to its exp (`DSparkDrafter._softmax`): logits = sharpness * logp, plus
 * scale * z on every row when any row's scale is positive, less each row's largest logit. */
static void k_anchor_logits(const double *logp, const double *z, const double *scale, ptrdiff_t n, ptrdiff_t width,
                            double sharpness, double *out) {
    int any = 0;
    for (ptrdiff_t j = 0; j < n; j++) any |= scale[j] > 0.0;
    for (ptrdiff_t j = 0; j < n; j++) {
        double *row = out + j * width;
        for (ptrdiff_t x = 0; x < width; x++) row[x] = sharpness * logp[j * width + x];
        if (any)
            for (ptrdiff_t x = 0; x < width; x++) row[x] += scale[j] * z[j * width + x];
        /* numpy's maximum.reduce: the largest, a NaN propagating. */
        double best = row[0];
        for (ptrdiff_t x = 1; x < width; x++)
            if (!(best >= row[x])) best = (best != best) ? best : row[x];
        for (ptrdiff_t x = 0; x < width; x++) row[x] -= best;
    }
}

/* anchor_finish's loop: per row j of n (batch row rows[j]), its distribution dist[j] / sums[j] written
 * into probs, the candidate drawn, its token from cand[j] and its next pair from anchor_next (class,
 * anchor, choice). */
static void k_anchor_finish(const int64_t *rows, ptrdiff_t n, const double *dist, const double *sums, ptrdiff_t width,
                            const double *u,
                            const int64_t *argmax, const int64_t *cand, const int32_t *anchor_next, const int64_t *cls,
                            const int64_t *prev, int64_t vocab, double *probs, int64_t *choice, int64_t *token,
                            int64_t *nxt) {
    for (ptrdiff_t j = 0; j < n; j++) {
        int64_t r = rows[j];
        double *row = probs + r * width;
        for (ptrdiff_t x = 0; x < width; x++) row[x] = dist[j * width + x] / sums[j];
        int64_t c = k_draw(row, width, u[r], (int)argmax[r]);
        choice[r] = c;
        token[r] = cand[j * width + c];
        nxt[r] = anchor_next[(cls[r] * vocab + prev[r]) * width + c];
    }
}

/* The standard rule on the support (`verify_support`'s numpy test): per row the count of leading drafts with
 * p > 0 and u * q <= p at the drafted candidate, p and q read as doubles. */
static void k_support_standard(const float *ps, const float *qs, ptrdiff_t batch, ptrdiff_t k, ptrdiff_t width,
                               const int64_t *choice, const double *us, int64_t *tau, double *scale) {
    for (ptrdiff_t r = 0; r < batch; r++) {
        ptrdiff_t t = 0;
        while (t < k) {
            ptrdiff_t at = (r * k + t) * width + choice[r * k + t];
            double p = (double)ps[at], q = (double)qs[at];
            if (!(p > 0.0 && us[r * k + t] * q <= p)) break;
            t++;
        }
        tau[r] = t;
        scale[r] = 1.0;
    }
}

/* One correction row's elements, v_c = max(0, round(scale * p_c) - q_c) (q absent: round(scale * p_c)),
 * formed as CORRECTION_ROW forms them, written over the row: a loop with no carried sum, so it vectorises. */
WIDE static void correction_elements(float *row, const float *q, double scale, ptrdiff_t vocab) {
    if (q) {
        for (ptrdiff_t c = 0; c < vocab; c++) {
            float v = AS_FLOAT((double)row[c] * scale) - q[c];
            row[c] = RELU(v, fabsf);
        }
    } else {
        for (ptrdiff_t c = 0; c < vocab; c++) row[c] = AS_FLOAT((double)row[c] * scale);
    }
}

/* CORRECTION_ROW's two passes for up to GROUP rows of formed elements (correction_elements) at once: the
 * same left-to-right sums per row, the rows' additions interleaved so that they do not wait on each other.
 * A row whose residual has no mass is left to the caller (out[g] = -2). */
static void correction_group(const float *const *vs, const double *u, int live, ptrdiff_t vocab, int64_t *out) {
    double total[GROUP] = {0.0}, cdf[GROUP] = {0.0}, threshold[GROUP];
    int64_t count[GROUP] = {0};
    if (live == GROUP) {
        for (ptrdiff_t c = 0; c < vocab; c++) {
            total[0] += (double)vs[0][c];
            total[1] += (double)vs[1][c];
            total[2] += (double)vs[2][c];
            total[3] += (double)vs[3][c];
        }
    } else {
        for (int g = 0; g < live; g++)
            for (ptrdiff_t c = 0; c < vocab; c++) total[g] += (double)vs[g][c];
    }
    for (int g = 0; g < live; g++) threshold[g] = u[g] * total[g];
    if (live == GROUP) {
        for (ptrdiff_t c = 0; c < vocab; c++) {
            cdf[0] += (double)vs[0][c];
            cdf[1] += (double)vs[1][c];
            cdf[2] += (double)vs[2][c];
            cdf[3] += (double)vs[3][c];
            count[0] += cdf[0] <= threshold[0];
            count[1] += cdf[1] <= threshold[1];
            count[2] += cdf[2] <= threshold[2];
            count[3] += cdf[3] <= threshold[3];
        }
    } else {
        for (int g = 0; g < live; g++)
            for (ptrdiff_t c = 0; c < vocab; c++) {
                cdf[g] += (double)vs[g][c];
                count[g] += cdf[g] <= threshold[g];
            }
    }
    for (int g = 0; g < live; g++) out[g] = !(total[g] > 0.0) ? -2 : count[g] < vocab ? count[g] : vocab - 1;
}

/* support_step's second half: the target's row at each row's position after its accepted drafts
 * (k_target_rows on that context, into rowbuf (batch, vocab)), the correction drawn from it as
 * k_sample_support draws it (the elements formed over the row, then summed in groups of rows), and the
 * row's tokens as
 * `verification._emit` lays them out (drafts, then the target's token, then -1). dense_q holds
 * vocab zeroed floats of scratch (left zeroed). */
static void k_support_emit(ptrdiff_t batch, ptrdiff_t k, ptrdiff_t width, const float *qs, const int64_t *cand,
                           const int64_t *drafts, const int64_t *cls, const int64_t *full, const double *u_sample,
                           const int64_t *tau, const double *scale, int64_t vocab, const float *bigram,
                           const int64_t *bi_keys, ptrdiff_t nbi, const int64_t *bi_indptr, const int32_t *bi_cols,
                           const float *bi_ml, const float *bi_lam, const int64_t *tri_keys, ptrdiff_t ntri,
                           const int64_t *tri_indptr, const int32_t *tri_cols, const float *tri_ml,
                           const float *tri_lam, int64_t *tokens, float *rowbuf, float *dense_q) {
    for (ptrdiff_t r = 0; r < batch; r++) {
        const int64_t *ctx = full + r * (k + 2) + tau[r];
        k_target_rows(cls + r, ctx, ctx + 1, 1, vocab, bigram, bi_keys, nbi, bi_indptr, bi_cols, bi_ml, bi_lam,
                      tri_keys, ntri, tri_indptr, tri_cols, tri_ml, tri_lam, rowbuf + r * vocab);
    }
    for (ptrdiff_t r0 = 0; r0 < batch; r0 += GROUP) {
        int live = batch - r0 < GROUP ? (int)(batch - r0) : GROUP;
        const float *vs[GROUP];
        double u[GROUP];
        int64_t out[GROUP];
        for (int g = 0; g < live; g++) {
            ptrdiff_t r = r0 + g, at = tau[r] < k ? tau[r] : k - 1;
            float *dq = NULL;
            if (tau[r] < k) {
                dq = dense_q;
                for (ptrdiff_t i = 0; i < width; i++) dq[cand[(r * k + at) * width + i]] = qs[(r * k + at) * width + i];
            }
            correction_elements(rowbuf + r * vocab, dq, scale[r], vocab);
            if (dq)
                for (ptrdiff_t i = 0; i < width; i++) dq[cand[(r * k + at) * width + i]] = 0.0f;
            vs[g] = rowbuf + r * vocab;
            u[g] = u_sample[r];
        }
        correction_group(vs, u, live, vocab, out);
        for (int g = 0; g < live; g++) {
            ptrdiff_t r = r0 + g, at = tau[r] < k ? tau[r] : k - 1;
            if (out[g] == -2) {
                /* No residual mass: the target's row again, on the single-row path, which falls back to it. */
                const int64_t *ctx = full + r * (k + 2) + tau[r];
                float *row = rowbuf + r * vocab;
                int64_t has_q = tau[r] < k;
                k_target_rows(cls + r, ctx, ctx + 1, 1, vocab, bigram, bi_keys, nbi, bi_indptr, bi_cols, bi_ml,
                              bi_lam, tri_keys, ntri, tri_indptr, tri_cols, tri_ml, tri_lam, row);
                k_sample_support(row, 1, vocab, scale + r, cand + (r * k + at) * width, width,
                                 qs + (r * k + at) * width, &has_q, u_sample + r, &out[g], dense_q);
            }
            int64_t t = tau[r], *toks = tokens + r * (k + 1);
            for (ptrdiff_t i = 0; i <= k; i++) toks[i] = i < t ? drafts[r * k + i] : i == t ? out[g] : -1;
        }
    }
}

#endif
