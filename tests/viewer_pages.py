"""Each application's attention viewer on a tiny untrained model, built once per process (``lru_cache``), with
the model's own numbers to compare against: for tests/applications/test_viewer_hooks.py (the hooks' numbers) and
tests/test_viewer_browser.py (the pages in Chromium).

Each builder returns ``(viewer, expected)``: the :class:`~attnlayers.viewer.AttentionViewer` a hook made and a dict
of arrays computed through another path of the model (its own ``attention_maps``, ``encode``, a block's attention
layer).
"""

import functools

import keras
import numpy as np


@functools.lru_cache(maxsize=None)
def nmt_task():
    from attnlayers.applications import nmt

    pairs = nmt.synthetic_pairs(200, seed=5, max_length=8)
    splits = nmt.split_pairs(pairs, num_test=10, num_validation=10, seed=0)
    tokenizers = nmt.build_tokenizers(splits, source_vocabulary_size=200, target_vocabulary_size=200,
                                      model_type="word")
    return splits, tokenizers


@functools.lru_cache(maxsize=None)
def nmt_viewer(name):
    """``name`` "bahdanau" (one alignment matrix) or "transformer" (2 layers x 2 heads, three sets)."""
    import tensorflow as tf

    from attnlayers.applications.nmt import build_model
    from attnlayers.applications.nmt.viewer import attention_viewer

    splits, tokenizers = nmt_task()
    keras.utils.set_random_seed(3)
    vocabulary = tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size
    if name == "transformer":
        model = build_model(name, *vocabulary, num_layers=2, d_model=16, num_heads=2, intermediate_dim=32,
                            dropout=0.0, max_length=16)
    else:
        model = build_model(name, *vocabulary, embedding_dim=16, units=16, dropout=0.0)
    source, target = splits.test.source[0], splits.test.target[0]
    viewer = attention_viewer(model, tokenizers, source, target=target, max_length=16)
    source_ids = tf.cast(tokenizers.source.tokenize(tf.constant([source])).to_tensor(), tf.int32)
    target_ids = tf.cast(tokenizers.target.tokenize(tf.constant([target])).to_tensor(), tf.int32)
    target_in = tf.concat([tf.fill([1, 1], model.start_token_id), target_ids], axis=1)
    maps = model.attention_maps(source_ids, target_in)
    if isinstance(maps, list):  # the Transformer: per layer (1, N, T, S)
        expected = {"cross-attention": np.stack([np.asarray(m)[0] for m in maps])}
    else:
        expected = {"alignment": np.asarray(maps)[0]}
    return viewer, expected


BERT_WORDS = ["the", "cat", "sat", "on", "mat", "dog", "run", "##s", "a", "big", "red", ",", ".", "it", "was", "tired"]


@functools.lru_cache(maxsize=None)
def bert_viewer():
    """3 layers x 4 heads over "[CLS] the big cat sat on a mat . [SEP] it was tired . [SEP]"."""
    from attnlayers.applications.bert import BertBackbone, BertConfig
    from attnlayers.applications.bert.tokenizer import SPECIAL_TOKENS, BertTokenizer
    from attnlayers.applications.bert.viewer import attention_viewer

    tokenizer = BertTokenizer(list(SPECIAL_TOKENS) + BERT_WORDS)
    keras.utils.set_random_seed(4)
    backbone = BertBackbone(BertConfig(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=32,
                                       num_layers=3, num_heads=4, hidden_dim=16, intermediate_dim=32, dropout=0.0))
    viewer = attention_viewer(backbone, tokenizer, "The big cat sat on a mat.", pair="It was tired.",
                              sequence_length=32)
    # Layer 1 through another path: the first block's attention layer on the embeddings (post-LN: its input).
    tokens = viewer.sets[0]["target_tokens"]
    ids = np.asarray([[tokenizer.token_to_id(t) for t in tokens]], "int32")
    segments = np.asarray([[0] * (tokens.index("[SEP]") + 1) + [1] * (len(tokens) - tokens.index("[SEP]") - 1)])
    x = backbone.embeddings_layer_norm(backbone.embeddings(ids, segment_ids=segments))
    _, scores = backbone.encoder.blocks[0].self_attention(x, x, return_attention_scores=True)
    return viewer, {"layer 1": np.asarray(scores)[0], "token_ids": ids[0]}


