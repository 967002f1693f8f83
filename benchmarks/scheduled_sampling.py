"""Scheduled sampling against teacher forcing, same budget, seed and settings: German-English (the NMT quality
bench's split, vocabulary and recipes: Luong / Bahdanau / local-p and the Transformer) and the captioning scenes
(soft attention, the captioning quality bench's data). Each run trains for --minutes, then reports BLEU with greedy
and beam decoding (captioning: BLEU-4 and exact match, greedy and beam) and the exposure bias itself: next-token
accuracy on the held-out references when the model reads the reference prefix (teacher forced) against greedy
free running compared position by position (``applications.core.evaluation.exposure_bias``), and their gap.

    python benchmarks/scheduled_sampling.py --task nmt --model luong --minutes 20 --seed 0       # teacher forcing
    python benchmarks/scheduled_sampling.py --task nmt --model luong --minutes 20 --seed 0 \\
        --scheduled-sampling inverse_sigmoid:1000                                               # scheduled sampling
    python benchmarks/scheduled_sampling.py --task captioning --minutes 15 --seed 1 --compare \\
        --scheduled-sampling inverse_sigmoid:500        # both, one after the other, then the side-by-side table
    python benchmarks/scheduled_sampling.py --table

One JSON per run in --results (TASK-MODEL-SCHEDULE-seedS-Mmin.json); --table prints every configuration with and
without scheduled sampling side by side. A smoke run (seconds of training, a few test sentences):

    python benchmarks/scheduled_sampling.py --task nmt --model luong --variant tiny --minutes 0.1 --num-test 16 \\
        --compare --scheduled-sampling linear:1,0.05 --results /tmp/ss
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # loaded by file path too (its test)
import runs

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "scheduled_sampling"
NMT_MODELS = ("bahdanau", "luong", "local", "transformer")
CAPTIONING_MODELS = ("soft", "hard")
NMT_MAX_LENGTH = 48  # as benchmarks/nmt_quality.py
CAPTION_MAX_LENGTH, IMAGE_SIZE = 20, 64  # as benchmarks/captioning_quality.py


def parse_args(argv=None):
    from attnlayers.applications.core.runs import scheduled_sampling_flags as sampling_flags

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=("nmt", "captioning"), default="nmt")
    parser.add_argument("--model", default=None,
                        help=f"nmt: {', '.join(NMT_MODELS)} (default luong); captioning: soft (default) or hard")
    parser.add_argument("--variant", default=None, help="nmt: the recipe (default: the model's best; tiny for smoke)")
    sampling_flags.add_scheduled_sampling_arguments(parser)
    parser.add_argument("--compare", action="store_true",
                        help="train without, then with --scheduled-sampling (one after the other), and print both")
    parser.add_argument("--minutes", type=float, default=None,
                        help="training budget per run (default 20 for nmt, 15 for captioning)")
    parser.add_argument("--seed", type=int, default=0, help="split, shuffle, initialization and coin seed")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--beam-size", type=int, default=None, help="beam width (default 4 nmt, 3 captioning)")
    parser.add_argument("--num-test", type=int, default=1000,
                        help="held-out references evaluated (the first N of the test split; default all 1000)")
    parser.add_argument("--num-train", type=int, default=8000, help="captioning: training scenes (default 8000)")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS, help="where JSON results are written")
    parser.add_argument("--table", action="store_true", help="print the table of all results and exit")
    parser.add_argument("--plot", type=pathlib.Path, default=None,
                        help="with --table: also draw, per task, token accuracy against the position in the "
                             "reference, teacher forced and free running, with and without scheduled sampling (PNG)")
    args = parser.parse_args(argv)
    if args.table:
        return args
    models = NMT_MODELS if args.task == "nmt" else CAPTIONING_MODELS
    args.model = args.model or models[1 if args.task == "nmt" else 0]
    if args.model not in models:
        parser.error(f"--model {args.model} is not a {args.task} model; choose from {', '.join(models)}")
    sampling_flags.check_scheduled_sampling_arguments(parser, args)
    if args.compare and args.scheduled_sampling is None:
        parser.error("--compare needs --scheduled-sampling SCHEDULE (the run to compare with teacher forcing)")
    if args.task == "nmt":
        from attnlayers.applications.nmt import variants

        table = variants.variants(args.model)
        if args.variant is not None and args.variant not in table:
            parser.error(f"--variant must be one of {sorted(table)} for --model {args.model}")
        args.variant = variants.get_variant(args.model, args.variant).name
    elif args.variant is not None:
        parser.error("--variant applies to --task nmt")
    args.minutes = args.minutes or (20.0 if args.task == "nmt" else 15.0)
    args.beam_size = args.beam_size or (4 if args.task == "nmt" else 3)
    for flag in ("minutes", "batch_size", "beam_size", "num_test", "num_train"):
        if not getattr(args, flag) > 0:
            parser.error(f"--{flag.replace('_', '-')} must be positive")
    return args


def label(args, scheduled):
    schedule = "teacher_forcing" if scheduled is None else scheduled.replace(":", "_").replace(",", "_")
    model = args.model if args.task == "captioning" or args.variant in (None, "base", "budgeted") else (
        f"{args.model}-{args.variant}")
    return f"{args.task}-{model}-{schedule}-seed{args.seed}-{args.minutes:g}min"


def exposure_length(model, wanted):
    """The free-running length for the exposure bias: ``wanted`` (the longest reference + the start token), at most
    the model's own limit (the Transformer's position table: 48; the reference positions it cannot reach are then
    counted as unreachable)."""
    limit = model.max_generation_length
    return wanted if limit is None else min(wanted, limit)


def _exposure(model, dataset, max_length):
    from attnlayers.applications.core.evaluation.exposure_bias import exposure_bias

    start = time.perf_counter()
    result = exposure_bias(model, dataset, max_length=exposure_length(model, max_length))
    print(f"exposure bias: teacher forced {result['teacher_forced_accuracy']:.4f}, free running "
          f"{result['free_running_accuracy']:.4f}, gap {result['gap']:.4f} ({time.perf_counter() - start:.1f} s)",
          flush=True)
    return result


def _sampler_argument(args, scheduled):
    return None if scheduled is None else {"schedule": scheduled, "prediction": args.scheduled_sampling_prediction,
                                           "seed": args.seed}


def _callbacks(model, minutes, recipe_callbacks=()):
    from attnlayers.applications import core
    from attnlayers.applications.core.runs import scheduled_sampling_flags as sampling_flags

    return [*sampling_flags.logger_callbacks(model), core.TimeBudget(minutes * 60), *recipe_callbacks]


def run_nmt(args, scheduled):
    import keras

    from attnlayers.applications import nmt
    from attnlayers.applications.nmt import evaluate, variants
    from attnlayers.decoding import BeamSearch

    keras.utils.set_random_seed(args.seed)
    splits = nmt.split_pairs(nmt.load_de_en(), seed=args.seed)
    test = splits.test[: args.num_test]
    from nmt_quality import shared_tokenizers  # the same learned vocabulary file as the quality bench's

    tokenizers = shared_tokenizers(splits, args.results, args.seed)
    lengths = dict(max_source_length=NMT_MAX_LENGTH, max_target_length=NMT_MAX_LENGTH)
    train = nmt.make_dataset(splits.train, tokenizers, batch_size=args.batch_size, seed=args.seed, **lengths)
    validation = nmt.make_dataset(splits.validation, tokenizers, batch_size=200, shuffle=False, **lengths)
    held_out = nmt.make_dataset(test, tokenizers, batch_size=100, shuffle=False, pad_to_max_length=True, **lengths)
    vocabulary = tokenizers.target.vocabulary_size
    keras.utils.set_random_seed(args.seed)  # the same initial weights whether the tokenizer was learned or read
    model, recipe_callbacks = variants.build_recipe(args.model, vocabulary, vocabulary, args.variant,
                                                   max_length=NMT_MAX_LENGTH, shared_embeddings=True,
                                                   minutes=args.minutes,
                                                   scheduled_sampling=_sampler_argument(args, scheduled))

    def evaluate_model(model):
        result = {}
        for name, search in (("greedy", "greedy"), (f"beam{args.beam_size}", BeamSearch(args.beam_size, alpha=0.6))):
            start = time.perf_counter()
            bleu, hypotheses = evaluate.evaluate_bleu(model, tokenizers, test, search=search,
                                                      max_source_length=NMT_MAX_LENGTH, max_length=NMT_MAX_LENGTH)
            result[f"bleu_{name}"] = round(bleu, 2)
            print(f"BLEU {name} {bleu:.2f} ({time.perf_counter() - start:.1f} s)", flush=True)
        result["examples"] = [{"source": s, "reference": r, "hypothesis": h}
                              for s, r, h in list(zip(test.source, test.target, hypotheses))[:3]]
        result["exposure_bias"] = _exposure(model, held_out, NMT_MAX_LENGTH + 1)  # + 1: the start token
        return result

    return model, train, validation, _callbacks(model, args.minutes, recipe_callbacks), evaluate_model


def run_captioning(args, scheduled):
    import keras

    from attnlayers.applications.captioning import data, evaluate, predict
    from attnlayers.applications.captioning.builders import DEFAULT_QUERY, build_captioner
    from attnlayers.decoding import BeamSearch

    keras.utils.set_random_seed(args.seed)
    splits = data.load_scenes(args.num_train, 500, args.num_test, image_size=IMAGE_SIZE, seed=args.seed)
    vocabulary = data.CaptionVocabulary.build(splits.train)
    options = dict(batch_size=args.batch_size, image_size=IMAGE_SIZE, max_length=CAPTION_MAX_LENGTH)
    train = data.make_dataset(splits.train, vocabulary, seed=args.seed, **options)
    validation = data.make_dataset(splits.validation, vocabulary, shuffle=False, **options)
    held_out = data.make_dataset(splits.test, vocabulary, shuffle=False, **{**options, "batch_size": 100})
    keras.utils.set_random_seed(args.seed)
    model = build_captioner(args.model, vocabulary.vocabulary_size, seed=args.seed, image_size=IMAGE_SIZE,
                            max_length=CAPTION_MAX_LENGTH, query=DEFAULT_QUERY[args.model],
                            scheduled_sampling=_sampler_argument(args, scheduled))

    def evaluate_model(model):
        result = {}
        for name, search in (("greedy", "greedy"), (f"beam{args.beam_size}", BeamSearch(args.beam_size))):
            start = time.perf_counter()
            hypotheses = predict.caption_images(model, splits.test.images, vocabulary, search=search,
                                                max_length=CAPTION_MAX_LENGTH)
            metrics = evaluate.caption_metrics(hypotheses, splits.test.captions)
            result[f"bleu4_{name}"] = round(float(metrics["BLEU-4"]), 2)
            result[f"exact_match_{name}"] = round(float(evaluate.exact_match(hypotheses, splits.test.captions)), 4)
            print(f"{name}: BLEU-4 {result[f'bleu4_{name}']:.2f}, exact match {result[f'exact_match_{name}']:.3f} "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
            if name == "greedy":
                result["examples"] = [{"reference": r[0], "hypothesis": h}
                                      for r, h in list(zip(splits.test.captions, hypotheses))[:3]]
        result["exposure_bias"] = _exposure(model, held_out, CAPTION_MAX_LENGTH + 1)  # + 1: the start token
        return result

    from attnlayers.applications import core

    return model, train, validation, _callbacks(model, args.minutes, [core.BestWeights("val_loss")]), evaluate_model


def run(args, scheduled):
    """One training run (``scheduled``: the canonical schedule spec, or None for teacher forcing) -> its result."""
    import keras

    from attnlayers.applications import core

    keras.backend.clear_session()
    args.results.mkdir(parents=True, exist_ok=True)
    name = label(args, scheduled)
    print(f"\n== {name}", flush=True)
    build = run_nmt if args.task == "nmt" else run_captioning
    model, train, validation, callbacks, evaluate_model = build(args, scheduled)
    record = {"task": args.task, "model": args.model, "variant": args.variant, "seed": args.seed,
              "minutes": args.minutes, "batch_size": args.batch_size, "num_test": args.num_test,
              "scheduled_sampling": scheduled,
              "prediction": args.scheduled_sampling_prediction if scheduled else None,
              **runs.machine_record()}
    result = core.run_recipe(model, train, validation=validation, epochs=10_000, callbacks=callbacks,
                             evaluate=evaluate_model, out_dir=args.results, record=record, verbose=2,
                             results_file=f"{name}.json")
    history = result["training"].get("history", {})
    if "scheduled_sampling_epsilon" in history:
        result["final_epsilon"] = history["scheduled_sampling_epsilon"][-1]
        with open(result["results_path"], "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, ensure_ascii=False)
    return result


# ----------------------------------------------------------------------------------------------------------
# The table


def _row(r):
    bias, training = r["exposure_bias"], r["training"]
    if r["task"] == "nmt":
        scores = [f"{r['bleu_greedy']:.2f}", f"{next(v for k, v in r.items() if k.startswith('bleu_beam')):.2f}"]
    else:
        beam = next(k for k in r if k.startswith("bleu4_beam"))
        scores = [f"{r['bleu4_greedy']:.2f}", f"{r[beam]:.2f}", f"{r['exact_match_greedy']:.3f}",
                  f"{r[beam.replace('bleu4', 'exact_match')]:.3f}"]
    schedule = "teacher forcing" if r["scheduled_sampling"] is None else (
        f"{r['scheduled_sampling']} ({r['prediction']}; final eps {r.get('final_epsilon', float('nan')):.2f})")
    model = r["model"] + (f" ({r['variant']})" if r.get("variant") not in (None, "base", "budgeted") else "")
    return (f"| {model} | {r['seed']} | {r['minutes']:g} | {schedule} | {training['steps']} | "
            + " | ".join(scores)
            + f" | {bias['teacher_forced_accuracy']:.4f} | {bias['free_running_accuracy']:.4f} | {bias['gap']:.4f} |")


def table(results_dir, names=None):
    rows = [json.loads(p.read_text()) for p in sorted(pathlib.Path(results_dir).glob("*.json"))
            if names is None or p.stem in names]
    rows = [r for r in rows if isinstance(r, dict) and "exposure_bias" in r]
    for task in ("nmt", "captioning"):
        chosen = sorted((r for r in rows if r["task"] == task),
                        key=lambda r: (r["model"], r.get("variant") or "", r["minutes"], r["seed"],
                                       r["scheduled_sampling"] is not None, r["scheduled_sampling"] or ""))
        if not chosen:
            continue
        scores = ("BLEU greedy | BLEU beam" if task == "nmt" else
                  "BLEU-4 greedy | BLEU-4 beam | exact greedy | exact beam")
        print(f"\n{'German-English' if task == 'nmt' else 'Captioning (scenes)'}: held-out BLEU and the exposure bias "
              "(token accuracy teacher forced vs free running)\n")
        print(f"| model | seed | minutes | training | steps | {scores} | teacher-forced acc | free-running acc | gap |")
        print("|---" * (9 + scores.count("|")) + "|")
        for r in chosen:
            print(_row(r))


def plot_positions(results_dir, path, task="captioning", least_tokens=100):
    """Token accuracy against the position t in the reference (``exposure_bias``'s ``by_position``), teacher
    forced (dashed) and free running (solid), teacher forcing against scheduled sampling, one panel per seed of
    ``task``; positions with fewer than ``least_tokens`` reference tokens are left out. Returns ``path`` (None
    without matplotlib or results)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [json.loads(p.read_text()) for p in sorted(pathlib.Path(results_dir).glob(f"{task}-*.json"))]
    rows = [r for r in rows if isinstance(r, dict) and "exposure_bias" in r]
    seeds = sorted({r["seed"] for r in rows})
    if not seeds:
        return None
    figure, axes = plt.subplots(1, len(seeds), figsize=(5.5 * len(seeds), 3.8), squeeze=False, sharey=True)
    for axis, seed in zip(axes[0], seeds):
        for r in (r for r in rows if r["seed"] == seed):
            by = r["exposure_bias"]["by_position"]
            t = [i for i, c in enumerate(by["tokens"]) if c >= least_tokens]
            name = "teacher forcing" if r["scheduled_sampling"] is None else f"scheduled sampling ({r['scheduled_sampling']})"
            colour = "tab:blue" if r["scheduled_sampling"] is None else "tab:orange"
            axis.plot(t, [by["teacher_forced"][i] for i in t], "--", color=colour, alpha=0.6,
                      label=f"{name}: reads the reference")
            axis.plot(t, [by["free_running"][i] for i in t], "-", color=colour,
                      label=f"{name}: reads its own words (gap {r['exposure_bias']['gap']:.3f})")
        axis.set_title(f"{task}, seed {seed}")
        axis.set_xlabel("position in the reference (tokens)")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("token accuracy")
    axes[0][-1].legend(fontsize=7, loc="lower left")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        table(args.results)
        for task in ("captioning", "nmt"):
            if args.plot is not None:
                path = plot_positions(args.results, args.plot.with_name(f"{args.plot.stem}-{task}.png"), task)
                if path:
                    print(f"wrote {path}")
        return 0
    runs = [None, args.scheduled_sampling] if args.compare else [args.scheduled_sampling]
    names = []
    for scheduled in runs:
        run(args, scheduled)
        names.append(label(args, scheduled))
    table(args.results, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
