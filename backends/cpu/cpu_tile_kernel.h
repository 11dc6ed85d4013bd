/* cpu_tile_kernel.h: one tile width of cpu_tile.c's kernel, included once per ISA and width with
 *   TK_NAME    the panel function's name (the tile function is TK_NAME##_tile)
 *   TK_TARGET  its target attribute string
 *   TK_ROWS, TK_COLS  the tile: TK_ROWS rows x TK_COLS columns, TK_COLS / TK_W vectors a row
 *   TK_V, TK_W the vector type and its lanes
 *   TK_MASK_T, TK_MASK(n)   a mask of the first n lanes (n in 1 .. TK_W)
 *   TK_ZERO() TK_SET1(x) TK_LOAD(p) TK_LOADM(p, m) TK_STORE(p, v) TK_STOREM(p, m, v)
 *   TK_FMA(a, b, c) (a b + c, one rounding) TK_MUL(a, b) TK_ADD(a, b)
 * Registers: TK_ROWS x TK_COLS / TK_W accumulators, the tile's B vectors, one broadcast A value.
 * Per k: TK_COLS / TK_W loads of B, TK_ROWS broadcasts, TK_ROWS x TK_COLS / TK_W multiply-adds. */
#define TK_NV (TK_COLS / TK_W)
#define TK_CAT2(a, b) a##b
#define TK_CAT(a, b) TK_CAT2(a, b)

/* One tile: rows [0, mr) x columns [0, nc) of C, mr <= TK_ROWS, nc <= TK_COLS. Called with the
 * constants (TK_ROWS, TK_COLS) for full tiles, so those branches fold away there. Every element
 * sums k = 0 .. K-1 in order, one multiply-add a term, then alpha, then C's old value: the same
 * arithmetic whatever the tile's size or place. */
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
            bv[v] = nc == TK_COLS ? TK_LOAD(b + v * TK_W)
                    : v < nv      ? TK_LOADM(b + v * TK_W, m[v])
                                  : TK_ZERO();
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
            if (nc == TK_COLS) {
                if (acc) x = TK_ADD(x, TK_LOAD(cr + v * TK_W));
                TK_STORE(cr + v * TK_W, x);
            } else {
                if (acc) x = TK_ADD(x, TK_LOADM(cr + v * TK_W, m[v]));
                TK_STOREM(cr + v * TK_W, m[v], x);
            }
        }
    }
}

/* One column panel of C, nc <= TK_COLS columns wide, all M rows: B's K x nc panel is read once a
 * row tile while the tile's accumulators stay in registers; the ragged last row tile (and a
 * panel narrower than TK_COLS) go through the same tile with their sizes. */
__attribute__((target(TK_TARGET))) static void TK_NAME(int M, int nc, int K, float alpha,
                                                       const float *A, size_t ars, size_t acs,
                                                       const float *B, size_t ldb, int acc,
                                                       float *C, size_t ldc)
{
    int i = 0;
    if (nc == TK_COLS)
        for (; i + TK_ROWS <= M; i += TK_ROWS)
            TK_CAT(TK_NAME, _tile)(TK_ROWS, TK_COLS, K, alpha, A + (size_t)i * ars, ars, acs, B,
                                   ldb, acc, C + (size_t)i * ldc, ldc);
    for (; i < M; i += TK_ROWS)
        TK_CAT(TK_NAME, _tile)(M - i < TK_ROWS ? M - i : TK_ROWS, nc, K, alpha, A + (size_t)i * ars,
                               ars, acs, B, ldb, acc, C + (size_t)i * ldc, ldc);
}

#undef TK_NV
#undef TK_CAT
#undef TK_CAT2
