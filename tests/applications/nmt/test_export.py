"""The translate SavedModel: strings in, strings out, loaded in a process where attnlayers, keras and keras_hub
cannot be imported; agrees with in-process translation; empty, unknown, too-long and non-UTF-8 inputs and
empty batches give sensible outputs and flags. Here a Transformer's export; an RNN model's (luong, trained by
examples/train_nmt.py) is served the same way, against the script's in-process beam search, in
test_example.py::test_one_epoch_on_a_tsv_file_writes_every_artefact."""

import json
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from attnlayers import BeamSearch
from attnlayers.applications import nmt
from attnlayers.applications.nmt import evaluate
from attnlayers.applications.nmt.export import export_translator
from attnlayers.applications.nmt.model import build_model
from model_harness import serve_alone

LENGTH = 12
SCRIPT = textwrap.dedent(
    """
    import json, sys
    hide("attnlayers", "keras", "keras_hub")  # noqa: F821  (serve_alone's prelude): any import of them fails
    import tensorflow as tf
    unhide("keras")  # noqa: F821  tensorflow_text imports keras itself (tf.keras); attnlayers stays blocked
    import tensorflow_text  # noqa: F401  registers the SentencePiece ops
    texts = json.loads(sys.argv[2])
    translator = tf.saved_model.load(sys.argv[1])
    out = translator.signatures["translate"](text=tf.constant(texts))
    empty_batch = translator.translate(tf.constant([], tf.string))
    bad_utf8 = translator.translate(tf.constant([b"\\xff\\xfe abc"]))
    print(json.dumps({
        "translation": [t.decode() for t in out["translation"].numpy()],
        "truncated": out["truncated"].numpy().tolist(), "empty": out["empty"].numpy().tolist(),
        "token_ids": out["token_ids"].numpy().tolist(), "score": out["score"].numpy().tolist(),
        "empty_batch": list(empty_batch["translation"].shape), "bad_utf8": bad_utf8["translation"].numpy()[0].decode(
            "utf-8", "replace"),
    }))
    """
)


@pytest.fixture(scope="module")
def task():
    pairs = nmt.synthetic_pairs(300, seed=7, max_length=8)
    tokenizers = nmt.build_tokenizers(pairs, source_vocabulary_size=200, target_vocabulary_size=200,
                                      model_type="word")
    return pairs, tokenizers


# The RNN models' export (the recurrent decoder's step and state in the beam search): test_example.py's run serves
# the luong model that examples/train_nmt.py exported.
@pytest.mark.parametrize("name", ["transformer"])
def test_translate_signature_serves_without_attnlayers(task, tmp_path, name):
    pairs, tokenizers = task
    keras.utils.set_random_seed(11)
    vocabulary = (tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size)
    if name == "transformer":
        model = build_model(name, *vocabulary, num_layers=1, d_model=32, num_heads=2, intermediate_dim=64,
                            max_length=LENGTH)
    else:
        model = build_model(name, *vocabulary, embedding_dim=16, units=32)
    ids = np.ones((1, 3), "int32")
    model((ids, ids))
    beam = BeamSearch(3, alpha=0.6)
    path = str(tmp_path / name)
    export_translator(path, model, tokenizers, search=beam, max_source_length=LENGTH, max_length=LENGTH)

    long_sentence = " ".join(pairs.source[:5])  # ~30 words > LENGTH
    texts = [pairs.source[0], "", "   ", "qqq zzz ÄÖÜ 😀 " + pairs.source[1], long_sentence, pairs.source[2]]
    served = serve_alone(SCRIPT, path, json.dumps(texts), cwd=tmp_path)

    expected = evaluate.translate(model, tokenizers, texts, max_source_length=LENGTH, max_length=LENGTH,
                                  search=beam, warn_truncation=False)
    assert served["translation"] == expected
    assert served["empty"] == [False, True, True, False, False, False]
    assert served["translation"][1] == served["translation"][2] == ""
    assert served["truncated"] == [False, False, False, False, True, False]
    assert all(isinstance(t, str) for t in served["translation"])  # unknown characters, truncation: no crash
    tokens = np.asarray(served["token_ids"])
    assert tokens.shape == (6, LENGTH) and (tokens[:, 0] == nmt.START_ID).all()
    assert np.isfinite(served["score"]).all()
    assert served["empty_batch"] == [0]
    assert isinstance(served["bad_utf8"], str)


def test_export_refuses_other_backends_and_keeps_sampling_seeded(task, tmp_path):
    pairs, tokenizers = task
    keras.utils.set_random_seed(12)
    model = build_model("luong", tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size,
                        embedding_dim=16, units=32)
    ids = np.ones((1, 3), "int32")
    model((ids, ids))
    from attnlayers import Sampling

    module = export_translator(str(tmp_path / "sample"), model, tokenizers, search=Sampling(temperature=1.5),
                               max_source_length=LENGTH, max_length=LENGTH, jit_compile=False)
    text = tf.constant(list(pairs.source[:4]))
    first = module.translate(text, tf.constant(5))["translation"].numpy()
    again = module.translate(text, tf.constant(5))["translation"].numpy()
    np.testing.assert_array_equal(first, again)  # the seed is an input: same seed, same translations
    by_name = module.translate(text=text, seed=tf.constant(5))["translation"].numpy()  # keyword arguments too
    np.testing.assert_array_equal(first, by_name)
