"""The non-neural baselines beside the fine-tuned BERTs (NumPy only): a logistic regression on bag-of-words
features (sentiment) or on word overlap (paraphrase), the most frequent tag of each word (part of speech), and the
classification scores they are compared with (accuracy, macro-F1)."""

from __future__ import annotations

import collections
import math
import re

import numpy as np

__all__ = ["LogisticRegression", "classification_scores", "logistic_regression_baseline", "most_frequent_tag_baseline",
           "pair_features", "task_baseline", "text_features", "words"]

_WORD = re.compile(r"\w+|[^\w\s]")


def words(text):
    """Lower-cased words and punctuation marks."""
    return _WORD.findall(text.lower())


def text_features(example):
    """A text's bag of words: {word: 1}."""
    return dict.fromkeys(set(words(example[0])), 1.0)


def pair_features(example):
    """A pair's features: the words both texts have ("=word"), those only one has ("~word"), and the overlap:
    Jaccard, the share of each text's words in the other, the log length ratio."""
    a, b = set(words(example[0])), set(words(example[1]))
    both, one = a & b, a ^ b
    features = {**{"=" + w: 1.0 for w in both}, **{"~" + w: 1.0 for w in one}}
    features.update({"#jaccard": len(both) / max(len(a | b), 1), "#cover_a": len(both) / max(len(a), 1),
                     "#cover_b": len(both) / max(len(b), 1),
                     "#length_ratio": abs(math.log((len(a) + 1) / (len(b) + 1)))})
    return features


class LogisticRegression:
    """Multinomial logistic regression on sparse features (dicts of name -> value), NumPy only: features seen at
    least ``min_count`` times in training (those named "#..." always), a bias, L2 penalty ``l2``, full-batch Adam.
    """

    def __init__(self, num_classes, l2=1e-4, min_count=2, iterations=300, learning_rate=0.1, seed=0):
        self.num_classes, self.l2, self.min_count = num_classes, l2, min_count
        self.iterations, self.learning_rate, self.seed = iterations, learning_rate, seed

    def _matrix(self, rows):
        columns, values, lengths = [], [], []
        for features in rows:
            kept = [(self.index[k], v) for k, v in features.items() if k in self.index]
            kept.append((0, 1.0))  # the bias
            columns.extend(c for c, _ in kept)
            values.extend(v for _, v in kept)
            lengths.append(len(kept))
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        return np.asarray(columns, np.int64), np.asarray(values, np.float64), starts, np.repeat(
            np.arange(len(rows)), lengths)

    def _logits(self, matrix, weights):
        columns, values, starts, _ = matrix
        return np.add.reduceat(weights[columns] * values[:, None], starts, axis=0)

    def fit(self, rows, labels):
        counts = collections.Counter(k for features in rows for k in features)
        names = sorted(k for k, c in counts.items() if c >= self.min_count or k.startswith("#"))
        self.index = {name: i + 1 for i, name in enumerate(names)}
        matrix = self._matrix(rows)
        columns, values, _, row_of = matrix
        labels = np.asarray(labels)
        targets = np.eye(self.num_classes)[labels]
        weights = np.zeros((len(self.index) + 1, self.num_classes))
        m, v = np.zeros_like(weights), np.zeros_like(weights)
        for step in range(1, self.iterations + 1):
            logits = self._logits(matrix, weights)
            probabilities = np.exp(logits - logits.max(1, keepdims=True))
            probabilities /= probabilities.sum(1, keepdims=True)
            error = (probabilities - targets) / len(labels)
            gradient = np.stack([np.bincount(columns, weights=values * error[row_of, k], minlength=len(weights))
                                 for k in range(self.num_classes)], axis=1) + self.l2 * weights
            m = 0.9 * m + 0.1 * gradient
            v = 0.999 * v + 0.001 * gradient**2
            weights -= self.learning_rate * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
        self.weights = weights
        return self

    def predict(self, rows):
        return np.argmax(self._logits(self._matrix(rows), self.weights), axis=1)


def logistic_regression_baseline(data, featurize, l2_values=(1e-5, 1e-4, 1e-3)):
    """Logistic regression on ``featurize``'s features, its L2 penalty chosen on the validation split; returns
    the test predictions and the chosen penalty."""
    train, validation, test = ([featurize(e) for e in split] for split in (data.train, data.validation, data.test))
    y_train, y_validation = [e[-1] for e in data.train], np.asarray([e[-1] for e in data.validation])
    best = None
    for l2 in l2_values:
        model = LogisticRegression(len(data.labels), l2=l2).fit(train, y_train)
        accuracy = float(np.mean(model.predict(validation) == y_validation)) if len(y_validation) else 0.0
        if best is None or accuracy > best[0]:
            best = (accuracy, l2, model)
    return best[2].predict(test), best[1]


def most_frequent_tag_baseline(train, test):
    """Each word's most frequent training tag (its lower-cased form's when the form is unseen; the most frequent
    tag of all for unseen words); returns the predicted tags of ``test``'s words."""
    by_form, by_lower, overall = (collections.defaultdict(collections.Counter), collections.defaultdict(
        collections.Counter), collections.Counter())
    for sentence in train:
        for word, tag in sentence:
            by_form[word][tag] += 1
            by_lower[word.lower()][tag] += 1
            overall[tag] += 1
    default = overall.most_common(1)[0][0]

    def tag(word):
        for table, key in ((by_form, word), (by_lower, word.lower())):
            if key in table:
                return table[key].most_common(1)[0][0]
        return default

    return [[tag(word) for word, _ in sentence] for sentence in test]


def classification_scores(truth, predicted, num_classes):
    """Accuracy, macro-F1 (the mean of the classes' F1) and each class's F1."""
    truth, predicted = np.asarray(truth), np.asarray(predicted)
    f1 = []
    for k in range(num_classes):
        tp = float(np.sum((predicted == k) & (truth == k)))
        denominator = float(np.sum(predicted == k) + np.sum(truth == k))
        f1.append(2 * tp / denominator if denominator else 0.0)
    return {"accuracy": float(np.mean(truth == predicted)) if len(truth) else 0.0, "macro_f1": float(np.mean(f1)),
            "f1": f1}


def task_baseline(task, data):
    """The non-neural baseline's test scores (and what it is)."""
    if task == "pos":
        predicted = most_frequent_tag_baseline(data.train, data.test)
        gold = [tag for sentence in data.test for _, tag in sentence]
        flat = [tag for sentence in predicted for tag in sentence]
        return {"name": "most frequent tag per word", "accuracy": float(np.mean(np.asarray(gold) == np.asarray(flat)))}
    featurize = text_features if task == "sentiment" else pair_features
    predicted, l2 = logistic_regression_baseline(data, featurize)
    scores = classification_scores([e[-1] for e in data.test], predicted, len(data.labels))
    name = ("bag-of-words logistic regression" if task == "sentiment"
            else "logistic regression on shared / unshared words and overlap")
    majority = collections.Counter(e[-1] for e in data.train).most_common(1)[0][0]
    chance = float(np.mean(np.asarray([e[-1] for e in data.test]) == majority))
    return {"name": name, "l2": l2, **scores, "majority_class_accuracy": chance}
