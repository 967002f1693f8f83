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

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

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


def token_inputs(config, batch, seed):
    """Right-padded (B, T) random token ids of different lengths and their mask (True at real tokens)."""
    rng = np.random.default_rng(seed)
    length = min(24, config.max_sequence_length)
    lengths = np.linspace(length, 3, batch).astype(int)
    mask = np.arange(length)[None] < lengths[:, None]
    ids = np.where(mask, rng.integers(3, config.vocabulary_size, (batch, length)), config.pad_token_id)
    return ids.astype("int32"), mask


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


def compare(label, ours, theirs, mask):
    """Prints one Markdown row; returns the max |diff| over real tokens."""
    worst = np.abs(np.where(mask[..., None], ours - theirs, 0)).max()
    argmax = (ours.argmax(-1) == theirs.argmax(-1))[mask].mean()
    scale = np.abs(theirs[mask]).max()
    print(f"| {label} | {worst:.3e} | {scale:.2f} | {argmax:.4f} |")
    return worst


def check(directory, label, args, temporary):
    """Every comparison for one checkpoint directory; returns (worst max |diff|, greedy tokens equal)."""
    import keras

    from attnlayers.applications.gpt import load_hf_llama_checkpoint, save_hf_llama_checkpoint

    model, info = load_hf_llama_checkpoint(directory)
    config = info["config"]
    ids, mask = token_inputs(config, args.batch, args.seed)
    print(f"### {label}")
    print(f"layers {config.num_layers}, d {config.hidden_dim}, heads {config.num_heads} (kv {config.key_value_heads}), "
          f"d_ff {config.intermediate_dim}, V {config.vocabulary_size}, rope_theta {config.rope_theta:g}, tied "
          f"{config.tie_embeddings}; parameters: ours {model.count_params():,}, closed form "
          f"{config.parameter_count():,}, transformers {transformers_model(directory).num_parameters():,}")
    print(f"inputs: batch {ids.shape[0]}, length {ids.shape[1]}, real tokens per row {mask.sum(1).tolist()}")
    print()
    print("| direction | max abs diff of logits, real tokens | max abs logit | argmax agreement |")
    print("|---|---|---|---|")
    ours = np.asarray(keras.ops.convert_to_numpy(model(ids, padding_mask=mask)))
    worst = compare("ours (load_hf_llama_checkpoint) vs LlamaForCausalLM", ours,
                    transformers_logits(directory, ids, mask), mask)
    saved = save_hf_llama_checkpoint(model, os.path.join(temporary, "saved"))
    worst = max(worst, compare("ours vs LlamaForCausalLM.from_pretrained(save_hf_llama_checkpoint(ours))", ours,
                               transformers_logits(saved, ids, mask), mask))
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
    return worst, same


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="a Hugging Face LLaMA directory (default: two random ones)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bar", type=float, default=1e-4)
    args = parser.parse_args()

    import keras
    import torch
    import transformers

    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
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
    worst = max(w for w, _ in results)
    greedy = all(same for _, same in results)
    passed = worst <= args.bar and greedy
    print(f"worst max |diff| {worst:.3e} (bar <= {args.bar:g}), greedy tokens equal: {greedy}: "
          f"{'PASS' if passed else 'FAIL'}")


if __name__ == "__main__":
    main()
