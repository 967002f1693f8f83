"""The synthetic translation task: a made-up language pair generated in code, deterministic from a seed, with
gold word alignments (`Pairs.alignments`), for the quickstart, the alignment benchmark and fast tests. Its
grammar and reorderings are described in docs/guides/nmt-data.md."""

from __future__ import annotations

import random

from attnlayers.validation import one_of, positive_int

from .pairs import Pairs
from .split import split_pairs

__all__ = ["synthetic_dictionary", "synthetic_pairs", "synthetic_task"]

_REORDERINGS = ("swap", "reverse", "none")
_MIN_WORDS = 3  # synthetic_pairs' default min_length

_SOURCE_SYLLABLES = [c + v for c in "bdfgklmnpst" for v in "aeiou"]  # open syllables: "bako", "dimu"
_TARGET_SYLLABLES = [c + v + e for c in "hjrtvwz" for v in "aeiou" for e in "lnrx"]  # closed: "tor", "wex"
_CLASSES = {"noun": 48, "adjective": 24, "verb": 24}


def synthetic_dictionary(dictionary_seed: int = 0) -> tuple:
    """The synthetic task's vocabulary: `(word_class, translation)`.

    `word_class` maps each source word to "noun", "adjective" or "verb"; `translation` is a class-preserving
    bijection from source words onto a disjoint set of target words, fixed by `dictionary_seed`.

    Args:
        dictionary_seed: the seed of the word classes and the translation.
    """
    rng = random.Random(dictionary_seed)
    total = sum(_CLASSES.values())
    source_words = sorted({a + b for a in _SOURCE_SYLLABLES for b in _SOURCE_SYLLABLES if a != b})
    target_words = sorted(set(_TARGET_SYLLABLES))
    source_words = rng.sample(source_words, total)
    target_words = rng.sample(target_words, total)
    word_class, translation, start = {}, {}, 0
    for name, count in _CLASSES.items():
        for s, t in zip(source_words[start : start + count], target_words[start : start + count]):
            word_class[s] = name
            translation[s] = t
        start += count
    return word_class, translation


def synthetic_pairs(
    num_pairs: int = 2000,
    *,
    seed: int = 0,
    min_length: int = 3,
    max_length: int = 10,
    reorder: str = "swap",
    dictionary_seed: int = 0,
) -> Pairs:
    """Generates the synthetic translation task (docs/guides/nmt-data.md).

    Args:
        num_pairs: how many pairs; sources are distinct.
        seed: the sentence seed (the same seed gives the same pairs in every process).
        min_length: fewest source words (>= 1).
        max_length: most source words (>= min_length); the length is drawn uniformly.
        reorder: "swap" (adjectives follow their noun in the target), "reverse" or "none".
        dictionary_seed: seed of the vocabulary and dictionary (`synthetic_dictionary`).

    Returns:
        `Pairs` of space-separated lower-case words, with `alignments`: `alignments[k][j]` is the source
        word index translated by target word j (a permutation: every word has exactly one translation).

    Example:
        >>> pairs = synthetic_pairs(3, seed=1)
        >>> src, tgt = pairs[0]; a = pairs.alignments[0]
        >>> translation = synthetic_dictionary()[1]
        >>> all(translation[src.split()[a[j]]] == w for j, w in enumerate(tgt.split()))
        True
    """
    num_pairs = positive_int(num_pairs, "num_pairs")
    reorder = one_of(reorder, "reorder", _REORDERINGS)
    min_length = positive_int(min_length, "min_length")
    max_length = positive_int(max_length, "max_length")
    if min_length > max_length:
        raise ValueError(
            f"synthetic_pairs needs 1 <= min_length <= max_length; received min_length={min_length}, "
            f"max_length={max_length}."
        )
    word_class, translation = synthetic_dictionary(dictionary_seed)
    by_class = {name: sorted(w for w, c in word_class.items() if c == name) for name in _CLASSES}
    rng = random.Random(seed)
    source, target, alignments, seen = [], [], [], set()
    attempts = 0
    while len(source) < num_pairs:
        attempts += 1
        if attempts > 20 * num_pairs + 1000:
            raise ValueError(
                f"synthetic_pairs could not find {num_pairs} distinct sentences of {min_length} to {max_length} "
                f"words; lower num_pairs or allow longer sentences."
            )
        length = rng.randint(min_length, max_length)
        words, order = [], []  # order: target position -> source position
        while len(words) < length:
            if length - len(words) >= 2 and rng.random() < 0.4:  # adjective + noun
                i = len(words)
                words += [rng.choice(by_class["adjective"]), rng.choice(by_class["noun"])]
                order += [i + 1, i] if reorder == "swap" else [i, i + 1]
            else:
                words.append(rng.choice(by_class["noun" if rng.random() < 0.6 else "verb"]))
                order.append(len(words) - 1)
        sentence = " ".join(words)
        if sentence in seen:
            continue
        seen.add(sentence)
        if reorder == "reverse":
            order = list(range(length))[::-1]
        source.append(sentence)
        target.append(" ".join(translation[words[i]] for i in order))
        alignments.append(order)
    return Pairs(source, target, alignments)


def synthetic_task(
    num_pairs: int = 4000,
    *,
    max_length: int = 16,
    num_test: int = 200,
    num_validation: int = 200,
    reorder: str = "swap",
    seed: int = 0,
):
    """The synthetic task ready to train, as the quickstart and the alignment benchmark use it.

    Args:
        num_pairs: pairs generated (`synthetic_pairs`), then split (`split_pairs`, seeded by `seed`).
        max_length: tokens per sequence with [START] / [END]: sentences have at most `max_length - 2` words.
        num_test, num_validation: held-out pairs.
        reorder: "swap", "reverse" or "none" (see `synthetic_pairs`).
        seed: sentence and split seed.

    Returns:
        `(splits, tokenizers)`: the `Splits` (with gold `alignments`) and word-level tokenizers (one token
        per word, so attention can be checked against the alignments).
    """
    from ..tokenizer import build_tokenizers  # imports tensorflow: only when tokenizers are asked for

    max_length = positive_int(max_length, "max_length")
    if max_length - 2 < _MIN_WORDS:
        raise ValueError(
            f"synthetic_task needs max_length >= {_MIN_WORDS + 2} ({_MIN_WORDS} words + [START] + [END]); "
            f"received max_length={max_length}."
        )
    pairs = synthetic_pairs(num_pairs, seed=seed, min_length=_MIN_WORDS, max_length=max_length - 2, reorder=reorder)
    splits = split_pairs(pairs, num_test=num_test, num_validation=num_validation, seed=seed)
    tokenizers = build_tokenizers(splits, source_vocabulary_size=200, target_vocabulary_size=200, model_type="word")
    return splits, tokenizers
