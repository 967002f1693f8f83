"""Generate text with a GPT: from a Hugging Face GPT-2 directory or from an exported SavedModel.

    python examples/generate.py --checkpoint gpt2/ --prompt "Once upon a time" --max-new-tokens 40
    python examples/generate.py --checkpoint OUT/checkpoint --prompt "Hello" --search sample --temperature 0.8 \\
        --top-p 0.9 --seed 1 --stop "\\n\\n"
    python examples/generate.py --checkpoint gpt2/ --search beam --num-beams 4 --prompts-file prompts.txt
    python examples/generate.py --checkpoint gpt2/ --export OUT/generate --max-length 256 --stop "\\n\\n"
    python examples/generate.py --saved-model OUT/generate --prompt "Hello" --search sample --top-k 40

--checkpoint is a directory in Hugging Face's layout: config.json + model.safetensors (the model) and vocab.json +
merges.txt (GPT-2's byte-level BPE), what a GPT-2 download holds and what examples/train_gpt.py saves in
OUT/checkpoint. --saved-model is a directory written by --export (attnlayers.applications.gpt.export.export_gpt):
strings in, text out, the sampling settings as inputs; it serves with TensorFlow alone. There the loop length
(--max-length) and the stop strings were fixed at export: --stop given with --saved-model only cuts the text, and
beam search is not exported.

Searches (--search): greedy (the most probable token), beam (--num-beams hypotheses, the best returned), sample
(--temperature, 0 meaning greedy; --top-k, 0 meaning off; --top-p, 1 meaning off; --seed: the same seed gives the
same text). --stop strings end a row's generation (as tokenized on their own) and the text is cut before them.
Prompts: --prompt (repeatable) or --prompts-file (one prompt a line, blank lines skipped; write a newline inside a
prompt as a backslash and n). Prompts longer than the model's context are refused with --checkpoint; a SavedModel
keeps their last tokens and says so.
"""

import argparse
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")  # TensorFlow's start-up lines (attnlayers.startup)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # the tokenizer's ops and the SavedModel are TensorFlow

from attnlayers.applications.core.runs.cli import UsageError, check_sampling_arguments, run_script, usage_error

PROG = os.path.basename(__file__)
SEARCHES = ("greedy", "beam", "sample")
UNKNOWN_LOOP_ROOM = 2**30  # max_new_tokens for "run to the end" when a SavedModel's loop length is not static: large,
# yet far enough below 2**31 that the loop's int32 "prompt length + max_new_tokens" cannot wrap around


