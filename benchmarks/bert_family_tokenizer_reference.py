"""The BERT family's tokenizers (RoBERTa, ALBERT, XLM-RoBERTa) and XLNet's against transformers' on a Unicode set:
the same ids, text by text, single texts and pairs with their special tokens? Goal: 0 mismatches.

No real checkpoint can be downloaded here, so small vocabularies are trained first (this process): a RoBERTa
byte-level BPE (Hugging Face ``tokenizers``, RoBERTa's five special tokens), an ALBERT spiece.model (a SentencePiece
unigram model, ALBERT's special pieces), an XLM-R sentencepiece.bpe.model (a SentencePiece unigram model with
SentencePiece's default <unk> <s> </s>, as XLM-R's) and an XLNet spiece.model (XLNet's nine special pieces first, as
xlnet-base-cased's), each on this repository's Markdown files plus the Unicode set.
transformers (never a dependency: a separate environment, since torch and TensorFlow do not share a process) loads
each directory with its ``from_pretrained`` and writes its ids to a JSON file; ours are compared with them.

    pip install --target /tmp/spref sentencepiece protobuf       # what transformers needs to read a .model file
    python benchmarks/bert_family_tokenizer_reference.py --reference-python /tmp/gguf_tf_ref/bin/python \\
        --reference-path /tmp/spref

Prints one row per tokenizer and text set: texts, ids equal (no special tokens), with special tokens, pairs; then
each mismatch.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

UNICODE = [
    "Hello, World! The quick brown fox.", "hello world", " leading space", "trailing space ", "", " ",
    "runs   of    spaces", "\ttabs\tand\nnewlines\r\nhere", "a\u00a0b\u3000c\u2028d\u2029e\u0085f\u1680g\u2009h",
    "Café NAÏVE résumé Ångström", "e\u0301te\u0301 combining", "Straße ẞ", "ΟΔΟΣ οδός Σίσυφος ΚΑΛΟΣ", "İstanbul IĞDIR",
    "日本語のテキスト", "我爱北京天安门", "한국어 텍스트", "emoji 😀 🎉 👍🏽 👨‍👩‍👧", "हिन्दी भाषा", "العربية",
    "ﬁne ﬂow ＡＢＣ x² ½ ™ Ⅻ", "zero\u200bwidth \ufeffbom \u200dzwj", "bell\x07ring nul\x00byte", "``quoted'' text",
    "numbers 1,000 and 9, 3.14159", "<s> </s> <pad> <unk> <mask> [CLS] [SEP] [MASK]", "a <mask> b<mask>c",
    "x [MASK] y[MASK]z", "<|endoftext|> is text", "I'm can't we've they'll", "naïve — “quotes” «guillemets» …",
]

FAMILIES = {  # name -> (directory, tokenizer_config.json, transformers' class)
    "roberta": ("roberta", {}, "RobertaTokenizer"),
    "roberta, add_prefix_space, <mask> lstrip": (
        "roberta_prefix", {"add_prefix_space": True, "added_tokens_decoder": {
            "MASK_ID": {"content": "<mask>", "lstrip": True, "rstrip": False, "normalized": False, "special": True,
                        "single_word": False}}}, "RobertaTokenizer"),
    "albert": ("albert", {"do_lower_case": True, "keep_accents": False}, "AlbertTokenizer"),
    "albert, cased, accents kept": ("albert_cased", {"do_lower_case": False, "keep_accents": True},
                                    "AlbertTokenizer"),
    "xlm-roberta": ("xlm_roberta", {}, "XLMRobertaTokenizer"),
    "xlnet": ("xlnet", {"do_lower_case": False, "keep_accents": False}, "XLNetTokenizer"),
    "xlnet, lower-cased": ("xlnet_lower", {"do_lower_case": True}, "XLNetTokenizer"),
}
XLNET_SPECIAL = ["<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]  # after <unk> <s> </s>, xlnet-base-cased's
# XLNet's special tokens in text (plain text for the other families)
XLNET_TEXTS = ["Hello <cls> world<sep>", "a <mask> b<mask>c  <mask>", "<eod> end <eop>x<eop>", "<s>a</s> <unk>",
               "``<pad>''", "Ünïcödé <sep> ΟΔΟΣ <cls>"]


def random_strings(count):
    """Random code points (from all of Unicode, from the BMP's first 12,288, and spaces / tabs / ASCII), with a
    special token's text now and then (seed 1)."""
    import random

    rng = random.Random(1)
    specials = ["<s>", "</s>", "<pad>", "<unk>", "<mask>", "[CLS]", "[SEP]", "[MASK]"]

    def piece():
        r = rng.random()
        if r < 0.03:
            return rng.choice(specials)
        point = rng.randint(0, 0x10FFFF) if r < 0.35 else rng.randint(0, 0x3000) if r < 0.7 else rng.choice(
            b" \n\t'aZ0.,`")
        return chr(0x20 if 0xD800 <= point < 0xE000 else point)  # no lone surrogates: not UTF-8

    return ["".join(piece() for _ in range(rng.randint(0, 30))) for _ in range(count)]


def training_text():
    root = pathlib.Path(__file__).resolve().parent.parent
    texts = [path.read_text(encoding="utf-8") for path in sorted(root.glob("**/*.md")) if ".venv" not in path.parts]
    return [line for text in texts for line in text.splitlines() if line.strip()] + UNICODE * 3


def write_roberta(directory, texts, config):
    import tokenizers

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizers.ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(texts, vocab_size=2000, min_frequency=2, show_progress=False,
                                  special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tokenizer.save_model(str(directory))
    vocabulary = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    config = json.loads(json.dumps(config).replace("MASK_ID", str(vocabulary["<mask>"])))
    (directory / "tokenizer_config.json").write_text(json.dumps(config))


def write_sentencepiece(directory, name, texts, config, **options):
    import io

    import sentencepiece

    directory.mkdir(parents=True, exist_ok=True)
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=1500, model_type="unigram",
        character_coverage=0.9995, minloglevel=2, num_threads=1, **options)
    (directory / name).write_bytes(model.getvalue())
    (directory / "tokenizer_config.json").write_text(json.dumps(config))


def prepare(root):
    texts = training_text()
    for name, (folder, config, _) in FAMILIES.items():
        directory = root / folder
        if name.startswith("roberta"):
            write_roberta(directory, texts, config)
        elif name.startswith("xlnet"):
            write_sentencepiece(directory, "spiece.model", texts, config, control_symbols=XLNET_SPECIAL)
        elif name.startswith("albert"):
            write_sentencepiece(directory, "spiece.model", texts, config, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                                control_symbols=["[CLS]", "[SEP]", "[MASK]"])
        else:
            write_sentencepiece(directory, "sentencepiece.bpe.model", texts, config)


def pairs(texts):
    """Each text with the next, the empty text left out (transformers reads ``text_pair=""`` as no pair at all)."""
    texts = [text for text in texts if text]
    return list(zip(texts, texts[1:] + texts[:1]))


def reference(root):
    """transformers' ids (run in the reference environment) of root/texts.json's sets, into root/reference.json:
    {family: {set: {"plain", "special", "pairs", "pair_types"}}}."""
    import transformers

    sets = json.loads((root / "texts.json").read_text(encoding="utf-8"))
    out = {}
    for name, (folder, _, class_name) in FAMILIES.items():
        tokenizer = getattr(transformers, class_name).from_pretrained(str(root / folder))
        out[name] = {"class": type(tokenizer).__name__}
        for set_name, texts in sets.items():
            out[name][set_name] = {
                "plain": [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts],
                "special": [tokenizer(text)["input_ids"] for text in texts],
                "pairs": [tokenizer(a, b)["input_ids"] for a, b in pairs(texts)],
                "pair_types": [tokenizer(a, b, return_token_type_ids=True)["token_type_ids"] for a, b in pairs(texts)],
            }
    (root / "reference.json").write_text(json.dumps(out), encoding="utf-8")


def ours(root, sets):
    import numpy as np
    from attnlayers.applications.bert.family_tokenizers import tokenizer_from_directory
    from attnlayers.applications.xlnet.tokenizer import XLNetTokenizer

    def unpadded(packed, key="token_ids"):
        mask = packed["padding_mask"].numpy()
        return [np.asarray(row)[m].tolist() for row, m in zip(packed[key].numpy(), mask)]

    out = {}
    for name, (folder, _, _) in FAMILIES.items():
        load = XLNetTokenizer.from_directory if name.startswith("xlnet") else tokenizer_from_directory
        tokenizer = load(root / folder)
        out[name] = {"class": type(tokenizer).__name__}
        for set_name, texts in sets.items():
            plain = tokenizer.tokenize(texts)
            length = int(max(plain.row_lengths().numpy())) * 2 + 4
            first, second = zip(*pairs(texts))
            packed = tokenizer.pack(tokenizer.tokenize(list(first)), tokenizer.tokenize(list(second)),
                                    sequence_length=length)
            out[name][set_name] = {"plain": plain.to_list(),
                                   "special": unpadded(tokenizer.pack(plain, sequence_length=length)),
                                   "pairs": unpadded(packed), "pair_types": unpadded(packed, "segment_ids")}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference-python", default="/tmp/gguf_tf_ref/bin/python",
                        help="a Python with transformers (and sentencepiece, protobuf)")
    parser.add_argument("--reference-path", default="", help="prepended to its PYTHONPATH")
    parser.add_argument("--random", type=int, default=1000, help="how many random strings (default 1000)")
    parser.add_argument("--directory", help="where the vocabularies are written (default: a temporary folder)")
    parser.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)  # the reference's side
    args = parser.parse_args(argv)
    if args.reference:
        reference(pathlib.Path(args.directory))
        return 0
    sets = {"Unicode set": UNICODE, "random strings": random_strings(args.random),
            "XLNet's special tokens": XLNET_TEXTS}
    with tempfile.TemporaryDirectory() as scratch:
        root = pathlib.Path(args.directory or scratch)
        prepare(root)
        (root / "texts.json").write_text(json.dumps(sets), encoding="utf-8")
        environment = {**os.environ, "PYTHONPATH": args.reference_path}
        subprocess.run([args.reference_python, __file__, "--reference", "--directory", str(root)], check=True,
                       env=environment)
        theirs = json.loads((root / "reference.json").read_text(encoding="utf-8"))
        mine = ours(root, sets)
    print("| tokenizer (transformers' class) | texts | ids equal | with special tokens | pairs | pair segment ids |")
    print("|---|---|---|---|---|---|")
    mismatches = []
    for name in FAMILIES:
        for set_name, texts in sets.items():
            a, b = mine[name][set_name], theirs[name][set_name]
            counts = []
            for key in ("plain", "special", "pairs", "pair_types"):
                equal = [x == y for x, y in zip(a[key], b[key], strict=True)]
                counts.append(f"{sum(equal)}/{len(equal)}")
                inputs = texts if key in ("plain", "special") else pairs(texts)
                mismatches += [(name, key, text, x, y) for text, x, y, same in zip(inputs, a[key], b[key], equal)
                               if not same]
            print(f"| {name} ({theirs[name]['class']}) | {set_name} | " + " | ".join(counts) + " |")
    print(f"{len(mismatches)} mismatches")
    shown = {}
    for name, key, text, x, y in mismatches:  # the first three of each tokenizer
        shown[name] = shown.get(name, 0) + 1
        if shown[name] <= 3:
            print(f"  {name} {key} {text!r}:\n    ours {x}\n    HF   {y}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
