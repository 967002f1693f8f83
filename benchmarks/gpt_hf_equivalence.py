"""Our GPT loaded from a Hugging Face GPT-2 checkpoint vs transformers' GPT2LMHeadModel (PyTorch, CPU) on the same
right-padded token ids: max |difference| of the logits over real tokens (bar: <= 1e-4), and whether the next-token
argmax agrees. Then the reverse direction: our save_hf_checkpoint's files loaded by transformers give the same
logits.

    python benchmarks/gpt_hf_equivalence.py                       # a random GPT2LMHeadModel saved with save_pretrained
    python benchmarks/gpt_hf_equivalence.py --checkpoint path/to/gpt2     # a downloaded GPT-2 directory

Needs torch and transformers, dev references only (never library dependencies):
    pip install torch==2.13.0+cpu transformers
"""

import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from hf_reference import LogitTable, equivalence_arguments, start_transformers, token_inputs, verdict  # noqa: E402


def random_checkpoint(directory, seed):
    """A randomly initialised transformers GPT2LMHeadModel, every parameter perturbed (so that LayerNorm's 1 / 0
    and zero biases cannot hide a swapped or missed tensor), saved with save_pretrained."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=1000, n_positions=64, n_embd=128, n_layer=3, n_head=4,
                                     bos_token_id=999, eos_token_id=999)
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        for parameter in model.parameters():  # the tied lm_head is wte: perturbed once
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(directory)
    return directory


def published_layout(directory, target):
    """``directory``'s checkpoint rewritten in the layout of the published GPT-2 files: no ``transformer.`` prefix,
    no lm_head, and the causal-mask buffers ``h.{i}.attn.bias`` (1, 1, P, P) and ``h.{i}.attn.masked_bias`` ()."""
    import shutil

    from attnlayers.applications.core.formats.safetensors import read_safetensors, write_safetensors

    tensors, _ = read_safetensors(os.path.join(directory, "model.safetensors"))
    tensors = {name.removeprefix("transformer."): value for name, value in tensors.items() if name != "lm_head.weight"}
    positions = tensors["wpe.weight"].shape[0]
    layers = sorted({int(name.split(".")[1]) for name in tensors if name.startswith("h.")})
    for i in layers:
        tensors[f"h.{i}.attn.bias"] = np.tril(np.ones((positions, positions), np.float32))[None, None]
        tensors[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    os.makedirs(target, exist_ok=True)
    write_safetensors(os.path.join(target, "model.safetensors"), tensors, metadata={"format": "pt"})
    shutil.copyfile(os.path.join(directory, "config.json"), os.path.join(target, "config.json"))
    return target


def transformers_logits(directory, ids, mask):
    import torch
    import transformers

    model = transformers.GPT2LMHeadModel.from_pretrained(directory).eval()
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids.astype("int64")),
                    attention_mask=torch.from_numpy(mask.astype("int64")))
    return out.logits.numpy()


def main():
    args = equivalence_arguments(__doc__, "GPT-2")
    import keras

    from attnlayers.applications.gpt import load_hf_checkpoint, save_hf_checkpoint

    torch, transformers = start_transformers()
    with tempfile.TemporaryDirectory() as temporary:
        directory = args.checkpoint or random_checkpoint(os.path.join(temporary, "random"), args.seed)
        model, info = load_hf_checkpoint(directory)
        config = info["config"]
        ids, mask = token_inputs(config, args.batch, args.seed)
        print(f"checkpoint: {args.checkpoint or 'random transformers GPT2LMHeadModel (save_pretrained)'}")
        print(f"  keras {keras.__version__} ({keras.backend.backend()}), torch {torch.__version__}, transformers "
              f"{transformers.__version__}; layers {config.num_layers}, d {config.hidden_dim}, heads "
              f"{config.num_heads}, d_ff {config.intermediate_dim}, V {config.vocabulary_size}, P "
              f"{config.max_sequence_length}; key prefix {info['prefix']!r}; ignored {info['ignored']}")
        print(f"  inputs: batch {ids.shape[0]}, length {ids.shape[1]}, real tokens per row {mask.sum(1).tolist()}")
        table = LogitTable(all_positions=True)
        ours = np.asarray(keras.ops.convert_to_numpy(model(ids, padding_mask=mask)))
        table.row(f"ours (load_hf_checkpoint) vs GPT2LMHeadModel, prefix {info['prefix']!r}", ours,
                  transformers_logits(directory, ids, mask), mask)
        published = published_layout(directory, os.path.join(temporary, "published"))
        from_published, _ = load_hf_checkpoint(published)
        ours_published = np.asarray(keras.ops.convert_to_numpy(from_published(ids, padding_mask=mask)))
        table.row("the same, published layout (no prefix, attn.bias / masked_bias buffers)", ours_published,
                  transformers_logits(published, ids, mask), mask)
        saved = save_hf_checkpoint(model, os.path.join(temporary, "saved"), vocabulary=info["vocabulary"],
                                   merges=info["merges"])
        table.row("ours vs GPT2LMHeadModel.from_pretrained(save_hf_checkpoint(ours))", ours,
                  transformers_logits(saved, ids, mask), mask)
        print()
        print("(the bar reads real tokens: at a padded position ours attends to nothing (the fully-masked-query rule, "
              "output 0), GPT2LMHeadModel to the real tokens before it; neither output is used)")
    print(verdict(table.worst, args.bar))


if __name__ == "__main__":
    main()
