"""The attention of one GPT-2 small layer, forward and backward, on each route: the flash kernel that keeps the
dropout (``attnlayers.flash_dropout.flash_attention``) against the exact computation with dropout (what the exact
route computes: the (B, N, T, S) weights and a mask drawn and stored), and at rate 0 against cuDNN's fused kernel
(``jax.nn.dot_product_attention(implementation="cudnn")``) and XLA's exact computation; then the flash kernel's
agreement with the exact computation given the same mask (``dropout_keep_mask``) at these sizes.

    KERAS_BACKEND=jax python benchmarks/flash_dropout_speed.py --json flash.json    # on a GPU (Triton)
    KERAS_BACKEND=jax python benchmarks/flash_dropout_speed.py --size tiny          # CPU: Pallas' interpreter

Each row: the median of --repeats calls of ``jax.jit(jax.grad(sum(out * cotangent)))`` over (Q, K, V) after a
first call (its compile time is reported), a fresh seed each call; causal; bfloat16 inputs (--dtype). TFLOP/s
counts the causal half of the two forward products (4 B N T S H / 2) and the backward's five (2.5x): 3.5x the
forward's, as FlashAttention-2 counts them. Agreement: max |flash - exact| over max |exact| of the output and of
each gradient, with the same dropout mask, for the bf16 bar of tests/layers/test_flash_dropout.py (2e-2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from attnlayers.flash_dropout import dropout_keep_mask, flash_attention  # noqa: E402

SIZES = {"full": {"batch": 16, "length": 1024, "heads": 12, "head_dim": 64},  # GPT-2 small, B 16 x T 1024
         "tiny": {"batch": 1, "length": 64, "heads": 2, "head_dim": 16}}
BLOCKS = ((64, 64), (128, 64), (64, 128), (128, 128))


def exact_attention(q, k, v, rate, seed=None, keep=None):
    """dropout(softmax(Q K^T / sqrt(H) + causal mask)) V (eq. 1), the (B, N, T, S) weights in float32; the mask
    drawn from ``seed`` (jax.random, as keras' Dropout under JAX) or given as ``keep`` (B, N, T, S)."""
    t, s, h = q.shape[1], k.shape[1], q.shape[3]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k, preferred_element_type=jnp.float32) / jnp.sqrt(h)
    causal = jnp.arange(s)[None, :] <= jnp.arange(t)[:, None] + (s - t)
    weights = jax.nn.softmax(jnp.where(causal, scores, -1e30), axis=-1)
    if rate > 0:
        if keep is None:
            keep = jax.random.bernoulli(jax.random.key(seed[0]), 1.0 - rate, weights.shape)
        weights = jnp.where(keep, weights / (1.0 - rate), 0.0)
    return jnp.einsum("bnts,bsnh->btnh", weights.astype(q.dtype), v)


def routes(rate, interpret, on_gpu):
    """(name, f(q, k, v, seed)) for each route measured at ``rate``."""
    out = [("exact", lambda q, k, v, seed: exact_attention(q, k, v, rate, seed))]
    for blocks in BLOCKS if rate > 0 else BLOCKS[:2]:
        out.append((f"flash {blocks[0]}x{blocks[1]}",
                    lambda q, k, v, seed, blocks=blocks: flash_attention(
                        q, k, v, causal=True, dropout_rate=rate, seed=seed if rate > 0 else None,
                        block_sizes=blocks, interpret=interpret)))
    if rate == 0 and on_gpu:
        out.append(("cudnn", lambda q, k, v, seed: jax.nn.dot_product_attention(
            q, k, v, is_causal=True, implementation="cudnn")))
    return out


def timed_gradients(f, q, k, v, cotangent, repeats):
    """(first call s, median ms of ``repeats`` calls) of the gradients of sum(f(...) * cotangent)."""
    grad = jax.jit(jax.grad(lambda q, k, v, seed: jnp.sum(f(q, k, v, seed).astype(jnp.float32) * cotangent),
                            argnums=(0, 1, 2)))
    seeds = [jnp.array([i + 1, 0], jnp.uint32) for i in range(repeats + 1)]
    begin = time.perf_counter()
    jax.block_until_ready(grad(q, k, v, seeds[0]))
    first = time.perf_counter() - begin
    samples = []
    for seed in seeds[1:]:
        begin = time.perf_counter()
        jax.block_until_ready(grad(q, k, v, seed))
        samples.append((time.perf_counter() - begin) * 1e3)
    return first, statistics.median(samples)


