"""Parallel text for translation: readers, the German-English pairs, a synthetic task, splits, tf.data.

Everything here returns plain Python data (`Pairs`, `Splits`) until `make_dataset` turns a `Pairs` into
batches for `model.fit`; nothing is downloaded and nothing is cached on disk.

Readers
    `read_tsv(path)`: one `source<TAB>target` pair per line.
    `read_parallel(source_path, target_path)`: two aligned files, line i of one translates line i of the other.

German-English (`load_de_en`)
    The sentence pairs of the Debian package `trans-de-en` (Frank Richter's dictionary, GPL-2+;
    `/usr/share/trans/de-en`). Each line is `de :: en`; each side lists alternatives separated by ` | `,
    the i-th German alternative translating the i-th English one, and inside an alternative `;` separates
    synonyms. Most entries are words and phrases; the example sentences among them are what we keep:

    1. annotations are removed: `{...}` (gender, part of speech), `[...]` (region, register, domain),
       `<...>` (spelling variants) and `(...)`. In this dictionary parentheses mark optional words
       ("Es ist (wirklich) eine Schande!") or glosses ("(of a person)"); dropping them together with their
       content always leaves the base sentence, while keeping the content would sometimes keep a gloss;
    2. text is NFC-normalised, typographic quotes become ASCII (’ ‘ ‚ -> ', “ ” „ -> "), whitespace runs
       become one space, and the spaces left before , . ! ? ; : by step 1 are closed;
    3. a synonym is a sentence when it has at least `min_words` words, starts with no lower-case letter and
       ends in . ! or ? (optionally followed by a closing quote); it is rejected when it still contains
       `/` (alternative words, "came/arrived", whose scope is ambiguous), an ellipsis (a template,
       "dass …?") or a placeholder (sb. sth. jd. jdm. jdn. jds. etw.);
    4. every German sentence synonym is paired with every English one of the same alternative, in order;
    5. duplicates are removed, keeping the first in file order: exact duplicates, and then every later pair
       whose *source* (in the requested direction) was already seen, so each source has one reference.
       Pairs sharing a target (German paraphrases of one English sentence, or the reverse) are kept.

    Lines whose two sides have different numbers of alternatives are skipped (none in the 2023 file).
    On the 2023-01-30 file (206,237 entries, 391,763 aligned alternatives), 17,738 alternatives have 4+
    words ending in .?! on both sides (the rough count of DESIGN.md); the steps above give 17,816 sentence
    pairs, 17,798 distinct ones, and 16,795 with distinct German sources ("de-en"; 16,871 with distinct
    English sources for "en-de"). `split_pairs` with its defaults makes that 14,795 / 1,000 / 1,000.

German-English lexicon (`load_de_en_lexicon`)
    The other entries of the same file, words and short phrases ("Höflichkeit :: politeness"; 332k pairs),
    one pair per alternative (the first synonym of each side), as optional extra training data: 9.6% of the
    German word tokens of the seed-0 test set never occur in its 14,795 training sentences (5.2% of the
    English ones). Lines that hold a validation or test sentence are skipped whole (`held_out`; 328.5k pairs
    remain for the seed-0 split).

Splits (`split_pairs`)
    A fixed, seeded partition into train / validation / test. Pairs are first grouped into connected
    components of shared sentences (on either side, compared case- and punctuation-insensitively), and
    whole groups are assigned to one split, so no sentence of the test set occurs, on either side, in
    training or validation. The test set is drawn first and does not depend on the validation size.
    Build vocabularies from `splits.train` only (`tokenizer.build_tokenizers(splits)` does so).

Synthetic task (`synthetic_pairs`)
    A made-up language pair generated in code, deterministic from a seed, for the quickstart and fast
    tests. A source sentence has 3-10 words from a small invented vocabulary in three classes: nouns
    ("bako"), adjectives ("dimu"), verbs ("fela"); it is a sequence of chunks, each a noun, a verb or an
    adjective followed by its noun. The target is a word-by-word translation through a fixed seeded
    dictionary (a bijection onto a disjoint target vocabulary, class preserving) with a known reordering:

    - "swap" (default): adjectives follow their noun in the target ("dimu bako" -> "tor wex"
      where tor = dict[bako], wex = dict[dimu]); every other word keeps its place. Needs a look-ahead of
      one word, so attention has to leave the diagonal;
    - "reverse": the target is in reverse order (an anti-diagonal);
    - "none": the same order (the diagonal).

    Each pair carries its gold alignment: `alignments[k][j]` is the source word index that target word j
    translates. With `build_tokenizers(splits, model_type="word")` every word is one token (the vocabulary
    is 96 words per side), so attention over tokens can be checked against the alignment directly.

Batches (`make_dataset`)
    ((source_ids, target_in_ids), target_out_ids), int32, padded with [PAD] = 0, where
    target_in = [START] + y and target_out = y + [END] for the target tokens y. Batches group sentences of
    similar length (`tf.data.Dataset.bucket_by_sequence_length`). A loss must ignore positions where
    `target_out == PAD_ID` (0): a decoder embedding with `mask_zero=True` does this through the Keras mask,
    or pass `sample_weight=True` to get the 0/1 weights as a third element.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import unicodedata
from collections.abc import Iterable, Sequence

from .tokenizer import END_ID, PAD_ID, START_ID, build_tokenizers

DE_EN_PATH = "/usr/share/trans/de-en"

# --------------------------------------------------------------------------------------------------
# Containers


@dataclasses.dataclass(frozen=True)
class Pairs:
    """Aligned lists of source and target sentences (plain Python strings).

    Attributes:
        source: list of source sentences.
        target: list of target sentences, `target[i]` translating `source[i]`.
        alignments: optional gold word alignments (the synthetic task has them): `alignments[i][j]` is the
            index of the source word (whitespace-split) that target word j of pair i translates.
    """

    source: list
    target: list
    alignments: list | None = None

    def __post_init__(self):
        if len(self.source) != len(self.target):
            raise ValueError(
                f"Pairs needs as many sources as targets; received {len(self.source)} sources and "
                f"{len(self.target)} targets."
            )
        if self.alignments is not None and len(self.alignments) != len(self.source):
            raise ValueError(
                f"Pairs needs one alignment per pair; received {len(self.alignments)} alignments for "
                f"{len(self.source)} pairs."
            )

    def __len__(self):
        return len(self.source)

    def __iter__(self):
        return iter(zip(self.source, self.target))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.select(range(len(self))[index])
        return self.source[index], self.target[index]

    def select(self, indices: Iterable[int]) -> Pairs:
        """The pairs at `indices`, in that order."""
        indices = list(indices)
        alignments = None if self.alignments is None else [self.alignments[i] for i in indices]
        return Pairs([self.source[i] for i in indices], [self.target[i] for i in indices], alignments)

    def swap(self) -> Pairs:
        """The same pairs translated the other way (alignments are inverted where they are one-to-one)."""
        alignments = None
        if self.alignments is not None:
            alignments = []
            for a in self.alignments:
                if sorted(a) != list(range(len(a))):
                    raise ValueError("swap() can only invert one-to-one alignments.")
                inverse = [0] * len(a)
                for j, i in enumerate(a):
                    inverse[i] = j
                alignments.append(inverse)
        return Pairs(list(self.target), list(self.source), alignments)


@dataclasses.dataclass(frozen=True)
class Splits:
    """A train / validation / test partition of one `Pairs` (see `split_pairs`).

    `indices` holds, for each split, the positions of its pairs in the `Pairs` that was split.
    """

    train: Pairs
    validation: Pairs
    test: Pairs
    indices: dict = dataclasses.field(default_factory=dict, repr=False)


# --------------------------------------------------------------------------------------------------
# Readers


def read_tsv(path, *, encoding: str = "utf-8", skip_blank_lines: bool = True) -> Pairs:
    """Reads `source<TAB>target` lines.

    Args:
        path: the file.
        encoding: its text encoding.
        skip_blank_lines: ignore lines that are empty or only whitespace.

    Returns:
        `Pairs`, in file order, with surrounding whitespace stripped from each side.

    Raises:
        ValueError: naming the file and line number when a line does not have exactly one tab.
    """
    source, target = [], []
    with open(path, encoding=encoding) as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\r\n")
            if skip_blank_lines and not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                raise ValueError(
                    f"{os.fspath(path)}, line {number}: expected 2 tab-separated fields (source, target), "
                    f"received {len(fields)}: {line[:80]!r}"
                )
            source.append(fields[0].strip())
            target.append(fields[1].strip())
    return Pairs(source, target)


def read_parallel(source_path, target_path, *, encoding: str = "utf-8") -> Pairs:
    """Reads two aligned files: line i of `target_path` translates line i of `source_path`.

    Blank lines are kept (they stay aligned); a final newline is optional.

    Raises:
        ValueError: naming both files and their line counts when the counts differ.
    """
    sides = []
    for path in (source_path, target_path):
        with open(path, encoding=encoding) as f:
            sides.append([line.rstrip("\r\n").strip() for line in f])
    if len(sides[0]) != len(sides[1]):
        raise ValueError(
            f"read_parallel needs files with the same number of lines; received {len(sides[0])} lines in "
            f"{os.fspath(source_path)} and {len(sides[1])} lines in {os.fspath(target_path)}."
        )
    return Pairs(sides[0], sides[1])


# --------------------------------------------------------------------------------------------------
# German-English pairs from trans-de-en

_ANNOTATIONS = (
    re.compile(r"\{[^{}]*\}"),  # {f}, {vt}: gender, part of speech
    re.compile(r"\[[^\[\]]*\]"),  # [Br.], [ugs.], [med.]: region, register, domain
    re.compile(r"<[^<>]*>"),  # <Aalmolch>: spelling variants
)
_PARENTHESES = re.compile(r"\([^()]*\)")  # optional words and glosses (innermost first)
_QUOTES = str.maketrans({"’": "'", "‘": "'", "‚": "'", "“": '"', "”": '"', "„": '"'})
_SPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.!?;:])")
_SENTENCE_END = re.compile(r"[.!?][\"']?$")
_PLACEHOLDER = re.compile(r"(?<![\w.])(?:sb|sth|jd|jdm|jdn|jds|etw)\.|…|\.\.\.|/", re.IGNORECASE)


def _strip_annotations(text: str) -> str:
    for pattern in _ANNOTATIONS:
        text = pattern.sub(" ", text)
    previous = None
    while previous != text:  # nested parentheses
        previous, text = text, _PARENTHESES.sub(" ", text)
    return text


def normalize_text(text: str) -> str:
    """NFC, ASCII quotes, single spaces, no space before , . ! ? ; : (step 2 of the module docstring)."""
    text = unicodedata.normalize("NFC", text).translate(_QUOTES)
    text = _SPACE.sub(" ", text).strip()
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


def _is_sentence(text: str, min_words: int) -> bool:
    return (
        len(text.split(" ")) >= min_words
        and not text[0].islower()
        and _SENTENCE_END.search(text) is not None
        and _PLACEHOLDER.search(text) is None
    )


def _sentences(side: str, min_words: int) -> list:
    side = _strip_annotations(side)
    out = []
    for synonym in side.split(";"):
        synonym = normalize_text(synonym)
        if synonym and _is_sentence(synonym, min_words):
            out.append(synonym)
    return out


def _aligned_alternatives(line: str) -> list:
    """The (german, english) ` | ` alternatives of one line, raw; [] for comments, lines without ` :: ` and
    lines whose sides have different numbers of alternatives."""
    if line.startswith("#") or " :: " not in line:
        return []
    german, english = (side.split(" | ") for side in line.rstrip("\n").split(" :: ", 1))
    return list(zip(german, english)) if len(german) == len(english) else []


def parse_de_en_line(line: str, *, min_words: int = 4) -> list:
    """The cleaned (german, english) sentence pairs of one `trans-de-en` line (steps 1-4 above).

    Comment lines, lines without ` :: ` and lines whose sides have different numbers of ` | `
    alternatives give `[]`.
    """
    pairs = []
    for de, en in _aligned_alternatives(line):
        # Cheap test first: a sentence alternative ends in . ! ? or a closing bracket / quote.
        if not (de.rstrip()[-1:] in ".!?\"')]}>”’“" and en.rstrip()[-1:] in ".!?\"')]}>”’“"):
            continue
        de_sentences = _sentences(de, min_words)
        if de_sentences:
            en_sentences = _sentences(en, min_words)
            pairs.extend((d, e) for d in de_sentences for e in en_sentences)
    return pairs


def load_de_en(path=DE_EN_PATH, *, direction: str = "de-en", min_words: int = 4) -> Pairs:
    """The German-English sentence pairs of `trans-de-en`, cleaned and deduplicated.

    See the module docstring for the cleaning rules. Takes 1-2 s on 2 CPU cores; nothing is cached.

    Args:
        path: the dictionary file (`apt-get install trans-de-en` puts it at `/usr/share/trans/de-en`).
        direction: "de-en" (German source, English target) or "en-de".
        min_words: the fewest words a sentence may have, on each side.

    Returns:
        `Pairs` in file order: exact duplicates removed, and of several pairs with the same source the
        first kept.

    Raises:
        ValueError: for an unknown direction. FileNotFoundError: when the file is missing, with the
            package that provides it.
    """
    if direction not in ("de-en", "en-de"):
        raise ValueError(f"direction must be 'de-en' or 'en-de'; received {direction!r}.")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} not found: install the Debian package trans-de-en (apt-get install trans-de-en)."
        )
    source, target, seen = [], [], set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            for de, en in parse_de_en_line(line, min_words=min_words):
                s, t = (de, en) if direction == "de-en" else (en, de)
                if s in seen:
                    continue
                seen.add(s)
                source.append(s)
                target.append(t)
    return Pairs(source, target)


def load_de_en_lexicon(path=DE_EN_PATH, *, direction: str = "de-en", held_out: Iterable[Pairs] = (),
                       max_words: int = 6) -> Pairs:
    """The word and phrase entries of `trans-de-en` (everything `load_de_en` does not keep), to add to the
    training sentences as a bilingual lexicon (optional data augmentation; `load_de_en` alone is the task).

    One pair per aligned alternative: the first synonym of each side, annotations removed and normalised as
    for sentences ("Haus {n}; Gebäude {n} :: house; building" gives ("Haus", "house")). Entries with
    placeholders (sb. sth. jdm. ...), `/` or ellipses, sentences, and phrases of more than `max_words` words
    are left out; duplicates are removed.

    Args:
        path: the dictionary file.
        direction: "de-en" or "en-de".
        held_out: `Pairs` never to learn from (pass the validation and test splits): every line of the file
            that holds one of their sentences, on either side, is skipped whole, so no word entry written
            next to a held-out sentence reaches training.
        max_words: the most words an entry may have, on each side.

    Returns:
        `Pairs` in file order.
    """
    if direction not in ("de-en", "en-de"):
        raise ValueError(f"direction must be 'de-en' or 'en-de'; received {direction!r}.")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} not found: install the Debian package trans-de-en (apt-get install trans-de-en)."
        )
    held = {_content_key(text) for pairs in held_out for pair in pairs for text in pair}
    source, target, seen = [], [], set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            if held and any(_content_key(d) in held or _content_key(e) in held for d, e in parse_de_en_line(line)):
                continue
            for de, en in _aligned_alternatives(line):
                entry = [normalize_text(_strip_annotations(side).split(";")[0]) for side in (de, en)]
                if not all(entry) or any(
                    _PLACEHOLDER.search(text) or len(text.split(" ")) > max_words or _is_sentence(text, 1)
                    for text in entry
                ):
                    continue
                pair = tuple(entry) if direction == "de-en" else tuple(entry[::-1])
                if pair not in seen:
                    seen.add(pair)
                    source.append(pair[0])
                    target.append(pair[1])
    return Pairs(source, target)


# --------------------------------------------------------------------------------------------------
# Splits


def _content_key(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _groups(pairs: Pairs) -> list:
    """Connected components of pairs that share a sentence (either side, by `_content_key`)."""
    parent = list(range(len(pairs)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner = {}
    for i, (s, t) in enumerate(pairs):
        for key in (("s", _content_key(s)), ("t", _content_key(t))):
            j = owner.setdefault(key, i)
            if j != i:
                parent[find(i)] = find(j)
    groups = {}
    for i in range(len(pairs)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def split_pairs(pairs: Pairs, *, num_test: int = 1000, num_validation: int = 1000, seed: int = 0) -> Splits:
    """A fixed, seeded train / validation / test partition with no sentence shared between splits.

    Pairs that share a sentence (on either side, ignoring case and punctuation) form a group, and each group
    goes to exactly one split, so the test set is disjoint from training and validation by construction.
    Groups are shuffled with `random.Random(seed)`; test groups are taken first (so the test set does not
    depend on `num_validation`), then validation groups, and the rest is training. Each split keeps the
    original order of its pairs.

    Args:
        pairs: the corpus.
        num_test: exact size of the test set.
        num_validation: exact size of the validation set.
        seed: the shuffle seed; the same seed gives the same split in every process.

    Returns:
        `Splits(train, validation, test, indices)`.

    Raises:
        ValueError: when the sizes are negative, exceed the corpus, or cannot be met exactly by whole groups.
    """
    if num_test < 0 or num_validation < 0 or num_test + num_validation > len(pairs):
        raise ValueError(
            f"split_pairs needs 0 <= num_test + num_validation <= len(pairs); received num_test={num_test}, "
            f"num_validation={num_validation} for {len(pairs)} pairs."
        )
    groups = sorted(_groups(pairs))  # by first index: independent of dict/set ordering
    random.Random(seed).shuffle(groups)
    taken = [False] * len(groups)
    indices = {}
    for name, size in (("test", num_test), ("validation", num_validation)):
        chosen = []
        for g, group in enumerate(groups):
            if len(chosen) == size:
                break
            if not taken[g] and len(chosen) + len(group) <= size:
                taken[g] = True
                chosen.extend(group)
        if len(chosen) != size:
            raise ValueError(f"split_pairs could not fill {name} with exactly {size} pairs from whole groups.")
        indices[name] = sorted(chosen)
    indices["train"] = sorted(i for g, group in enumerate(groups) if not taken[g] for i in group)
    return Splits(
        train=pairs.select(indices["train"]),
        validation=pairs.select(indices["validation"]),
        test=pairs.select(indices["test"]),
        indices=indices,
    )


# --------------------------------------------------------------------------------------------------
# Synthetic task

_SOURCE_SYLLABLES = [c + v for c in "bdfgklmnpst" for v in "aeiou"]  # open syllables: "bako", "dimu"
_TARGET_SYLLABLES = [c + v + e for c in "hjrtvwz" for v in "aeiou" for e in "lnrx"]  # closed: "tor", "wex"
_CLASSES = {"noun": 48, "adjective": 24, "verb": 24}


def synthetic_dictionary(dictionary_seed: int = 0) -> tuple:
    """The synthetic task's vocabulary: `(word_class, translation)`.

    `word_class` maps each source word to "noun", "adjective" or "verb"; `translation` is a class-preserving
    bijection from source words onto a disjoint set of target words, fixed by `dictionary_seed`.
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
    """Generates the synthetic translation task of the module docstring.

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
    if reorder not in ("swap", "reverse", "none"):
        raise ValueError(f"reorder must be 'swap', 'reverse' or 'none'; received {reorder!r}.")
    if not 1 <= min_length <= max_length:
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
            raise ValueError(f"synthetic_pairs could not find {num_pairs} distinct sentences of these lengths.")
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


def synthetic_task(num_pairs: int = 4000, *, max_length: int = 16, num_test: int = 200, num_validation: int = 200,
                   reorder: str = "swap", seed: int = 0):
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
    pairs = synthetic_pairs(num_pairs, seed=seed, max_length=max_length - 2, reorder=reorder)
    splits = split_pairs(pairs, num_test=num_test, num_validation=num_validation, seed=seed)
    tokenizers = build_tokenizers(splits, source_vocabulary_size=200, target_vocabulary_size=200, model_type="word")
    return splits, tokenizers


# --------------------------------------------------------------------------------------------------
# tf.data pipeline


def default_bucket_boundaries(max_length: int) -> list:
    """Length boundaries 8, 16, 24, 32, 48, 64, 96, 128, ... below `max_length`."""
    steps = [8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    return [b for b in steps if b < max_length]


def encode_pairs(pairs: Pairs, tokenizers, *, max_source_length: int = 64, max_target_length: int = 64):
    """Tokenizes once: `(source_ids, target_in_ids, target_out_ids)` as int32 `tf.RaggedTensor`s.

    The source is truncated to `max_source_length` tokens; the target tokens y to `max_target_length - 1`,
    and then target_in = [START] + y, target_out = y + [END] (so both fit `max_target_length`; a truncated
    target still ends in [END]).
    """
    import tensorflow as tf

    if max_source_length < 1 or max_target_length < 2:
        raise ValueError(
            f"need max_source_length >= 1 and max_target_length >= 2; received {max_source_length}, "
            f"{max_target_length}."
        )
    source = tokenizers.source.tokenize(tf.constant(list(pairs.source), tf.string))[:, :max_source_length]
    y = tokenizers.target.tokenize(tf.constant(list(pairs.target), tf.string))[:, : max_target_length - 1]
    rows = tf.shape(y.row_lengths())[0]
    start = tf.fill([rows, 1], tf.constant(START_ID, tf.int32))
    end = tf.fill([rows, 1], tf.constant(END_ID, tf.int32))
    target_in = tf.concat([start, y], axis=1)
    target_out = tf.concat([y, end], axis=1)
    return source, target_in, target_out


def make_dataset(
    pairs: Pairs,
    tokenizers,
    *,
    batch_size: int = 64,
    max_source_length: int = 64,
    max_target_length: int = 64,
    shuffle: bool = True,
    seed: int = 0,
    bucket_boundaries: Sequence[int] | None = None,
    pad_to_max_length: bool = False,
    drop_remainder: bool = False,
    sample_weight: bool = False,
):
    """Batches `((source_ids, target_in_ids), target_out_ids)` for `model.fit`.

    Sentences are tokenized once (`encode_pairs`), shuffled (seeded, reshuffled each epoch), grouped by
    length with `tf.data.Dataset.bucket_by_sequence_length` (each batch padded to its own longest sequence)
    and prefetched. All tensors are int32 (B, length), padded with `PAD_ID` = 0.

    Args:
        pairs: the sentences (for a `Splits`, pass `splits.train`).
        tokenizers: a `tokenizer.Tokenizers` (`.source` and `.target` with `tokenize`).
        batch_size: pairs per batch.
        max_source_length: source tokens kept.
        max_target_length: length of target_in / target_out at most (the target tokens keep one less).
        shuffle: shuffle pairs and batch them by length (for training); False keeps the order (for
            evaluation), each batch padded to its longest sequence.
        seed: shuffle seed.
        bucket_boundaries: length boundaries of the buckets, on max(source length, target_in length); a
            bucket holds the lengths up to and including its boundary. None uses
            `default_bucket_boundaries(max(max_source_length, max_target_length))`.
        pad_to_max_length: pad every batch to (max_source_length, max_target_length), no bucketing: fixed
            shapes for XLA / TPU (add `drop_remainder=True` for a static batch dimension too).
        drop_remainder: drop the last smaller batch (of each bucket).
        sample_weight: also yield float32 weights `target_out != PAD_ID` as a third element.

    Returns:
        A `tf.data.Dataset`.
    """
    import tensorflow as tf

    source, target_in, target_out = encode_pairs(
        pairs, tokenizers, max_source_length=max_source_length, max_target_length=max_target_length
    )
    # Rows of a ragged tensor come out as rank-1 RaggedTensorSpecs; a map turns them into plain tensors,
    # which padded_batch / bucket_by_sequence_length need.
    ds = tf.data.Dataset.from_tensor_slices((source, target_in, target_out)).map(lambda s, ti, to: (s, ti, to))
    if shuffle:
        ds = ds.shuffle(max(len(pairs), 1), seed=seed, reshuffle_each_iteration=True)
    pad = tf.constant(PAD_ID, tf.int32)
    if pad_to_max_length:
        ds = ds.padded_batch(
            batch_size,
            padded_shapes=([max_source_length], [max_target_length], [max_target_length]),
            padding_values=(pad, pad, pad),
            drop_remainder=drop_remainder,
        )
    elif not shuffle:
        ds = ds.padded_batch(batch_size, padding_values=(pad, pad, pad), drop_remainder=drop_remainder)
    else:
        if bucket_boundaries is None:
            bucket_boundaries = default_bucket_boundaries(max(max_source_length, max_target_length))
        boundaries = [b + 1 for b in sorted(bucket_boundaries)]  # a bucket holds lengths < boundary
        ds = ds.bucket_by_sequence_length(
            lambda s, ti, to: tf.maximum(tf.shape(s)[0], tf.shape(ti)[0]),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
            padding_values=(pad, pad, pad),
            drop_remainder=drop_remainder,
        )

    def to_model_inputs(s, ti, to):
        if sample_weight:
            return (s, ti), to, tf.cast(tf.not_equal(to, PAD_ID), tf.float32)
        return (s, ti), to

    return ds.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
