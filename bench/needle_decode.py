#!/usr/bin/env python3
# needle_decode.py BASE N P NEW: the Needle side of bench/needle_decode.sh. Needle's own greedy
# decoder (run.generate, cactus-needle 3.2.8: no KV cache, the whole buffer again for each token,
# one example at a time, as finetune.py's held-out scoring runs it) on the base's weights after
# cq_ste_params (W4: what _score_quantised decodes with), for N prompts of P random ids (the same
# generator as bench_needle_decode.c cannot be shared: the ids differ, the shapes do not), NEW new
# tokens each (fewer if EOS comes). Prints one line of JSON: tokens made, seconds (compile of the
# jitted forward included in the first example, and apart), tokens/s after the first.
import json
import os
import sys
import time

os.environ.setdefault("NEEDLE_TELEMETRY", "0")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
import jax  # noqa: E402

from needle.model.architecture import SimpleAttentionNetwork  # noqa: E402
from needle.model.quantize import WEIGHT_BITS, cq_ste_params  # noqa: E402
from needle.model.run import generate, load_checkpoint  # noqa: E402


class Ids:
    def __init__(self, ids):
        self.ids = ids

    def encode(self, _text):
        return list(self.ids)

    def decode(self, ids):
        return " ".join(str(int(i)) for i in ids)


def main():
    path, N, P, NEW = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    params, config = load_checkpoint(path)
    config.dtype = "float32"
    params = jax.device_put(jax.tree.map(lambda a: np.asarray(a).astype(np.float32), params))
    params = cq_ste_params(params, WEIGHT_BITS)
    model = SimpleAttentionNetwork(config)
    rng = np.random.default_rng(7)
    made, times = [], []
    for _ in range(N):
        ids = [int(x) for x in rng.integers(4, config.vocab_size, P - 1)]  # generate prepends BOS
        t = time.perf_counter()
        text = generate(model, params, Ids(ids), "", max_new_tokens=NEW, temperature=0.0, stream=False)
        times.append(time.perf_counter() - t)
        made.append(len(text.split()))
    rest = sum(made[1:]) / sum(times[1:]) if N > 1 and sum(times[1:]) > 0 else 0.0
    print(json.dumps({"tokens": sum(made), "seconds": round(sum(times), 3), "first_s": round(times[0], 3),
                      "tokens_per_s": round(sum(made) / sum(times), 3), "tokens_per_s_after_first": round(rest, 3)}))


if __name__ == "__main__":
    main()
