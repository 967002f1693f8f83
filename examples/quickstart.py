"""attnlayers quickstart: an attention translator (Bahdanau et al. 2015) on a made-up language pair.

The data is generated here, so nothing is downloaded: sentences of a small invented source language and
their word-by-word translations into an invented target language in which adjectives follow their noun
("bako dimu" -> "tor wex" becomes "wex tor"), so the right alignment of every word is known:

    source  : kesa bopi lumo timu
    target  : hox vir tal jen          (target word j translates source word alignment[j])

The model is a bidirectional GRU encoder and a Bahdanau attention decoder (attnlayers.BahdanauDecoder),
trained with model.fit on (source, shifted target) batches. The script then

1. translates the held-out test sentences with greedy and beam search (k = 4) and prints corpus BLEU;
2. checks that attention found the alignment: the share of target words whose strongest attention weight
   is on their gold source word;
3. draws the alignment heatmap of one test sentence (Bahdanau et al. Fig. 3);
4. exports a `translate` SavedModel (strings in, strings out, beam search inside), reloads it and checks it
   translates the test sentences exactly as in-process decoding does.

    python examples/quickstart.py                    # about two minutes on 2 CPU cores
    python examples/quickstart.py --epochs 3 --out /tmp/quickstart
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # the export writes a TensorFlow SavedModel

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from attnlayers import BeamSearch  # noqa: E402
from attnlayers.applications import nmt  # noqa: E402
from attnlayers.applications.nmt import evaluate  # noqa: E402
from attnlayers.applications.nmt.export import export_translator  # noqa: E402
from attnlayers.applications.nmt.model import RNNSeq2Seq  # noqa: E402

MAX_LENGTH = 16  # words per sentence, [START] / [END] included


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=12, help="training epochs over 4000 pairs (default 12)")
    parser.add_argument("--out", default=os.path.join("artifacts", "quickstart"),
                        help="where the heatmap and the SavedModel go (default artifacts/quickstart)")
    parser.add_argument("--seed", type=int, default=0, help="data, split and initialization seed")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    keras.utils.set_random_seed(args.seed)

    # Data: 4000 generated pairs, 200 held out for test and 200 for validation; one token per word.
    splits, tokenizers = nmt.synthetic_task(4000, max_length=MAX_LENGTH, seed=args.seed)
    batches = dict(max_source_length=MAX_LENGTH, max_target_length=MAX_LENGTH, batch_size=32)
    train = nmt.make_dataset(splits.train, tokenizers, seed=args.seed, **batches)
    validation = nmt.make_dataset(splits.validation, tokenizers, shuffle=False, **batches)

    model = RNNSeq2Seq(tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size, embedding_dim=64,
                       units=128, attention="bahdanau", dropout=0.1, name="bahdanau")
    model.compile_for_translation(learning_rate=3e-3)
    model.fit(train, validation_data=validation, epochs=args.epochs, verbose=2)

    # 1. BLEU on the held-out sentences.
    test = splits.test
    beam = BeamSearch(4)
    results = {}
    for label, strategy in (("greedy", "greedy"), ("beam search (k=4)", beam)):
        bleu, results[label] = evaluate.evaluate_bleu(model, tokenizers, test, strategy=strategy,
                                                      max_source_length=MAX_LENGTH, max_length=MAX_LENGTH)
        print(f"test BLEU, {label}: {bleu:.1f}")
    for source, target, hypothesis in list(zip(test.source, test.target, results["beam search (k=4)"]))[:3]:
        print(f"  {source}\n    reference: {target}\n    model:     {hypothesis}")

    # 2. Did attention find the alignment?
    print(f"alignment accuracy: {evaluate.alignment_accuracy(model, tokenizers, test):.3f} "
          "(share of target words attending most to their gold source word)")

    # 3. The heatmap of one test sentence.
    heatmap = os.path.join(args.out, "alignment.png")
    evaluate.plot_alignment(model, tokenizers, test.source[0], test.target[0], heatmap)
    print(f"wrote {heatmap}")

    # 4. Export, reload (as a server would: tf.saved_model.load, no attnlayers needed) and compare.
    path = os.path.join(args.out, "translator")
    export_translator(path, model, tokenizers, strategy=beam, max_source_length=MAX_LENGTH, max_length=MAX_LENGTH)
    reloaded = tf.saved_model.load(path)
    served = [t.decode() for t in reloaded.translate(tf.constant(list(test.source)))["translation"].numpy()]
    same = sum(a == b for a, b in zip(served, results["beam search (k=4)"]))
    print(f"exported {path}; the reloaded translator agrees with in-process decoding on {same}/{len(test)} "
          "test sentences")
    print(f"  {reloaded.translate(tf.constant([test.source[0]]))['translation'].numpy()[0].decode()!r}")
    return 0 if same == len(test) else 1


if __name__ == "__main__":
    sys.exit(main())
