"""Why the tiny BERT's masked LM stalled at the unigram stage: a synthetic language whose masked tokens are
predictable from a neighbour only, learned by our BertPretrainer with the NSP loss at several weights and by
keras-hub's BertMaskedLM (masked LM alone), the same sizes, data, optimizer and steps.

The language: 200 words; a sentence starts at a random word and each next word is a fixed permutation of the one
before (90%) or a random word (10%); documents of 4 sentences of 15 words. A model that attends to its neighbours
predicts most masked words; one that does not is left with the 10% of chosen tokens BERT keeps unchanged (it
copies its input there) and 1/200 for the rest: ~0.105. The NSP task is unlearnable here except by memorising
pairs (the documents are independent), so its loss stays near log 2.

    python benchmarks/bert_nsp_weight.py                 # ours at NSP weight 1, 0.1 and 0, and keras-hub
    python benchmarks/bert_nsp_weight.py --runs ours:1 --epochs 40
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

WORDS = 200
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def documents(seed, count=1000, sentences=4, length=15, follow=0.9):
    """The synthetic corpus: ``count`` documents of ``sentences`` sentences of ``length`` words."""
    import numpy as np

    rng = np.random.default_rng(seed)
    successor = rng.permutation(WORDS)

    def sentence():
        words = [int(rng.integers(WORDS))]
        for _ in range(length - 1):
            words.append(int(successor[words[-1]]) if rng.random() < follow else int(rng.integers(WORDS)))
        return " ".join(f"w{i}" for i in words)

    return [[sentence() for _ in range(sentences)] for _ in range(count)]


def train(run, args):
    """One run, "ours:W" (our pretrainer, loss MLM + W x NSP) or "keras-hub" (BertMaskedLM, MLM alone); returns the
    masked-LM training accuracy per epoch."""
    import keras

    from attnlayers.applications.bert import BertConfig, BertPretrainer, bert_optimizer
    from attnlayers.applications.bert.pretraining_data import pretraining_dataset
    from attnlayers.applications.bert.tokenizer import BertTokenizer
    from attnlayers.applications.bert.training import built_backbone

    vocabulary = SPECIAL + [f"w{i}" for i in range(WORDS)]
    data = pretraining_dataset(documents(args.seed), BertTokenizer(vocabulary, lowercase=True), sequence_length=64,
                               max_predictions=10, batch_size=32, seed=args.seed)
    steps = int(data.cardinality())
    keras.utils.set_random_seed(args.seed)
    optimizer = bert_optimizer(args.learning_rate, 50, steps * args.epochs)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
    if run == "keras-hub":
        import keras_hub

        backbone = keras_hub.models.BertBackbone(vocabulary_size=len(vocabulary), num_layers=2, num_heads=2,
                                                 hidden_dim=128, intermediate_dim=512, max_sequence_length=64)
        model = keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)
        model.compile(optimizer=optimizer, loss=loss,
                      weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="mlm_accuracy")])
        data = data.map(lambda x, y, w: (x, y["mlm"], w["mlm"]))
    else:
        weight = float(run.split(":", 1)[1])
        model = BertPretrainer(built_backbone(BertConfig.preset("tiny", vocabulary_size=len(vocabulary),
                                                                max_sequence_length=64)))
        model.compile(optimizer=optimizer, loss={"mlm": loss, "nsp": keras.losses.SparseCategoricalCrossentropy(
            from_logits=True)}, loss_weights={"mlm": 1.0, "nsp": weight},
            weighted_metrics={"mlm": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]})
    begin = time.perf_counter()
    history = model.fit(data, epochs=args.epochs, verbose=0).history
    return history["mlm_accuracy"], steps, time.perf_counter() - begin


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="ours:1,ours:0.1,ours:0,keras-hub",
                        help="comma-separated: ours:W (NSP weight W) or keras-hub")
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    every = max(1, args.epochs // 8)
    for run in args.runs.split(","):
        accuracy, steps, seconds = train(run, args)
        shown = ", ".join(f"{epoch + 1}: {accuracy[epoch]:.3f}" for epoch in range(every - 1, args.epochs, every))
        print(f"{run:10s} masked-LM training accuracy by epoch ({steps} steps each; {seconds:.0f} s): {shown}",
              flush=True)


if __name__ == "__main__":
    main()
