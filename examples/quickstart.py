"""attnlayers quickstart: an attention translator (Bahdanau et al. 2015) on a made-up language pair.

The data is generated here, so nothing is downloaded: sentences of a small invented source language and
their word-by-word translations into an invented target language in which adjectives follow their noun
("bako dimu" -> "tor wex" becomes "wex tor"), so the right alignment of every word is known:

    source  : kesa bopi lumo timu
    target  : hox vir tal jen          (target word j translates source word alignment[j])

The model is a bidirectional GRU encoder and a Bahdanau attention decoder (attnlayers.BahdanauDecoder),
trained with model.fit on (source, shifted target) batches; the weights of the epoch with the best validation
accuracy are kept. The script then

1. translates the held-out test sentences with greedy and beam search (k = 4) and prints corpus BLEU;
2. checks that attention found the alignment: the share of target words whose strongest attention weight
   is on their gold source word;
3. draws the alignment heatmap of one test sentence (Bahdanau et al. Fig. 3);
4. exports a `translate` SavedModel (strings in, strings out, beam search inside), reloads it and checks it
   translates the test sentences exactly as in-process decoding does.

    python examples/quickstart.py                    # about two minutes on 2 CPU cores
    python examples/quickstart.py --epochs 3 --out /tmp/quickstart
    python examples/quickstart.py --strategy mirrored --precision mixed_bfloat16
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")  # TensorFlow's start-up lines (attnlayers.startup)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # the export writes a TensorFlow SavedModel

from attnlayers import BeamSearch  # noqa: E402  (first: it loads keras and TensorFlow quietly)
from attnlayers.applications import core, nmt  # noqa: E402
from attnlayers.applications.nmt import evaluate  # noqa: E402
from attnlayers.applications.nmt.export import export_translator  # noqa: E402
from attnlayers.applications.nmt.model import RNNSeq2Seq  # noqa: E402

import keras  # noqa: E402  (after attnlayers, which loads it)
import tensorflow as tf  # noqa: E402

MAX_LENGTH = 16  # words per sentence, [START] / [END] included


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=12, help="training epochs over 3600 pairs (default 12)")
    parser.add_argument("--out", default=os.path.join("artifacts", "quickstart"),
                        help="where the heatmap, the SavedModel and results.json go (default artifacts/quickstart)")
    parser.add_argument("--seed", type=int, default=0, help="data, split and initialization seed")
    core.add_runtime_arguments(parser)
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    if keras.backend.backend() != "tensorflow":
        parser.error(f"the quickstart exports and reloads a TensorFlow SavedModel: it needs KERAS_BACKEND=tensorflow "
                     f"(this run: {keras.backend.backend()}; examples/train_nmt.py trains under JAX)")
    try:
        strategy = core.runtime_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    keras.utils.set_random_seed(args.seed)

    # Data: 4000 generated pairs, 200 held out for test and 200 for validation; one token per word.
    splits, tokenizers = nmt.synthetic_task(4000, max_length=MAX_LENGTH, seed=args.seed)
    batches = dict(max_source_length=MAX_LENGTH, max_target_length=MAX_LENGTH, batch_size=32)
    train = nmt.make_dataset(splits.train, tokenizers, seed=args.seed, **batches)
    validation = nmt.make_dataset(splits.validation, tokenizers, shuffle=False, **batches)

    with strategy.scope():
        model = RNNSeq2Seq(tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size, embedding_dim=64,
                           units=128, attention="bahdanau", dropout=0.1, name="bahdanau")
        model.compile_for_translation(learning_rate=3e-3)
    test, beam, served = splits.test, BeamSearch(4), {}

    # 1. BLEU on the held-out sentences; 2. did attention find the alignment?
    def evaluate_model(model):
        bleu = {}
        for label, search in (("greedy", "greedy"), ("beam search (k=4)", beam)):
            bleu[label], served[label] = evaluate.evaluate_bleu(
                model, tokenizers, test, search=search, max_source_length=MAX_LENGTH, max_length=MAX_LENGTH)
            print(f"test BLEU, {label}: {bleu[label]:.1f}")
        for source, target, hypothesis in list(zip(test.source, test.target, served["beam search (k=4)"]))[:3]:
            print(f"  {source}\n    reference: {target}\n    model:     {hypothesis}")
        accuracy = evaluate.alignment_accuracy(model, tokenizers, test)
        print(f"alignment accuracy: {accuracy:.3f} (share of target words attending most to their gold source word)")
        return {"bleu": bleu, "alignment_accuracy": accuracy}

    # 3. The heatmap of one test sentence.
    def pictures(model, out):
        heatmap = os.path.join(out, "alignment.png")
        evaluate.plot_alignment(model, tokenizers, test.source[0], test.target[0], heatmap)
        print(f"wrote {heatmap}")
        return [heatmap]

    # 4. Export, reload (as a server would: tf.saved_model.load, no attnlayers needed) and compare.
    def export(model, out):
        path = os.path.join(out, "translator")
        export_translator(path, model, tokenizers, search=beam, max_source_length=MAX_LENGTH,
                          max_length=MAX_LENGTH)
        reloaded = tf.saved_model.load(path)
        texts = [t.decode() for t in reloaded.translate(tf.constant(list(test.source)))["translation"].numpy()]
        served["agree"] = sum(a == b for a, b in zip(texts, served["beam search (k=4)"]))
        print(f"exported {path}; the reloaded translator agrees with in-process decoding on {served['agree']}/"
              f"{len(test)} test sentences")
        print(f"  {reloaded.translate(tf.constant([test.source[0]]))['translation'].numpy()[0].decode()!r}")
        return path

    # Training keeps the weights of the epoch with the best validation accuracy (not the last epoch's).
    result = core.run_recipe(
        model, train, validation=validation, epochs=args.epochs,
        callbacks=[core.BestWeights("val_accuracy")], evaluate=evaluate_model, pictures=pictures, export=export,
        out_dir=args.out, record={"model": "bahdanau", "data": "synthetic", "seed": args.seed}, verbose=2,
        strategy=strategy,
    )
    print(f"results: {result['results_path']}")
    return 0 if served["agree"] == len(test) else 1


if __name__ == "__main__":
    sys.exit(main())