def _unescape(text):
    """Backslash escapes of the command line (\\n, \\t, \\\\) as characters."""
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape") if "\\" in text else text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", metavar="DIR",
                        help="a Hugging Face GPT-2 directory: config.json, model.safetensors, vocab.json, merges.txt")
    source.add_argument("--saved-model", metavar="DIR", help="a SavedModel written by --export")
    parser.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable; \\n is a newline)")
    parser.add_argument("--prompts-file", metavar="FILE", help="prompts, one a line (UTF-8)")
    parser.add_argument("--max-length", type=int, default=None,
                        help="tokens per sequence, prompt included (default: the longest prompt + --max-new-tokens, "
                             "else the model's context; with --export, the SavedModel's fixed loop length)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="the most tokens generated per prompt (default: up to the model's context, "
                             "--max-length or the SavedModel's loop length; more is clipped to that, with a note)")
    parser.add_argument("--search", choices=SEARCHES, default=None, help="greedy (default) | beam | sample")
    parser.add_argument("--strategy", choices=SEARCHES, default=None, dest="old_search", help=argparse.SUPPRESS)
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sample: the softmax temperature, 0 = greedy (default 1)")
    parser.add_argument("--top-k", type=int, default=0, help="sample: keep the k most probable tokens (0 = off)")
    parser.add_argument("--top-p", type=float, default=1.0,
                        help="sample: keep the smallest set of tokens holding this probability mass, nucleus "
                             "sampling (1 = off)")
    parser.add_argument("--num-beams", type=int, default=4, help="beam: the beam size (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="sample: the seed (default 0)")
    parser.add_argument("--stop", action="append", default=[], help="a stop string (repeatable; \\n is a newline)")
    parser.add_argument("--export", metavar="DIR", default=None,
                        help="with --checkpoint: write the text-generation SavedModel here")
    parser.add_argument("--input-length", type=int, default=None,
                        help="with --export: the prompt width in tokens (default half of --max-length)")
    args = parser.parse_args(argv)
    if args.old_search is not None:  # the flag's deprecated name
        if args.search is not None:
            parser.error("--strategy is the deprecated name of --search; give --search only")
        warnings.warn("--strategy is deprecated; use --search (same values)", DeprecationWarning)
        args.search = args.old_search
    args.search = args.search or "greedy"
    if args.max_length is not None and args.max_length < 2:
        parser.error("--max-length must be at least 2 (a prompt token and a generated one)")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        parser.error("--max-new-tokens must be at least 1")
    check_sampling_arguments(parser, args)
    if args.num_beams < 1:
        parser.error(f"--num-beams must be at least 1; received {args.num_beams}")
    if args.search != "sample":
        changed = [flag for flag, value, default in (("--temperature", args.temperature, 1.0),
                                                      ("--top-k", args.top_k, 0), ("--top-p", args.top_p, 1.0))
                   if value != default]
        if changed:
            parser.error(f"{', '.join(changed)} apply to --search sample; received --search {args.search}")
    if args.search != "beam" and args.num_beams != 4:
        parser.error(f"--num-beams applies to --search beam; received --search {args.search}")
    if any(not stop for stop in args.stop):
        parser.error("--stop strings must not be empty")
    if args.saved_model is not None:
        if args.export is not None:
            parser.error("--export writes a SavedModel from --checkpoint; received --saved-model")
        if args.max_length is not None:
            parser.error("--max-length is fixed in a SavedModel (chosen at --export); use --max-new-tokens")
        if args.search == "beam":
            parser.error("the SavedModel samples (temperature 0 is greedy); beam search needs --checkpoint")
    if args.input_length is not None and args.export is None:
        parser.error("--input-length applies to --export")
    args.prompt = [_unescape(p) for p in args.prompt]
    args.stop = [_unescape(s) for s in args.stop]
    return args


def read_prompts(args):
    prompts = list(args.prompt)
    if args.prompts_file is not None:
        try:
            with open(args.prompts_file, encoding="utf-8") as f:
                prompts += [_unescape(line.rstrip("\r\n")) for line in f if line.strip()]
        except UnicodeDecodeError as error:
            raise UsageError(f"{args.prompts_file}: not UTF-8 text ({error.reason})") from None
        except OSError as error:
            raise usage_error(error) from None
    if not prompts and args.export is None:
        raise UsageError("no prompt: give --prompt TEXT (repeatable) or --prompts-file FILE")
    return prompts


def search_of(args):
    from attnlayers.decoding import BeamSearch, Sampling

    if args.search == "beam":
        return BeamSearch(args.num_beams)
    if args.search == "sample" and args.temperature > 0:
        return Sampling(temperature=args.temperature, top_k=args.top_k or None,
                        top_p=args.top_p if args.top_p < 1 else None, seed=args.seed)
    return "greedy"  # greedy, or sampling at temperature 0


def load_checkpoint(directory):
    from attnlayers.applications.gpt import load_hf_checkpoint
    from attnlayers.applications.gpt.tokenizer import GPT2Tokenizer

    if not os.path.isdir(directory):
        raise UsageError(f"--checkpoint {directory}: not a directory")
    try:
        model, _ = load_hf_checkpoint(directory)
        tokenizer = GPT2Tokenizer.from_directory(directory)
    except (ValueError, OSError) as error:
        raise usage_error(error) from None
    return model, tokenizer


def generate_from_checkpoint(args, prompts):
    from attnlayers.applications.gpt.export import export_gpt
    from attnlayers.applications.gpt.generation import generate_text

    model, tokenizer = load_checkpoint(args.checkpoint)
    max_new_tokens = args.max_new_tokens
    if args.export is not None:
        try:
            export_gpt(args.export, model, tokenizer, args.max_length, input_length=args.input_length,
                       stop_strings=args.stop or None)
        except ValueError as error:
            raise usage_error(error) from None
        print(f"wrote the SavedModel {args.export} (signature 'generate')")
    if not prompts:
        return []
    if max_new_tokens is not None:
        limit = model.config.max_sequence_length if args.max_length is None else args.max_length
        shortest = min((len(row) for row in tokenizer.tokenize(prompts).to_list()), default=0)
        max_new_tokens = _clip_new_tokens(max_new_tokens, limit - shortest, f"{limit} tokens, prompt included")
    try:
        texts = generate_text(model, tokenizer, prompts, max_length=args.max_length,
                              max_new_tokens=max_new_tokens, search=search_of(args), seed=args.seed,
                              stop_strings=args.stop or None)
    except ValueError as error:
        raise usage_error(error) from None
    return [(text, False) for text in texts]


def _clip_new_tokens(requested, room, context):
    """``requested`` new tokens, clipped to the ``room`` the context leaves (at least 1), with a note when it is."""
    if 1 <= room < requested:  # room < 1: a prompt too long for the context, refused where it is generated
        print(f"note: --max-new-tokens {requested} is more than the context allows ({context}): generating at "
              f"most {room} tokens per prompt", file=sys.stderr)
        return room
    return requested


def saved_model_loop_length(signature):
    """L, the static output length of a 'generate' signature (its ``token_ids`` (B, L)), or None when unknown."""
    spec = signature.structured_outputs.get("token_ids")
    shape = getattr(spec, "shape", None)
    if shape is None or shape.rank != 2 or shape[1] is None:
        return None
    return int(shape[1])


def generate_from_saved_model(args, prompts):
    import tensorflow as tf
    from attnlayers.applications.gpt.generation import cut_at_stop_strings

    if not os.path.isdir(args.saved_model):
        raise UsageError(f"--saved-model {args.saved_model}: not a directory")
    try:
        loaded = tf.saved_model.load(args.saved_model)
    except (OSError, ValueError, RuntimeError) as error:
        raise UsageError(f"--saved-model {args.saved_model}: cannot be loaded ({' '.join(str(error).split())[:200]})")
    signature = loaded.signatures.get("generate")
    expected = {"text", "temperature", "top_k", "top_p", "seed", "max_new_tokens"}
    if signature is None or set(signature.structured_input_signature[1]) != expected:
        raise UsageError(f"--saved-model {args.saved_model}: no 'generate' signature taking {sorted(expected)} "
                         "(write one with --checkpoint DIR --export DIR)")
    temperature = args.temperature if args.search == "sample" else 0.0
    length = saved_model_loop_length(signature)
    if args.max_new_tokens is None:  # run to the end of the loop: L - prompt tokens at most
        max_new_tokens = UNKNOWN_LOOP_ROOM if length is None else length
    elif length is None:
        max_new_tokens = min(args.max_new_tokens, UNKNOWN_LOOP_ROOM)
    else:  # the SavedModel tokenizes the prompts: the room is L - 1 at most (a prompt holds a token)
        max_new_tokens = _clip_new_tokens(args.max_new_tokens, length - 1,
                                          f"the SavedModel's loop length {length}, prompt included")
    try:
        out = signature(text=tf.constant(prompts), temperature=tf.constant(temperature, tf.float32),
                        top_k=tf.constant(args.top_k, tf.int32), top_p=tf.constant(args.top_p, tf.float32),
                        seed=tf.constant(args.seed, tf.int32),
                        max_new_tokens=tf.constant(max_new_tokens, tf.int32))
    except tf.errors.InvalidArgumentError as error:
        raise UsageError(" ".join(error.message.split())[:300]) from None
    texts = [t.decode("utf-8", errors="replace") for t in out["text"].numpy().tolist()]
    return [(cut_at_stop_strings(text, args.stop), bool(cut))
            for text, cut in zip(texts, out["truncated"].numpy().tolist())]


def run(args):
    prompts = read_prompts(args)
    if args.checkpoint is not None:
        results = generate_from_checkpoint(args, prompts)
    else:
        results = generate_from_saved_model(args, prompts)
    for i, (prompt, (text, truncated)) in enumerate(zip(prompts, results), start=1):
        note = " (prompt truncated: its first tokens were dropped)" if truncated else ""
        print(f"=== {i}: {prompt!r}{note}")
        print(prompt + text)
    return 0


def main(argv=None):
    return run_script(PROG, parse_args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
