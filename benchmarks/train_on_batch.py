"""train_on_batch against fit: the step time of each application's training model through
``keras.Model.train_on_batch`` against its step time in ``keras.Model.fit``, on the same fixed batches, and how
often keras traced the whole model (``Model._symbolic_build``) during the timed ``train_on_batch`` calls.

    python benchmarks/train_on_batch.py                                   # TensorFlow, every model
    KERAS_BACKEND=jax python benchmarks/train_on_batch.py --markdown
    python benchmarks/train_on_batch.py --models gpt,bert --steps 20 --repeats 3 --json results/tob.json
    python benchmarks/train_on_batch.py --explain --markdown               # + where the difference goes

The bar: train_on_batch within 5% of fit for every model. Keras once traced a model before every
``train_on_batch`` call when one of its layers was never marked built (JAX's trainer runs ``_symbolic_build`` before
every ``*_on_batch`` call; it returns at once when every layer, the compiled loss and the compiled metrics are built).

Models (--models; small but not trivial: a step takes ~10-100 ms on a 2-core CPU), each built and compiled as its
application's recipe builds and compiles it; ``jit_compile`` is the recipe's, or Keras' "auto" (graph mode on a
TensorFlow CPU, XLA under JAX). The recipes' learning-rate callbacks are not passed (the rate stays at its peak):
``train_on_batch`` has no callbacks.

- nmt_transformer: ``nmt.variants.build_recipe("transformer")`` (the "budgeted" recipe: pre-LN, dropout 0.1, label
  smoothing 0.1, Adam) at 2 + 2 layers, d 128, 4 heads, d_ff 256; V 1000, source and target T 32, B 16.
- nmt_bahdanau: ``build_recipe("bahdanau")`` ("base": BiGRU encoder, Bahdanau attention GRU decoder, dropout 0.3,
  Adam, clipnorm 1) at embeddings 64, 128 units; V 1000, T 32, B 16.
- captioning_soft: ``captioning.builders.build_captioner("soft")`` (Show, Attend and Tell, soft attention,
  the doubly stochastic penalty, Adam clipnorm 5, dropout 0.3) with the small CNN (filters 16, 32, 64) on 32 x 32
  images (a 4 x 4 grid), embeddings 64, LSTM 128; V 200, T 16, B 16.
- captioning_transformer: ``build_captioner("transformer")``, the same encoder, 2 decoder layers, d 128, 4 heads,
  d_ff 256; V 200, T 16, B 16.
- bert: ``bert.BertPretrainer(bert.training.built_backbone(config))`` compiled as ``bert.pretraining.run_pretraining``
  compiles it (``compile_budgeted`` over ``compile_for_pretraining``: MLM + NSP losses, BERT's AdamW), 2 layers,
  d 128, 4 heads, d_ff 256, dropout 0.1; V 1000, L 64, 10 predictions, B 16.
- gpt: ``gpt.GPT(GPTConfig(...))`` compiled by ``gpt.runs.compile_for_training`` (causal LM loss, perplexity,
  AdamW, ``jit_compile=True``), 2 layers, d 128, 4 heads, d_ff 512; V 1000, L 64, B 16.

Each model gets K = --steps (default 30) fixed batches of NumPy arrays (a seeded random draw, with padding). Per
repeat (--repeats, default 5), in this order (fit, train_on_batch, fit, train_on_batch, ...):

- fit: ``model.fit(dataset, epochs=2, steps_per_epoch=K, verbose=0)``, the dataset being the K batches
  (``tf.data.Dataset.from_tensor_slices`` over them stacked, repeated). The first epoch is a warm-up (in the first
  repeat it holds the compilation); the step time is the second epoch's time (a callback's ``on_epoch_begin`` to
  ``on_epoch_end``: the K steps and fit's per-epoch work, results synchronised) / K.
- train_on_batch: one warm-up call, then the K batches, one call each; the step time is the K calls' time / K.
  Each call returns its logs as Python floats, so each call waits for its step.

Columns: the medians over the repeats of each step time, and the median of the per-repeat ratios
train_on_batch / fit (above 1: train_on_batch is slower). ``traces``: the ``Model._symbolic_build`` calls during the
timed train_on_batch calls that found something unbuilt and traced the model (a layer of ``_flatten_layers()`` with
``built == False``, or the compiled loss / metrics), out of all its calls (JAX's trainer calls it every time;
TensorFlow's only under a distribution strategy). ``retraces``: the times the train step's Python ran during the
timed calls (a new ``tf.function`` / ``jax.jit`` trace; 0 expected). Within the bar: ratio <= 1.05, 0 traces and 0
retraces.

--explain adds, per model, what train_on_batch does around the train step (fit does it once per epoch, or not at
all), in one more table:
- ms per step of the model's own train function called K times in a row, interleaved with K train_on_batch calls
  (--repeats times, medians). JAX: on the state it carries from step to step, as fit runs it, either not waited for
  (fit: the next step is dispatched while this one runs) or with each step's logs read as Python floats (as
  train_on_batch returns them: it waits for the step). TensorFlow: on tensors, or on the NumPy batches (converted
  at each call, as in train_on_batch).
- ms per call spent in train_on_batch's own steps during those calls (each method wrapped with a timer, medians):
  ``reset_metrics``; JAX: ``_symbolic_build`` (returns at once when nothing is unbuilt), reading the variables'
  values into the step's state (``_get_jax_state``), writing the new state back into every variable
  (``jax_state_sync``); TensorFlow: ``_maybe_symbolic_build``, the train function (its NumPy arguments converted to
  tensors at the call). The rest of a JAX call is mostly the step: dispatched, then waited for when its logs are
  read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MODELS = ("nmt_transformer", "nmt_bahdanau", "captioning_soft", "captioning_transformer", "bert", "gpt")
BAR = 1.05  # train_on_batch within 5% of fit


def log(message):
    print(message, flush=True)


# ---- batches ----------------------------------------------------------------------------------------------------


def _ids(rng, batch, length, vocabulary, min_length=None):
    """(batch, length) int32 ids in [3, vocabulary) (0 = pad, 1 / 2 = start / end), padded with 0 after each row's
    length, drawn in [min_length (default length / 2), length]."""
    ids = rng.integers(3, vocabulary, (batch, length)).astype("int32")
    lengths = rng.integers(min_length or length // 2, length + 1, batch)
    ids[np.arange(length)[None] >= lengths[:, None]] = 0
    return ids


def _shifted(ids):
    """The next-token labels of ``ids``: ids shifted left, 0 after each row's end."""
    out = np.zeros_like(ids)
    out[:, :-1] = ids[:, 1:]
    return out


