"""SavedModel export of generation (TensorFlow only): the `generate` signature round-trips into a fresh process
that imports only tensorflow (and tensorflow_text for the tokenizer case), never attnlayers, keras or keras_hub,
and gives the in-process results: token ids in / token ids and scores out with cached beam search, strings in /
strings out with a keras-hub WordPiece tokenizer, a seed input for sampling."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="SavedModel export is TensorFlow-only"
)

if keras.backend.backend() == "tensorflow":
    import keras_hub
    import tensorflow as tf
    from keras import ops

    from attnlayers import TokenAndPositionEmbedding, TransformerDecoder
    from attnlayers.decoding import BeamSearch, Sampling, generate
    from attnlayers.export import export_generate

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "ran", "to", "red", "big", "and", "##s", "saw"]
VOCAB = ["[PAD]", "[UNK]", "[END]"] + WORDS
LENGTH, DIM, LAYERS, HEADS = 12, 16, 2, 2
END = 2


class TinyLM:
    """Decoder-only: TokenAndPositionEmbedding + pre-LN TransformerDecoder + tied logits, with a cache."""

    def __init__(self):
        self.embed = TokenAndPositionEmbedding(len(VOCAB), LENGTH, DIM)
        self.decoder = TransformerDecoder(LAYERS, HEADS, 32, normalize_first=True, activation="gelu")
        self.decoder(self.embed(np.zeros((1, LENGTH), "int32")))

    def next(self, tokens, cache, index):
        token = ops.take(tokens, ops.reshape(index - 1, (1,)), axis=1)
        out = self.decoder(self.embed(token, start_index=index - 1), self_attention_cache=cache,
                           self_attention_cache_update_index=index - 1)
        return self.embed(out["sequence_output"], reverse=True)[:, 0], out["self_attention_cache"]

    def prepare(self, token_ids, padding_mask):
        """Prefill: the prompt's keys and values in one pass."""
        cache = ops.zeros((ops.shape(token_ids)[0], LAYERS, 2, LENGTH, HEADS, DIM // HEADS))
        out = self.decoder(self.embed(token_ids), self_attention_cache=cache, self_attention_cache_update_index=0)
        return {"prompt": token_ids, "prompt_mask": padding_mask, "cache": out["self_attention_cache"]}


IDS = np.array([[4, 5, 6, 0], [7, 0, 0, 0]], "int32")
TEXTS = ["the cat sat", "a big dog ran to"]
SEED = 17

SCRIPT = textwrap.dedent(
    """
    import json, sys
    for name in ("attnlayers", "keras", "keras_hub"):
        sys.modules[name] = None  # any import of them fails
    import tensorflow as tf
    ids_dir, text_dir, sample_dir = sys.argv[1:4]
    ids = tf.constant({ids}, tf.int32)
    out = tf.saved_model.load(ids_dir).signatures["generate"](token_ids=ids, padding_mask=ids != 0)
    sample = tf.saved_model.load(sample_dir).signatures["generate"](
        token_ids=ids, padding_mask=ids != 0, seed=tf.constant({seed}))
    result = {{"ids": {{k: v.numpy().tolist() for k, v in out.items()}},
              "sample": sample["token_ids"].numpy().tolist()}}
    del sys.modules["keras"]  # tensorflow_text imports keras itself (tf.keras); attnlayers stays blocked
    import tensorflow_text  # registers the tokenizer ops
    text = tf.saved_model.load(text_dir).signatures["generate"](text=tf.constant({texts}))
    result["text"] = [s.decode() for s in text["text"].numpy().tolist()]
    result["text_ids"] = text["token_ids"].numpy().tolist()
    print(json.dumps(result))
    """
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    keras.utils.set_random_seed(3)
    lm = TinyLM()
    root = tmp_path_factory.mktemp("export")
    paths = {name: str(root / name) for name in ("ids", "text", "sample")}
    beam = BeamSearch(2, 2, alpha=0.6)
    export_generate(paths["ids"], lm.next, LENGTH, beam, track=[lm.embed, lm.decoder], prepare=lm.prepare,
                    stop_token_ids=[END])
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB, lowercase=True)
    export_generate(paths["text"], lm.next, LENGTH, "greedy", track=[lm.embed, lm.decoder], prepare=lm.prepare,
                    stop_token_ids=[END], tokenizer=tokenizer)
    sampling = Sampling(top_k=4, temperature=2.0)
    export_generate(paths["sample"], lm.next, LENGTH, sampling, track=[lm.embed, lm.decoder], prepare=lm.prepare,
                    jit_compile=False)
    # In-process references: generate() itself, no export involved.
    ids_mask = IDS != 0
    expected = {
        "ids": generate(lm.next, IDS, LENGTH, beam, cache=lm.prepare(IDS, ids_mask)["cache"], prompt_mask=ids_mask,
                        stop_token_ids=[END]),
        "sample": generate(lm.next, IDS, LENGTH, sampling, cache=lm.prepare(IDS, ids_mask)["cache"],
                           prompt_mask=ids_mask, seed=SEED),
    }
    tokenized = tf.function(lambda t: tokenizer.tokenize(t).to_tensor())(tf.constant(TEXTS)).numpy()
    text_mask = tokenized != 0
    expected["text"] = generate(lm.next, tokenized, LENGTH, "greedy", cache=lm.prepare(tokenized, text_mask)["cache"],
                                prompt_mask=text_mask, stop_token_ids=[END])
    expected["prompt_lengths"] = text_mask.sum(1)
    return paths, expected


def test_generate_signature_round_trips_without_attnlayers(exported):
    paths, expected = exported
    script = SCRIPT.format(ids=IDS.tolist(), seed=SEED, texts=TEXTS)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ""}
    run = subprocess.run(
        [sys.executable, "-c", script, paths["ids"], paths["text"], paths["sample"]],
        capture_output=True, text=True, timeout=300, cwd=os.path.dirname(paths["ids"]), env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    loaded = json.loads(run.stdout.strip().splitlines()[-1])

    # Token ids in, token ids and scores out: cached beam search with t = 2 and a length penalty.
    ids, beam = loaded["ids"], expected["ids"]
    np.testing.assert_array_equal(ids["token_ids"], np.asarray(beam.tokens))
    np.testing.assert_allclose(ids["scores"], np.asarray(beam.scores), atol=1e-4)
    np.testing.assert_allclose(ids["log_probs"], np.asarray(beam.log_probs), atol=1e-4)
    np.testing.assert_array_equal(ids["lengths"], np.asarray(beam.lengths))
    assert np.asarray(ids["token_ids"]).shape == (2, 2, LENGTH)

    # Sampling: the seed is an input; same seed, same tokens as in process.
    np.testing.assert_array_equal(loaded["sample"], np.asarray(expected["sample"].tokens))

    # Strings in, strings out.
    greedy = expected["text"]
    np.testing.assert_array_equal(loaded["text_ids"], np.asarray(greedy.tokens))
    vocab = np.array(VOCAB)
    for row, text in enumerate(loaded["text"]):
        tokens = np.asarray(greedy.tokens)[row, expected["prompt_lengths"][row]: int(np.asarray(greedy.lengths)[row])]
        words = [w for w in vocab[tokens[tokens != END]]]
        assert text == " ".join(words).replace(" ##", ""), (text, words)
    assert any(text for text in loaded["text"])


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_length.*max_length=0"):
        export_generate("/tmp/unused", lambda t, c, i: (t, c), 0)
    with pytest.raises(ValueError, match="tokenizer"):
        export_generate("/tmp/unused", lambda t, c, i: (t, c), 4, tokenizer=object())
    with pytest.raises(ValueError, match="track"):
        export_generate("/tmp/unused", lambda t, c, i: (t, c), 4, track=[object()])
