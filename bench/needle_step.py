#!/usr/bin/env python3
# needle_step.py BASE.safetensors B T STEPS: the reference side of bench/needle.sh. Writes a Needle
# base checkpoint of TransformerConfig() (the default config, random init from PRNGKey(0), probe
# heads included) to BASE when it does not exist, then times Needle's own LoRA train_step
# (finetune.py:406-465, float32, W4 STE + A8 + KV8, clip + adamw(warmup cosine), r 16 alpha 32 on
# its five targets) on B x T random tokens: the first step (compile included), the median of the
# rest, and the process's peak RSS. One line of JSON on stdout.
# Pinned: cactus-needle[train]==3.2.8 (jax/jaxlib 0.10.2, flax 0.12.8, optax 0.2.8, numpy 2.4.6).
import dataclasses
import json
import os
import resource
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from needle.model.architecture import SimpleAttentionNetwork, TransformerConfig
from needle.model.checkpoints import write_checkpoint
from needle.model.finetune import init_lora, lora_target_paths, merge_lora
from needle.model.quantize import WEIGHT_BITS, configure_deploy, cq_ste_params
from needle.model.run import load_checkpoint


def make_base(path):
    cfg = TransformerConfig()
    model = SimpleAttentionNetwork(cfg)

    def every_head(mdl, t):  # the probe heads exist only once they are called
        mdl.forward_embedding(t)
        mdl.forward_confidence(t)
        mdl.forward_router(t)
        return mdl(t)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32), method=every_head)["params"]
    params = jax.tree.map(lambda a: np.asarray(a, np.float32), params)
    write_checkpoint(path, {"format_version": 2, "config": dataclasses.asdict(cfg), "step": 0,
                            "params": params, "run": {"bench": "loom bench/needle_step.py"}})


def main():
    path, B, T, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if not os.path.exists(path):
        make_base(path)
    start = time.perf_counter()
    params, config = load_checkpoint(path)                      # finetune.py:406-414
    config.dtype = "float32"
    params = jax.device_put(jax.tree.map(lambda a: np.asarray(a).astype(np.float32), params))
    model = SimpleAttentionNetwork(config)
    configure_deploy(act_bits=config.act_bits, kv_bits=config.kv_bits)
    paths = lora_target_paths(params)
    scale = 32.0 / 16
    lora = init_lora(params, paths, 16, jax.random.PRNGKey(0))
    schedule = optax.warmup_cosine_decay_schedule(init_value=0.0, peak_value=1e-3, warmup_steps=1,
                                                  decay_steps=max(steps, 2))
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule))
    opt_state = optimizer.init(lora)

    def loss_fn(lora, ids, mask):
        merged = cq_ste_params(merge_lora(params, lora, scale), WEIGHT_BITS)
        logits = model.apply({"params": merged}, ids, quant=True)
        logits, targets, mask = logits[:, :-1], ids[:, 1:], mask[:, 1:]
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
        return (ce * mask).sum() / jnp.maximum(mask.sum(), 1.0)

    @jax.jit
    def train_step(lora, opt_state, ids, mask):
        loss, grads = jax.value_and_grad(loss_fn)(lora, ids, mask)
        updates, opt_state = optimizer.update(grads, opt_state, lora)
        return optax.apply_updates(lora, updates), opt_state, loss

    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(3, config.vocab_size, (B, T)).astype(np.int32))
    mask = jnp.ones((B, T), jnp.float32)
    times, first = [], None
    for i in range(steps):
        t0 = time.perf_counter()
        lora, opt_state, loss = train_step(lora, opt_state, ids, mask)
        loss = float(loss)
        t1 = time.perf_counter()
        if i == 0:
            first = t1 - start
        else:
            times.append(t1 - t0)
    print(json.dumps({"first_step_s": first, "step_s": float(np.median(times)) if times else None,
                      "loss0": loss, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
