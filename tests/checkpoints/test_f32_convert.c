/* test_f32_convert.c: st_f32_to_bf16 and st_f32_to_f16 (checkpoints/safetensors.h: every export to
 * a bf16 or f16 file, Needle's and Hugging Face's) bit for bit against an independent reference,
 * and st_bf16_to_f32 / st_f16_to_f32 back. The reference knows nothing of bit tricks: it decodes
 * all 65536 patterns of the format with ldexp, sorts the finite positive values, and rounds |x|
 * to the nearer neighbour in exact double arithmetic, a tie to the pattern with an even last bit;
 * past the largest finite value the next neighbour is infinity, standing at the value one more ulp
 * would have (2^16 for f16, 2^128 for bf16), which IEEE round-to-nearest-even gives. NaN must stay
 * NaN with its sign.
 * Inputs: every float exponent with both signs, the exact ties of both formats (to an even and to
 * an odd neighbour), one float ulp either side of each, the ends of every binade, the subnormal
 * halves' ties, +-0, +-Inf, NaNs of several payloads, the values just below and at the rounding
 * to infinity, and 4M random bit patterns. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/safetensors.h"
#include "tests/check.h"

typedef struct {
    const char *name;
    int ebits, mbits;      /* exponent and mantissa bits of the 16-bit format */
    double val[65536];     /* each pattern's value; NaN for NaN patterns */
    double pos[32768];     /* the finite positive values (and +0), ascending */
    uint16_t pat[32768];   /* their patterns */
    int npos;
    double inf_at;         /* where the rounding puts +Inf: one ulp past the largest finite */
} fmt;

static double fmt_decode(const fmt *f, uint16_t h)
{
    const int bias = (1 << (f->ebits - 1)) - 1;
    const uint32_t e = (h >> f->mbits) & ((1u << f->ebits) - 1), m = h & ((1u << f->mbits) - 1);
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (e == (1u << f->ebits) - 1) return m ? NAN : sign * INFINITY;
    if (e == 0) return sign * ldexp((double)m, 1 - bias - f->mbits);
    return sign * ldexp((double)(m | (1u << f->mbits)), (int)e - bias - f->mbits);
}

static void fmt_build(fmt *f, const char *name, int ebits, int mbits)
{
    f->name = name, f->ebits = ebits, f->mbits = mbits, f->npos = 0;
    for (uint32_t h = 0; h < 65536; h++) f->val[h] = fmt_decode(f, (uint16_t)h);
    for (uint32_t h = 0; h < 0x8000; h++) /* patterns 0 .. 0x7fff ascend with their values */
        if (isfinite(f->val[h])) f->pos[f->npos] = f->val[h], f->pat[f->npos++] = (uint16_t)h;
    const double top = f->pos[f->npos - 1], below = f->pos[f->npos - 2];
    f->inf_at = top + (top - below);
}

/* The reference rounding of x (not NaN) to the format's pattern. */
static uint16_t fmt_round(const fmt *f, float x)
{
    const uint16_t sign = signbit(x) ? 0x8000 : 0;
    const double a = fabs((double)x);
    const uint16_t inf = (uint16_t)(((1u << f->ebits) - 1) << f->mbits);
    if (isinf(a)) return sign | inf;
    int lo = 0, hi = f->npos - 1; /* the last value <= a */
    if (a >= f->pos[hi]) {
        const double dl = a - f->pos[hi], dh = f->inf_at - a;
        if (dl < dh || (dl == dh && !(f->pat[hi] & 1))) return sign | f->pat[hi];
        return sign | inf; /* inf's pattern ends in 0: it wins a tie */
    }
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (f->pos[mid] <= a) lo = mid;
        else hi = mid;
    }
    const double dl = a - f->pos[lo], dh = f->pos[hi] - a;
    if (dl < dh || (dl == dh && !(f->pat[lo] & 1))) return sign | f->pat[lo];
    return sign | f->pat[hi];
}

static long checked[2], nan_checked[2];