GPT_CORPUS = ["The quick brown fox jumps over the lazy dog. The dog sleeps.",
              "A cat, a hat; the cat sat on the mat!"] * 4


@functools.lru_cache(maxsize=None)
def gpt_viewer():
    """2 layers x 2 heads, a prompt and 6 greedy tokens, a byte-level BPE of 300 tokens."""
    import tempfile

    from attnlayers.applications.gpt import GPT, GPTConfig
    from attnlayers.applications.gpt.tokenizer import GPT2Tokenizer, train_byte_level_bpe
    from attnlayers.applications.gpt.viewer import attention_viewer

    with tempfile.TemporaryDirectory() as directory:  # the tokenizer reads its files when it is made
        tokenizer = GPT2Tokenizer(*train_byte_level_bpe(GPT_CORPUS, 300, directory))
    keras.utils.set_random_seed(2)
    model = GPT(GPTConfig(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=24, num_layers=2,
                          num_heads=2, hidden_dim=16, intermediate_dim=32, end_token_id=tokenizer.end_token_id))
    prompt = "The cat sat"
    viewer = attention_viewer(model, tokenizer, prompt, max_new_tokens=6)
    ids = np.asarray(tokenizer.tokenize(prompt), "int32")[None]
    generated = np.asarray(model.generate(ids, max_new_tokens=6).tokens)[0]
    return viewer, {"prompt_tokens": ids.shape[1], "generated": generated, "tokenizer": tokenizer}


@functools.lru_cache(maxsize=None)
def captioning_viewer(kind):
    """``kind`` "soft" (Show, Attend and Tell) or "transformer" (2 layers x 2 heads); a 16 x 16 image, a 4 x 4
    grid, a forced 4-word caption (5 steps: the words and <end>)."""
    from attnlayers.applications.captioning import ShowAttendTell, TransformerCaptioner
    from attnlayers.applications.captioning.data import CaptionVocabulary
    from attnlayers.applications.captioning.viewer import attention_viewer

    vocabulary = CaptionVocabulary(["a", "big", "red", "circle", "square", "small"])
    keras.utils.set_random_seed(5)
    common = dict(image_size=16, filters=(4, 8))
    if kind == "transformer":
        model = TransformerCaptioner(vocabulary.vocabulary_size, num_layers=2, d_model=8, num_heads=2,
                                     intermediate_dim=16, dropout=0.0, **common)
    else:
        model = ShowAttendTell(vocabulary.vocabulary_size, units=8, embedding_dim=4, **common)
    image = np.random.default_rng(0).integers(0, 256, (1, 16, 16, 3)).astype("uint8")
    model((image, np.ones((1, 2), "int32")))  # built
    caption = "a big red circle"
    viewer = attention_viewer(model, image, vocabulary, caption=caption)
    caption_in = np.asarray([[model.start_token_id] + vocabulary.encode(caption)], "int32")
    return viewer, {"maps": np.asarray(model.attention_maps(image, caption_in))[0], "grid": model.grid_shape}


@functools.lru_cache(maxsize=None)
def vit_viewer():
    """2 layers x 2 heads on an 8 x 8 digit-like image, 4 x 4 patches of 2 x 2 pixels."""
    from attnlayers.applications.vision import ViT, ViTConfig
    from attnlayers.applications.vision.viewer import attention_viewer
    from attnlayers.rollout import attention_rollout

    keras.utils.set_random_seed(6)
    model = ViT(ViTConfig(image_shape=(8, 8, 1), patch_size=2, num_classes=10, num_layers=2, num_heads=2,
                          hidden_dim=16, mlp_dim=32))
    image = np.random.default_rng(1).random((8, 8, 1)).astype("float32")
    viewer = attention_viewer(model, image)
    scores = [np.asarray(a) for a in model.encode(image[None], return_attention_scores=True)["attention_scores"]]
    return viewer, {"maps": np.stack([a[0] for a in scores]), "rollout": np.asarray(attention_rollout(scores))[0]}