def agreement(q, k, v, cotangent, rate, interpret):
    """Max |flash - exact| / max |exact| of the output and the three gradients, the same mask on both."""
    b, t, n, _ = q.shape
    seed = jnp.array([7, 0], jnp.uint32)
    keep = dropout_keep_mask(seed, b, n, t, k.shape[1], rate)

    def both(f):
        out, pullback = jax.vjp(f, q, k, v)
        return (out,) + pullback(cotangent.astype(out.dtype))

    flash = jax.jit(lambda: both(lambda q, k, v: flash_attention(
        q, k, v, causal=True, dropout_rate=rate, seed=seed, interpret=interpret)))()
    exact = jax.jit(lambda: both(lambda q, k, v: exact_attention(q, k, v, rate, keep=keep)))()
    names = ("out", "d_query", "d_key", "d_value")
    return {name: float(jnp.max(jnp.abs(a.astype(jnp.float32) - e.astype(jnp.float32)))
                        / max(float(jnp.max(jnp.abs(e.astype(jnp.float32)))), 1e-30))
            for name, a, e in zip(names, flash, exact)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rates", default="0.1,0.0", help="comma-separated dropout rates (default 0.1,0.0)")
    parser.add_argument("--json", default=None, metavar="PATH")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1; received {args.repeats}")
    rates = [float(r) for r in args.rates.split(",") if r]
    on_gpu = jax.devices()[0].platform == "gpu"
    interpret = not on_gpu
    sizes = SIZES[args.size]
    b, t, n, h = sizes["batch"], sizes["length"], sizes["heads"], sizes["head_dim"]
    keys = jax.random.split(jax.random.key(0), 4)
    q, k, v = (jax.random.normal(key, (b, t, n, h), jnp.float32).astype(args.dtype) for key in keys[:3])
    cotangent = jax.random.normal(keys[3], (b, t, n, h), jnp.float32)
    flops = 3.5 * 4 * b * n * t * t * h / 2
    print(f"flash_dropout_speed: {jax.devices()[0].device_kind} ({'Triton' if on_gpu else 'Pallas interpreter'}), "
          f"B {b} x T {t}, {n} heads of {h}, causal, {args.dtype}, median of {args.repeats}", flush=True)
    rows = []
    for rate in rates:
        for name, f in routes(rate, interpret, on_gpu):
            try:
                first, ms = timed_gradients(f, q, k, v, cotangent, args.repeats)
                row = {"rate": rate, "route": name, "ms": ms, "first_call_s": first, "tflops": flops / ms / 1e9}
                print(f"  rate {rate:g} {name:14s} {ms:9.3f} ms  {row['tflops']:7.1f} TFLOP/s  (first call "
                      f"{first:.1f} s)", flush=True)
            except Exception as error:  # noqa: BLE001  -- a route that fails is reported; the others still run
                row = {"rate": rate, "route": name, "error": f"{type(error).__name__}: {error}"[:2000]}
                print(f"  rate {rate:g} {name:14s} FAILED {row['error'][:300]}", flush=True)
            rows.append(row)
    agree = {}
    for rate in rates:
        agree[str(rate)] = agreement(q, k, v, cotangent, rate, interpret)
        print(f"  agreement at rate {rate:g} (max |flash - exact| / max |exact|): "
              + ", ".join(f"{key} {value:.2e}" for key, value in agree[str(rate)].items()), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "flash_dropout_speed", "device": jax.devices()[0].device_kind,
                       "jax": jax.__version__, "sizes": sizes, "dtype": args.dtype, "repeats": args.repeats,
                       "flops_per_call": flops, "rows": rows, "agreement": agree}, f, indent=1)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