static void check_one(const fmt *f, int which, float x)
{
    const uint16_t got = which ? st_f32_to_f16(x) : st_f32_to_bf16(x);
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x)) {
        const double v = f->val[got];
        CHECK(isnan(v) && !!(got & 0x8000) == !!signbit(x), "%s of NaN 0x%08x: 0x%04x is not a NaN of its sign",
              f->name, u, got);
        nan_checked[which]++;
        return;
    }
    const uint16_t want = fmt_round(f, x);
    CHECK(got == want, "%s of %.9g (0x%08x): 0x%04x, round-to-nearest-even gives 0x%04x", f->name, (double)x, u, got,
          want);
    /* and back: the decode of the pattern is its value */
    const float back = which ? st_f16_to_f32(got) : st_bf16_to_f32(got);
    CHECK((double)back == f->val[got] && !!signbit(back) == !!(got & 0x8000), "%s 0x%04x back to f32: %.9g, its value %.9g",
          f->name, got, (double)back, f->val[got]);
    checked[which]++;
}

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* x and one float ulp either side of it (toward and away from zero). */
static void check_around(const fmt *f, int which, float x)
{
    check_one(f, which, x);
    check_one(f, which, nextafterf(x, 0.0f));
    check_one(f, which, nextafterf(x, x > 0 ? INFINITY : -INFINITY));
}

int main(void)
{
    static fmt fmts[2];
    fmt_build(&fmts[0], "bf16", 8, 7);
    fmt_build(&fmts[1], "f16", 5, 10);
    CHECK(fmts[0].npos == 0x7f80 && fmts[1].npos == 0x7c00, "finite positive patterns %d, %d", fmts[0].npos,
          fmts[1].npos);
    CHECK(fmts[1].inf_at == 65536.0 && fmts[0].inf_at == ldexp(1.0, 128), "infinity at %g, %g", fmts[1].inf_at,
          fmts[0].inf_at);
    for (int w = 0; w < 2; w++) {
        const fmt *f = &fmts[w];
        /* every exponent, both signs: the ends of the binade and the bf16 ties (low 16 bits 0x8000,
         * the kept bit 0 or 1) */
        for (uint32_t e = 0; e < 255; e++)
            for (uint32_t s = 0; s < 2; s++) {
                const uint32_t base = (s << 31) | (e << 23);
                const uint32_t m[] = {0, 1, 0x7fffff, 0x8000, 0x18000, 0x7f8000, 0x7e8000, 0x1000, 0x3000, 0x2000,
                                      0x7ff000, 0x7fe000, 0x400000, 0x401000, 0x403000};
                for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) check_around(f, w, from_bits(base | m[i]));
            }
        /* every tie of this format: the midpoint of two neighbours (exact in float: at most 12
         * significant bits for f16, 9 for bf16), with its float neighbours */
        for (int i = 0; i + 1 < f->npos; i++) {
            const double mid = 0.5 * (f->pos[i] + f->pos[i + 1]);
            if ((double)(float)mid != mid) continue; /* bf16's subnormal midpoints below float's */
            check_around(f, w, (float)mid);
            check_around(f, w, -(float)mid);
        }
        /* the largest finite value, the tie with infinity, infinity, zeros */
        const float top = (float)f->pos[f->npos - 1], to_inf = (float)(0.5 * (f->pos[f->npos - 1] + f->inf_at));
        if ((double)to_inf == 0.5 * (f->pos[f->npos - 1] + f->inf_at)) check_around(f, w, to_inf), check_around(f, w, -to_inf);
        check_around(f, w, top);
        check_around(f, w, -top);
        check_around(f, w, FLT_MAX);
        check_around(f, w, -FLT_MAX);
        check_one(f, w, INFINITY);
        check_one(f, w, -INFINITY);
        check_one(f, w, 0.0f);
        check_one(f, w, -0.0f);
        check_around(f, w, FLT_MIN);
        check_around(f, w, from_bits(1));
        /* NaNs: quiet, signalling, the smallest and largest payloads, both signs */
        const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0x7fffffffu, 0x7f800100u, 0x7fa00000u};
        for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
            check_one(f, w, from_bits(nans[i]));
            check_one(f, w, from_bits(nans[i] | 0x80000000u));
        }
        /* random bit patterns (a fixed xorshift: the same inputs every run) */
        uint64_t r = 0x9e3779b97f4a7c15ull;
        for (int i = 0; i < (1 << 22); i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            check_one(f, w, from_bits((uint32_t)(r >> 16)));
        }
        printf("%s %s: %ld values and %ld NaNs rounded as round-to-nearest-even, and back\n",
               CHECK_COUNTER ? "FAIL" : "ok  ", f->name, checked[w], nan_checked[w]);
    }
    return check_exit_code("test_f32_convert");
}
