"""Our LLaMA-style GPT (GPTConfig(architecture="llama")) loaded from a Hugging Face LlamaForCausalLM checkpoint vs
transformers' LlamaForCausalLM (PyTorch, CPU) on the same right-padded token ids: max |difference| of the logits over
real tokens (bar: <= 1e-4) and next-token argmax agreement; greedy generation from a prompt (ours: cached steps;
theirs: model.generate) token for token; then the reverse direction: save_hf_llama_checkpoint's files loaded by
transformers give the same logits. Two random checkpoints: grouped-query attention with an untied lm_head, and
multi-query attention with tied embeddings.

    python benchmarks/gpt_llama_hf_equivalence.py
    python benchmarks/gpt_llama_hf_equivalence.py --checkpoint path/to/llama     # a downloaded LLaMA directory

Needs torch and transformers, dev references only (never library dependencies):
    pip install torch==2.13.0+cpu transformers
"""

import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from hf_reference import LogitTable, equivalence_arguments, start_transformers, token_inputs, verdict  # noqa: E402

# (label, LlamaConfig overrides) of the random checkpoints.
RANDOM_CONFIGS = (
    ("GQA 4 q / 2 kv heads, untied lm_head, rope_theta 500",
     {"num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False, "rope_theta": 500.0}),
    ("MQA 4 q / 1 kv head, tied embeddings, rope_theta 10000",
     {"num_attention_heads": 4, "num_key_value_heads": 1, "tie_word_embeddings": True, "rope_theta": 10000.0}),
)


def random_checkpoint(directory, seed, overrides):
    """A randomly initialised LlamaForCausalLM, every parameter perturbed (so that RMSNorm's unit gains cannot hide a
    swapped or missed tensor), saved with save_pretrained."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=344, num_hidden_layers=3,
                                      max_position_embeddings=64, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
                                      **overrides)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in model.parameters():  # a tied lm_head is embed_tokens: perturbed once
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(directory)
    return directory


def transformers_model(directory):
    import transformers

    return transformers.LlamaForCausalLM.from_pretrained(directory, dtype="float32").eval()


def transformers_logits(directory, ids, mask):
    import torch

    with torch.no_grad():
        out = transformers_model(directory)(input_ids=torch.from_numpy(ids.astype("int64")),
                                            attention_mask=torch.from_numpy(mask.astype("int64")))
    return out.logits.numpy()


def transformers_greedy(directory, prompt, length):
    import torch

    with torch.no_grad():
        out = transformers_model(directory).generate(
            torch.from_numpy(prompt.astype("int64")), max_length=length, do_sample=False, eos_token_id=None,
            pad_token_id=0,
        )
    return out.numpy()


def check(directory, label, args, temporary):
    """Every comparison for one checkpoint directory; returns (worst max |diff|, greedy tokens equal)."""
    import keras

    from attnlayers.applications.gpt import load_hf_llama_checkpoint, save_hf_llama_checkpoint

    model, info = load_hf_llama_checkpoint(directory)
    config = info["config"]
    ids, mask = token_inputs(config, args.batch, args.seed, low=3)
    print(f"### {label}")
    print(f"layers {config.num_layers}, d {config.hidden_dim}, heads {config.num_heads} (kv {config.key_value_heads}), "
          f"d_ff {config.intermediate_dim}, V {config.vocabulary_size}, rope_theta {config.rope_theta:g}, tied "
          f"{config.tie_embeddings}; parameters: ours {model.count_params():,}, closed form "
          f"{config.parameter_count():,}, transformers {transformers_model(directory).num_parameters():,}")
    print(f"inputs: batch {ids.shape[0]}, length {ids.shape[1]}, real tokens per row {mask.sum(1).tolist()}")
    table = LogitTable()
    ours = np.asarray(keras.ops.convert_to_numpy(model(ids, padding_mask=mask)))
    table.row("ours (load_hf_llama_checkpoint) vs LlamaForCausalLM", ours, transformers_logits(directory, ids, mask),
              mask)
    saved = save_hf_llama_checkpoint(model, os.path.join(temporary, "saved"))
    table.row("ours vs LlamaForCausalLM.from_pretrained(save_hf_llama_checkpoint(ours))", ours,
              transformers_logits(saved, ids, mask), mask)
    prompt = ids[:1, :5]
    length = min(config.max_sequence_length, 5 + args.new_tokens)
    ours_tokens = np.asarray(keras.ops.convert_to_numpy(model.generate(prompt, max_length=length,
                                                                       stop_token_ids=None).tokens))
    theirs_tokens = transformers_greedy(directory, prompt, length)
    same = np.array_equal(ours_tokens, theirs_tokens)
    print()
    print(f"greedy, prompt {prompt[0].tolist()}, {length - 5} new tokens: ours (cached steps) "
          f"{ours_tokens[0, 5:].tolist()}; transformers generate {theirs_tokens[0, 5:].tolist()}: "
          f"{'equal' if same else 'DIFFERENT'}")
    print()
    return table.worst, same


def main():
    args = equivalence_arguments(__doc__, "LLaMA", **{"--new-tokens": (int, 16, "greedy tokens generated (default 16)")})
    import keras

    torch, transformers = start_transformers()
    print(f"keras {keras.__version__} ({keras.backend.backend()}), torch {torch.__version__}, transformers "
          f"{transformers.__version__}")
    print()
    results = []
    with tempfile.TemporaryDirectory() as temporary:
        if args.checkpoint:
            results.append(check(args.checkpoint, args.checkpoint, args, temporary))
        for i, (label, overrides) in enumerate(RANDOM_CONFIGS if not args.checkpoint else ()):
            directory = random_checkpoint(os.path.join(temporary, f"random{i}"), args.seed + i, overrides)
            results.append(check(directory, f"random LlamaForCausalLM: {label}", args,
                                 os.path.join(temporary, f"out{i}")))
    greedy = all(same for _, same in results)
    print(f"greedy tokens equal: {greedy}; " + verdict(max(w for w, _ in results), args.bar, greedy))


if __name__ == "__main__":
    main()
