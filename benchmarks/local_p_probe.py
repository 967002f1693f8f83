"""Where does local-p's window go while it learns German-English? Trains the NMT `local` recipe (the split,
vocabulary and batch of nmt_quality.py) and, every ``--every`` steps, reads the attention of 200 validation pairs
under teacher forcing: the position of each target word's largest weight as a fraction of its source length,
averaged over the four quarters of the target sentence, its correlation r with the target position, the mean
total weight (local-p's Gaussian makes it < 1) and the validation loss / accuracy. One JSON line per probe.

``--position`` picks the prediction of p_t, g_t = v_p^T tanh(W_p h_t), L the last source index, u the width of
W_p. The layer's two (``LocalAttention(position=...)``):

- ``paper``: p_t = L sigmoid(g_t) (Luong et al. 2015, eq. 9);
- ``diagonal`` (the layer's default): L sigmoid(g_t / sqrt(u) + logit((t + 0.5) / (L + 1))): at
  initialisation p_t ~ t, and Adam moves the gate no faster than the alignment;

and candidates measured on the way, swapped in for ``LocalAttention.aligned_positions``:

- ``diagonal-unscaled``: the diagonal prior without the 1/sqrt(u);
- ``offset``: a bounded offset from the diagonal, clip(t + 2D tanh(g_t), 0, L);
- ``scaled``: eq. 9 with the gate divided by sqrt(u), without the prior.

``--model luong`` trains global attention instead (``--position`` unused): the reference at equal steps.

    python benchmarks/local_p_probe.py --position diagonal --steps 800
"""

import argparse
import json
import math
import time

import keras
import numpy as np
from keras import ops

from attnlayers import local
from attnlayers.applications import nmt
from attnlayers.applications.nmt import variants
from attnlayers.scoring import dense_last_axis

MAX_LENGTH, VOCABULARY = 48, 4000  # as nmt_quality.py


def _last_and_gate(layer, query, value_mask, source_length):
    """L (B|1, 1, 1) the last valid source index, and g_t = v_p^T tanh(W_p h_t) (B, T, 1)."""
    if value_mask is None:
        last = ops.cast(source_length - 1, "float32")
    else:
        last = ops.maximum(ops.sum(ops.cast(value_mask, "float32"), axis=-1, keepdims=True) - 1.0, 0.0)[:, :, None]
    hidden = dense_last_axis(layer.position_dense, query)
    gate = ops.einsum("btu,u->bt", ops.cast(hidden, "float32"), ops.cast(layer.position_v, "float32"))
    return last, gate[..., None]


def _target_positions(query, start_index):
    start = 0 if start_index is None else start_index
    return ops.arange(ops.shape(query)[1], dtype="float32")[None, :, None] + ops.cast(start, "float32")


def diagonal_unscaled(layer, query, value_mask, source_length, start_index=0):
    last, gate = _last_and_gate(layer, query, value_mask, source_length)
    prior = ops.clip((_target_positions(query, start_index) + 0.5) / (last + 1.0), 1e-3, 1 - 1e-3)
    return last * ops.sigmoid(gate + ops.log(prior) - ops.log(1.0 - prior))


def offset(layer, query, value_mask, source_length, start_index=0):
    last, gate = _last_and_gate(layer, query, value_mask, source_length)
    return ops.clip(_target_positions(query, start_index) + 2.0 * layer.window * ops.tanh(gate), 0.0, last)


def scaled(layer, query, value_mask, source_length, start_index=0):
    last, gate = _last_and_gate(layer, query, value_mask, source_length)
    return last * ops.sigmoid(gate / math.sqrt(layer.position_v.shape[0]))


LAYER_POSITIONS = ("paper", "diagonal")
CANDIDATES = {"diagonal-unscaled": diagonal_unscaled, "offset": offset, "scaled": scaled}


class Probe(keras.callbacks.Callback):
    def __init__(self, model, source, target_in, validation, every):
        super().__init__()
        self.probed, self.source, self.target_in = model, source, target_in
        self.validation, self.every = validation, every
        self.source_length = np.sum(source.numpy() != 0, axis=1)
        self.target_length = np.sum(target_in.numpy() != 0, axis=1)
        self.start = time.time()

    def report(self, step):
        weights = np.asarray(self.probed.attention_maps(self.source, self.target_in))  # (B, T, S)
        peak = weights.argmax(-1)
        rows = np.array([(t / max(self.target_length[b] - 1, 1), peak[b, t] / max(self.source_length[b] - 1, 1),
                          weights[b, t].sum())
                         for b in range(len(weights)) for t in range(self.target_length[b])])
        quarter = np.digitize(rows[:, 0], [0.25, 0.5, 0.75])
        correlation = np.corrcoef(rows[:, 0], rows[:, 1])[0, 1] if rows[:, 1].std() > 0 else float("nan")
        scores = self.probed.evaluate(self.validation, verbose=0, return_dict=True)
        print(json.dumps({
            "step": step, "seconds": round(time.time() - self.start),
            "peak_by_target_quarter": [round(float(rows[quarter == k, 1].mean()), 2) for k in range(4)],
            "r": round(float(correlation), 3), "weight_mass": round(float(rows[:, 2].mean()), 3),
            **{k: round(float(v), 4) for k, v in scores.items()},
        }), flush=True)

    def on_train_begin(self, logs=None):
        self.report(0)

    def on_epoch_end(self, epoch, logs=None):
        self.report((epoch + 1) * self.every)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--position", choices=[*LAYER_POSITIONS, *CANDIDATES], default="diagonal")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", choices=("local", "luong"), default="local",
                        help="luong: global attention, the reference at equal steps (--position is ignored)")
    args = parser.parse_args(argv)
    position = args.position if args.position in LAYER_POSITIONS else "paper"
    if args.position in CANDIDATES:
        local.LocalAttention.aligned_positions = CANDIDATES[args.position]
    keras.utils.set_random_seed(args.seed)
    splits = nmt.split_pairs(nmt.load_de_en(), seed=args.seed)
    tokenizers = nmt.build_tokenizers(splits, source_vocabulary_size=VOCABULARY, shared=True)
    lengths = dict(max_source_length=MAX_LENGTH, max_target_length=MAX_LENGTH)
    train = nmt.make_dataset(splits.train, tokenizers, batch_size=64, seed=args.seed, **lengths).repeat()
    validation = nmt.make_dataset(splits.validation, tokenizers, batch_size=200, shuffle=False, **lengths)
    size = tokenizers.target.vocabulary_size
    overrides = dict(position=position) if args.model == "local" else {}
    model, _ = variants.build_recipe(args.model, size, size, None, max_length=MAX_LENGTH, shared_embeddings=True,
                                    **overrides)
    (source, target_in), _ = next(iter(validation))
    probe = Probe(model, source, target_in, validation, args.every)
    model.fit(train, steps_per_epoch=args.every, epochs=args.steps // args.every, callbacks=[probe], verbose=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
