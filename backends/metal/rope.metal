/* rope.metal: rotary position embedding, in place on x (B, T, H, D), interleaved pairs.
 * The cos/sin of every (t, i) angle come from a table the host fills in double precision, so
 * the result does not depend on the GPU's float sin/cos at large angles. */
#include "metal_shim.h"
#include "metal_params.h"

/* Pair i of row (b, t, h): angle a = t theta^(-2i/D) (negated when inverse), table
 * tab[(t*D/2 + i)*2 + {0,1}] = (cos a, sin a) of the forward angle.
 * (x0, x1) <- (x0 cos a - x1 sin a, x0 sin a + x1 cos a). One thread per pair. */
kernel void loom_rope(device float *x LOOM_BUFFER(0), device const float *tab LOOM_BUFFER(1),
                      constant metal_p_rope &p LOOM_BUFFER(2), uint gid LOOM_GID)
{
    uint half_d = p.D / 2;
    if (gid >= p.B * p.T * p.H * half_d) return;
    uint i = gid % half_d, bth = gid / half_d;
    uint t = (bth / p.H) % p.T;
    float cs = tab[(t * half_d + i) * 2], sn = tab[(t * half_d + i) * 2 + 1];
    if (p.inverse) sn = -sn;
    uint o = bth * p.D + 2 * i;
    float x0 = x[o], x1 = x[o + 1];
    x[o] = x0 * cs - x1 * sn;
    x[o + 1] = x0 * sn + x1 * cs;
}

/* Rows at their own positions (batched generation): x (R, H, D), row r at position pos[r], the
 * same table and pairing as loom_rope (forward direction). One thread per pair. */
kernel void loom_rope_rows(device float *x LOOM_BUFFER(0), device const float *tab LOOM_BUFFER(1),
                           device const int *pos LOOM_BUFFER(2), constant metal_p_decode &p LOOM_BUFFER(3),
                           uint gid LOOM_GID)
{
    uint half_d = p.D / 2;
    if (gid >= p.R * p.H * half_d) return;
    uint i = gid % half_d, rh = gid / half_d;
    uint t = (uint)pos[rh / p.H];
    float cs = tab[(t * half_d + i) * 2], sn = tab[(t * half_d + i) * 2 + 1];
    uint o = rh * p.D + 2 * i;
    float x0 = x[o], x1 = x[o + 1];
    x[o] = x0 * cs - x1 * sn;
    x[o + 1] = x0 * sn + x1 * cs;
}
