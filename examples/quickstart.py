"""attnlayers quickstart: learn to reverse a sequence with one attention layer.

The task is generated here, so nothing is downloaded: the input is 10 random letters, the target is
the same letters reversed ("qwertyuiop" -> "poiuytrewq"). The model is a single cross-attention
step:

    keys    = letter embedding + source position embedding   (where each letter sits)
    values  = letter embedding                               (what each letter is)
    queries = target position embedding                      (which position each output wants)
    context = attnlayers.Attention(score="general")(queries, values, key=keys)   # Luong et al. 2015
    output  = Dense(softmax over letters)(context)

To solve it, output position t has to attend to input position 9 - t: the attention weights should
form an anti-diagonal, which the script draws. It then exports a SavedModel, which serves without
attnlayers installed, and checks that the reloaded model gives the same outputs.

    python examples/quickstart.py                    # under a minute on 2 CPU cores
    python examples/quickstart.py --epochs 3 --out /tmp/quickstart
"""

import argparse
import os
import string
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# model.export(...) below writes a TensorFlow SavedModel.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import attnlayers  # noqa: E402
from attnlayers.positional import PositionEmbedding  # noqa: E402
from attnlayers.visualize import plot_attention  # noqa: E402

LETTERS = np.array(list(string.ascii_lowercase))
LENGTH = 10  # letters per sequence
DIM = 64  # embedding size


def make_data(num_examples, rng):
    """Random letter sequences (as ids 0..25) and their reversals."""
    source = rng.integers(0, len(LETTERS), size=(num_examples, LENGTH), dtype="int32")
    return source, source[:, ::-1].copy()


def build_models():
    """The classifier (letters -> per-position letter probabilities), and a model that exposes the
    attention weights of the same layers."""
    tokens = keras.Input(shape=(LENGTH,), dtype="int32", name="tokens")
    letters = keras.layers.Embedding(len(LETTERS), DIM, name="letter_embedding")(tokens)
    keys = letters + PositionEmbedding(LENGTH, name="source_positions")(letters)
    queries = PositionEmbedding(LENGTH, name="target_positions")(letters)

    attention = attnlayers.Attention(score="general", name="attention")
    context, weights = attention(queries, letters, key=keys, return_attention_scores=True)
    probabilities = keras.layers.Dense(len(LETTERS), activation="softmax", name="output")(context)

    classifier = keras.Model(tokens, probabilities, name="reverser")
    return classifier, keras.Model(tokens, weights, name="alignment")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=5,
                        help="training epochs over 20,000 sequences (default 5)")
    parser.add_argument("--out", default=os.path.join("artifacts", "quickstart"),
                        help="directory for the heatmap and the SavedModel "
                        "(default ./artifacts/quickstart)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the data and the weights (default 0)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    x_train, y_train = make_data(20_000, rng)
    x_test, y_test = make_data(2_000, rng)  # held out: never trained on

    # 1. Train with model.fit.
    model, alignment_model = build_models()
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    progress = 1 if sys.stdout.isatty() else 2  # a progress bar on a terminal, else line per epoch
    model.fit(x_train, y_train, batch_size=64, epochs=args.epochs, validation_split=0.05,
              verbose=progress)

    # 2. Held-out accuracy: per letter, and whole sequences reversed exactly right.
    predictions = np.argmax(model.predict(x_test, batch_size=500, verbose=0), axis=-1)
    token_accuracy = np.mean(predictions == y_test)
    sequence_accuracy = np.mean(np.all(predictions == y_test, axis=-1))
    print(f"held-out token accuracy: {token_accuracy:.4f}, "
          f"sequence accuracy: {sequence_accuracy:.4f}")

    # 3. Where does each output letter look? Plot the attention weights of one held-out example.
    source, output = LETTERS[x_test[0]], LETTERS[predictions[0]]
    weights = alignment_model.predict(x_test[:1], verbose=0)  # (1, T, S)
    heatmap_path = os.path.join(args.out, "attention.png")
    plot_attention(weights, source_tokens=source, target_tokens=output, path=heatmap_path,
                   title="Reversal: attention weights (held-out example)")
    print(f"example: {''.join(source)} -> {''.join(output)}")

    # 4. Export a SavedModel, reload it with plain TensorFlow and compare its `serve` signature.
    export_path = os.path.join(args.out, "saved_model")
    model.export(export_path, verbose=False)
    reloaded = tf.saved_model.load(export_path)
    served = reloaded.serve(tf.constant(x_test[:100]))
    max_diff = float(np.max(np.abs(served.numpy() - model.predict(x_test[:100], verbose=0))))
    print(f"SavedModel vs Keras model: max abs diff {max_diff:.2e}")
    assert max_diff < 1e-5, f"the SavedModel disagrees with the Keras model ({max_diff})"

    print(f"wrote {heatmap_path}")
    print(f"wrote {export_path}")


if __name__ == "__main__":
    main()