def _translation_batch(rng, batch, length, vocabulary):
    source, target = _ids(rng, batch, length, vocabulary), _ids(rng, batch, length, vocabulary)
    return (source, target), _shifted(target)


def _caption_batch(rng, batch, length, vocabulary, image_size):
    images = rng.integers(0, 256, (batch, image_size, image_size, 3)).astype("uint8")
    caption = _ids(rng, batch, length, vocabulary)
    return (images, caption), _shifted(caption)


def _bert_batch(rng, batch, length, vocabulary, predictions):
    ids = _ids(rng, batch, length, vocabulary, min_length=length // 2)
    real = (ids != 0).sum(1)
    segment = ((np.arange(length)[None] >= (real // 2)[:, None]) & (ids != 0)).astype("int32")
    positions = np.stack([np.sort(rng.choice(np.arange(1, r), predictions, replace=False)) for r in real])
    positions = positions.astype("int32")
    count = rng.integers(1, predictions + 1, batch)  # real predictions per row, the rest padded (weight 0)
    weights = (np.arange(predictions)[None] < count[:, None]).astype("float32")
    labels = np.take_along_axis(ids, positions, 1) * (weights > 0)
    features = {"token_ids": ids, "segment_ids": segment, "padding_mask": ids != 0, "mask_positions": positions}
    return features, {"mlm": labels.astype("int32"), "nsp": rng.integers(0, 2, batch).astype("int32")}, {"mlm": weights}


def _lm_batch(rng, batch, length, vocabulary):
    window = _ids(rng, batch, length + 1, vocabulary, min_length=length // 2)
    mask = window != 0
    return ({"token_ids": window[:, :-1], "padding_mask": mask[:, :-1]}, window[:, 1:],
            mask[:, 1:].astype("float32"))


# ---- models: built and compiled as each application's recipe does ---------------------------------------------


def _nmt_transformer():
    from attnlayers.applications.nmt.variants import build_recipe

    v, t, b = 1000, 32, 16
    model, _ = build_recipe("transformer", v, v, max_length=t, num_layers=2, d_model=128, num_heads=4,
                            intermediate_dim=256)
    return model, lambda rng: _translation_batch(rng, b, t, v), f"2+2 layers, d 128, V {v}, B {b} x T {t}"


def _nmt_bahdanau():
    from attnlayers.applications.nmt.variants import build_recipe

    v, t, b = 1000, 32, 16
    model, _ = build_recipe("bahdanau", v, v, embedding_dim=64, units=128)
    return model, lambda rng: _translation_batch(rng, b, t, v), f"emb 64, 128 units, V {v}, B {b} x T {t}"


def _captioner(name):
    from attnlayers.applications.captioning.builders import build_captioner

    v, t, b, size = 200, 16, 16, 32
    sizes = (dict(num_layers=2, d_model=128, num_heads=4, intermediate_dim=256) if name == "transformer"
             else dict(embedding_dim=64, units=128))
    model = build_captioner(name, v, seed=0, max_length=t, image_size=size, filters=(16, 32, 64), **sizes)
    shape = "2 layers, d 128" if name == "transformer" else "emb 64, LSTM 128"
    return (model, lambda rng: _caption_batch(rng, b, t, v, size),
            f"{size}x{size} images, {shape}, V {v}, B {b} x T {t}")


def _bert():
    from attnlayers.applications.bert.config import BertConfig
    from attnlayers.applications.bert.pretrainer import BertPretrainer
    from attnlayers.applications.bert.training import built_backbone, compile_budgeted

    v, t, b, p = 1000, 64, 16, 10
    config = BertConfig(vocabulary_size=v, max_sequence_length=t, num_layers=2, num_heads=4, hidden_dim=128,
                        intermediate_dim=256, dropout=0.1)
    model = BertPretrainer(built_backbone(config))
    # run_pretraining's compile (peak 1e-3 here; its callback, which sets the rate each step, is not used)
    compile_budgeted(model, model.compile_for_pretraining, 1e-3, 0.1, 0.01, None)
    return model, lambda rng: _bert_batch(rng, b, t, v, p), f"2 layers, d 128, V {v}, B {b} x T {t}, P {p}"


def _gpt():
    from attnlayers.applications.gpt.model import GPT, GPTConfig
    from attnlayers.applications.gpt.runs import TrainingSettings, compile_for_training

    v, t, b = 1000, 64, 16
    model = GPT(GPTConfig(vocabulary_size=v, max_sequence_length=t, num_layers=2, num_heads=4, hidden_dim=128,
                          intermediate_dim=512, dropout=0.0))
    compile_for_training(model, TrainingSettings(vocabulary_size=v, sequence_length=t, batch_size=b))
    return model, lambda rng: _lm_batch(rng, b, t, v), f"2 layers, d 128, V {v}, B {b} x T {t}"


BUILDERS = {
    "nmt_transformer": _nmt_transformer,
    "nmt_bahdanau": _nmt_bahdanau,
    "captioning_soft": lambda: _captioner("soft"),
    "captioning_transformer": lambda: _captioner("transformer"),
    "bert": _bert,
    "gpt": _gpt,
}


# ---- counting traces --------------------------------------------------------------------------------------------


def trace_reasons(model):
    """What would make ``Model._symbolic_build`` trace ``model`` now: its unbuilt layers (of
    ``_flatten_layers()``, itself included) and an unbuilt compiled loss / metrics container. Empty: it returns at
    once."""
    reasons = [f"{layer.name} ({type(layer).__name__})" for layer in model._flatten_layers() if not layer.built]
    if model._compile_metrics is not None and not model._compile_metrics.built:
        reasons.append("compiled metrics")
    if model._compile_loss is not None and not model._compile_loss.built:
        reasons.append("compiled loss")
    return reasons


class Counters:
    """Wraps ``keras.Model._symbolic_build`` (every model) and a model's ``train_step`` (its Python runs only when
    tf.function / jax.jit traces it, or eagerly), counting while ``active``."""

    def __init__(self):
        import keras

        self.active = False
        self.symbolic_calls, self.traces, self.reasons, self.step_traces = 0, 0, [], 0
        original = keras.Model._symbolic_build

        def _symbolic_build(model, *args, **kwargs):
            if self.active:
                self.symbolic_calls += 1
                reasons = trace_reasons(model)
                if reasons:
                    self.traces += 1
                    self.reasons.append(reasons)
            return original(model, *args, **kwargs)

        keras.Model._symbolic_build = _symbolic_build

    def watch_train_step(self, model):
        """Counts the runs of ``model.train_step``'s Python (before the train function is made: it captures the
        method then)."""
        step = model.train_step

        def train_step(*args, **kwargs):
            if self.active:
                self.step_traces += 1
            return step(*args, **kwargs)

        object.__setattr__(model, "train_step", train_step)

    def reset(self):
        self.symbolic_calls, self.traces, self.reasons, self.step_traces = 0, 0, [], 0


# ---- measuring --------------------------------------------------------------------------------------------------


def _dataset(batches):
    """The batches (same structure each) as a repeated tf.data.Dataset, in order."""
    import keras
    import tensorflow as tf

    stacked = keras.tree.map_structure(lambda *arrays: np.stack(arrays), *batches)
    return tf.data.Dataset.from_tensor_slices(stacked).repeat()


def fit_step(model, dataset, steps):
    """Seconds per step of fit's second epoch of ``steps`` steps (the first is a warm-up)."""
    from epoch_timer import EpochTimer

    timer = EpochTimer()
    model.fit(dataset, epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[timer], shuffle=False)
    return timer.seconds[1] / steps


def train_on_batch_step(model, batches, counters):
    """Seconds per call of ``train_on_batch`` over ``batches`` (one call each) after a warm-up call."""
    model.train_on_batch(*batches[-1])
    if counters is not None:
        counters.active = True
    start = time.perf_counter()
    for batch in batches:
        model.train_on_batch(*batch)
    seconds = time.perf_counter() - start
    if counters is not None:
        counters.active = False
    return seconds / len(batches)


def _full(batch):
    """``(x, y, sample_weight)``, as ``train_on_batch`` hands a batch to the train function."""
    return tuple(batch) + (None,) * (3 - len(batch))


class _Timed:
    """Wraps methods of ``model`` (instance attributes over the class's) and adds up the seconds spent in each."""

    def __init__(self, model, names):
        self.model, self.names, self.seconds = model, names, dict.fromkeys(names, 0.0)
        self.own = {name: vars(model)[name] for name in names if name in vars(model)}  # e.g. train_function
        for name in names:
            method = getattr(model, name)

            def timed(*args, _method=method, _name=name, **kwargs):
                start = time.perf_counter()
                try:
                    return _method(*args, **kwargs)
                finally:
                    self.seconds[_name] += time.perf_counter() - start

            object.__setattr__(model, name, timed)

    def remove(self):
        for name in self.names:
            if name in self.own:
                object.__setattr__(self.model, name, self.own[name])
            else:
                object.__delattr__(self.model, name)


def explain(model, batches, repeats):
    """What train_on_batch does per call that fit does not do per step, for --explain: ms per step of the train
    function called on its own, interleaved with K train_on_batch calls (``repeats`` times, medians), and ms per
    call spent in train_on_batch's own methods during those calls (medians)."""
    import keras

    data = [_full(b) for b in batches]
    loops = {}
    if keras.backend.backend() == "jax":
        import jax

        names = ("reset_metrics", "_symbolic_build", "_get_jax_state", "jax_state_sync")

        def steps(wait):
            def run():
                # fit's per step: the jitted step on the state it carries, the batch put on the device; with `wait`,
                # each step's logs read as Python floats, as train_on_batch returns them (it waits for the step)
                state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True,
                                             optimizer_variables=True, metrics_variables=True)
                model._jax_state_synced = False
                start = time.perf_counter()
                for batch in data:
                    logs, state = model.train_function(state, iter([jax.device_put(batch)]))
                    if wait:
                        {k: float(v) for k, v in logs.items()}
                jax.block_until_ready(state)
                seconds = time.perf_counter() - start
                model._jax_state = dict(zip(("trainable_variables", "non_trainable_variables",
                                             "optimizer_variables", "metrics_variables"), state))
                model.jax_state_sync()
                return seconds / len(data)
            return run

        loops["train step, not waited for (as fit)"] = steps(False)
        loops["train step, each waited for"] = steps(True)
        counts = (f"{len(model.trainable_variables) + len(model.non_trainable_variables)} model, "
                  f"{len(model.optimizer.variables)} optimizer, {len(model.metrics_variables)} metric variables")
    else:
        import tensorflow as tf

        names = ("reset_metrics", "_maybe_symbolic_build", "train_function")
        tensors = [tf.nest.map_structure(lambda a: a if a is None else tf.convert_to_tensor(a), b) for b in data]

        def steps(inputs):
            def run():
                start = time.perf_counter()
                for batch in inputs:
                    {k: float(v) for k, v in model.train_function(iter([batch])).items()}
                return (time.perf_counter() - start) / len(inputs)
            return run

        loops["train function on tensors"] = steps(tensors)
        loops["train function on NumPy arrays"] = steps(data)
        counts = f"{len(model.metrics_variables)} metric variables"
    inside = {name: [] for name in names}

    def train_on_batch_inside():
        timed = _Timed(model, names)
        seconds = train_on_batch_step(model, batches, None)
        timed.remove()
        for name in names:  # the warm-up call included: one call in K + 1
            inside[name].append(timed.seconds[name] / (len(batches) + 1))
        return seconds

    loops["train_on_batch"] = train_on_batch_inside
    times = {label: [] for label in loops}
    for run in loops.values():
        run()  # warm-up
    for values in inside.values():
        values.clear()
    for _ in range(repeats):
        for label, run in loops.items():
            times[label].append(run())
    result = {label: statistics.median(t) * 1e3 for label, t in times.items()}
    result.update({f"in train_on_batch: {name}": statistics.median(t) * 1e3 for name, t in inside.items()})
    result["variables"] = counts
    return result


def measure(name, steps, repeats, counters, explain_it=False):
    import keras

    keras.utils.set_random_seed(0)
    model, make_batch, sizes = BUILDERS[name]()
    counters.watch_train_step(model)
    rng = np.random.default_rng(0)
    batches = [make_batch(rng) for _ in range(steps)]
    dataset = _dataset(batches)
    jit = model.jit_compile
    log(f"{name}: {sizes}, jit_compile={jit}")
    fits, tobs, ratios = [], [], []
    counters.reset()
    for repeat in range(repeats):
        fits.append(fit_step(model, dataset, steps))
        log(f"  {name} repeat {repeat + 1}/{repeats}: fit {fits[-1] * 1e3:.2f} ms/step")
        tobs.append(train_on_batch_step(model, batches, counters))
        ratios.append(tobs[-1] / fits[-1])
        log(f"  {name} repeat {repeat + 1}/{repeats}: train_on_batch {tobs[-1] * 1e3:.2f} ms/step "
            f"(x{ratios[-1]:.3f}; traces so far {counters.traces}/{counters.symbolic_calls}, "
            f"retraces {counters.step_traces})")
    row = {
        "model": name, "sizes": sizes, "weights": model.count_params(), "jit_compile": bool(jit),  # built by now
        "fit_ms": statistics.median(fits) * 1e3, "train_on_batch_ms": statistics.median(tobs) * 1e3,
        "ratio": statistics.median(ratios), "ratios": ratios,
        "fit_ms_all": [s * 1e3 for s in fits], "train_on_batch_ms_all": [s * 1e3 for s in tobs],
        "traces": counters.traces, "symbolic_build_calls": counters.symbolic_calls,
        "trace_reasons": counters.reasons[:3], "retraces": counters.step_traces,
    }
    row["within_bar"] = row["ratio"] <= BAR and row["traces"] == 0 and row["retraces"] == 0
    if explain_it:
        row["explain"] = explain(model, batches, repeats)
        log(f"  {name} explained (ms per step / call): " + "; ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in row["explain"].items()))
    del model
    keras.backend.clear_session()
    return row


def table(rows, backend):
    lines = ["| model | sizes | jit_compile | fit ms/step | train_on_batch ms/step | train_on_batch / fit "
             "(median of repeats) | traces / _symbolic_build calls | retraces | within 5% |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['sizes']} | {r['jit_compile']} | {r['fit_ms']:.2f} | "
                     f"{r['train_on_batch_ms']:.2f} | {r['ratio']:.3f} ({min(r['ratios']):.3f}-"
                     f"{max(r['ratios']):.3f}) | {r['traces']} / {r['symbolic_build_calls']} | {r['retraces']} | "
                     f"{'yes' if r['within_bar'] else 'no'} |")
    explained = [r for r in rows if "explain" in r]
    if explained:  # one more table: ms per step of the loops, ms per call of the pieces
        keys = list(explained[0]["explain"])
        lines += ["", "| model | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
        for r in explained:
            values = [r["explain"].get(k) for k in keys]
            lines.append(f"| {r['model']} | " + " | ".join(
                f"{v:.2f}" if isinstance(v, float) else str(v) for v in values) + " |")
    return f"KERAS_BACKEND={backend}:\n\n" + "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, of {', '.join(MODELS)} (default: all)")
    parser.add_argument("--steps", type=int, default=30, help="K: batches, fit's steps per epoch and the timed "
                                                              "train_on_batch calls per repeat (default 30)")
    parser.add_argument("--repeats", type=int, default=5, help="fit / train_on_batch pairs per model (default 5)")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the rows (and the settings) here")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown at the end")
    parser.add_argument("--explain", action="store_true",
                        help="also time the train function alone and train_on_batch's work around it (see explain)")
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown --models {unknown}; expected some of {list(MODELS)}")
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    import keras

    backend = keras.backend.backend()
    log(f"backend {backend}, keras {keras.__version__}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}; K = {args.steps} steps, {args.repeats} repeats")
    counters = Counters()
    rows, start = [], time.time()
    for name in args.models:
        rows.append(measure(name, args.steps, args.repeats, counters, args.explain))
        r = rows[-1]
        log(f"{name}: fit {r['fit_ms']:.2f} ms, train_on_batch {r['train_on_batch_ms']:.2f} ms, ratio "
            f"{r['ratio']:.3f}, traces {r['traces']}/{r['symbolic_build_calls']}, retraces {r['retraces']}")
    log(f"total {time.time() - start:.0f} s, load average {os.getloadavg()[0]:.1f}")
    print()
    print(table(rows, backend) if args.markdown else "\n".join(
        f"{r['model']:24s} fit {r['fit_ms']:8.2f} ms  train_on_batch {r['train_on_batch_ms']:8.2f} ms  "
        f"ratio {r['ratio']:.3f}  traces {r['traces']}/{r['symbolic_build_calls']}  retraces {r['retraces']}"
        for r in rows))
    outside = [r["model"] for r in rows if not r["within_bar"]]
    if outside:
        print(f"\noutside the bar (ratio > {BAR}, a trace or a retrace): {', '.join(outside)}")
    if args.json:
        directory = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(directory, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"backend": backend, "keras": keras.__version__, "steps": args.steps,
                       "repeats": args.repeats, "rows": rows}, f, indent=1)
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
