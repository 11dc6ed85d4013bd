/* cpu_tile_kernel.h: the body of cpu_tile.c's kernel, included once per ISA with
 *   TK_NAME    the driver's name (the tile function is TK_NAME##_tile)
 *   TK_TARGET  its target attribute string
 *   TK_ROWS    rows per tile; the tile is 16 columns wide, 16 / TK_W vectors of TK_W lanes
 *   TK_V, TK_W the vector type and its lanes
 *   TK_MASK_T, TK_MASK(n)   a mask of the first n lanes (n in 1 .. TK_W)
 *   TK_ZERO() TK_SET1(x) TK_LOAD(p) TK_LOADM(p, m) TK_STORE(p, v) TK_STOREM(p, m, v)
 *   TK_FMA(a, b, c) (a b + c, one rounding) TK_MUL(a, b) TK_ADD(a, b)
 * Registers: TK_ROWS x 16 / TK_W accumulators (AVX2: 6 x 2 of 16 ymm, AVX-512: 12 x 1 of 32 zmm),
 * the tile's B vectors, one broadcast A value. Per k: 16 / TK_W loads of B, TK_ROWS broadcasts,
 * TK_ROWS x 16 / TK_W multiply-adds. */
#define TK_NV (16 / TK_W)
#define TK_CAT2(a, b) a##b
#define TK_CAT(a, b) TK_CAT2(a, b)

/* One tile: rows [0, mr) x columns [0, nc) of C, mr <= TK_ROWS, nc <= 16. Called with the
 * constants (TK_ROWS, 16) for full tiles, so those branches fold away there. */
__attribute__((target(TK_TARGET), always_inline)) static inline void
TK_CAT(TK_NAME, _tile)(int mr, int nc, int K, float alpha, const float *A, size_t ars, size_t acs,
                       const float *B, size_t ldb, int acc, float *C, size_t ldc)
{
    TK_MASK_T m[TK_NV];
    int nv = (nc + TK_W - 1) / TK_W; /* vectors holding a column, the last maybe partial */
    for (int v = 0; v < TK_NV; v++) {
        int left = nc - v * TK_W;
        m[v] = TK_MASK(left >= TK_W ? TK_W : left > 0 ? left : 1);
    }
    TK_V c[TK_ROWS][TK_NV];
    for (int r = 0; r < TK_ROWS; r++)
        for (int v = 0; v < TK_NV; v++) c[r][v] = TK_ZERO();
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb, *a = A + (size_t)k * acs;
        TK_V bv[TK_NV];
        for (int v = 0; v < TK_NV; v++)
            bv[v] = nc == 16 ? TK_LOAD(b + v * TK_W) : v < nv ? TK_LOADM(b + v * TK_W, m[v]) : TK_ZERO();
        for (int r = 0; r < TK_ROWS; r++)
            if (r < mr) {
                TK_V av = TK_SET1(a[(size_t)r * ars]);
                for (int v = 0; v < TK_NV; v++) c[r][v] = TK_FMA(av, bv[v], c[r][v]);
            }
    }
    TK_V al = TK_SET1(alpha);
    for (int r = 0; r < mr; r++) {
        float *cr = C + (size_t)r * ldc;
        for (int v = 0; v < nv; v++) {
            TK_V x = TK_MUL(al, c[r][v]);
            if (nc == 16) {
                if (acc) x = TK_ADD(x, TK_LOAD(cr + v * TK_W));
                TK_STORE(cr + v * TK_W, x);
            } else {
                if (acc) x = TK_ADD(x, TK_LOADM(cr + v * TK_W, m[v]));
                TK_STOREM(cr + v * TK_W, m[v], x);
            }
        }
    }
}

/* Column panels of 16 outer (B's K x 16 panel stays in L1 while A's rows pass), row tiles
 * inner; the ragged last row tile and column panel go through the same tile with their sizes. */
__attribute__((target(TK_TARGET))) static void TK_NAME(int M, int N, int K, float alpha,
                                                       const float *A, size_t ars, size_t acs,
                                                       const float *B, size_t ldb, int acc,
                                                       float *C, size_t ldc)
{
    for (int j = 0; j < N; j += 16) {
        int nc = N - j < 16 ? N - j : 16, i = 0;
        if (nc == 16)
            for (; i + TK_ROWS <= M; i += TK_ROWS)
                TK_CAT(TK_NAME, _tile)(TK_ROWS, 16, K, alpha, A + (size_t)i * ars, ars, acs, B + j,
                                       ldb, acc, C + (size_t)i * ldc + j, ldc);
        for (; i < M; i += TK_ROWS)
            TK_CAT(TK_NAME, _tile)(M - i < TK_ROWS ? M - i : TK_ROWS, nc, K, alpha,
                                   A + (size_t)i * ars, ars, acs, B + j, ldb, acc,
                                   C + (size_t)i * ldc + j, ldc);
    }
}

#undef TK_NV
#undef TK_CAT
#undef TK_CAT2
