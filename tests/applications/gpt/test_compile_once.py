"""Decoding that compiles once: generate_text(jit_compile=True) runs greedy search and sampling as one XLA program
(chunked prefill + decoding loop) for every prompt length, max_length and max_new_tokens, and a DecodingSession keeps
a conversation's cache between calls; the tokens are the uncompiled loop's. Tiny random GPT-2 and LLaMA models, on
the backend the suite runs (TensorFlow or JAX; the tokenizer's ops are TensorFlow)."""

import keras
import pytest

from attnlayers.applications.gpt import GPT, GPTConfig
from attnlayers.applications.gpt.generation import DecodingSession, compilations, generate_text
from attnlayers.applications.gpt.tokenizer import GPT2Tokenizer, train_byte_level_bpe

CORPUS = ["The quick brown fox jumps over the lazy dog. The dog sleeps.", "A cat, a hat; the cat sat on the mat!"] * 4
TURNS = ["the cat", " sat on the mat and the dog sleeps.", " The quick brown fox jumps over the lazy dog,",
         " a hat; the cat sat on the mat! The quick brown fox jumps over the lazy dog. The dog sleeps."]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return GPT2Tokenizer(*train_byte_level_bpe(CORPUS, 300, tmp_path_factory.mktemp("bpe")))


@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_a_growing_conversation_compiles_once_with_the_plain_loops_tokens(tokenizer, architecture):
    keras.utils.set_random_seed(5)
    extra = {"num_key_value_heads": 1} if architecture == "llama" else {}
    model = GPT(GPTConfig(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=96, num_layers=1,
                          num_heads=2, hidden_dim=16, intermediate_dim=32, end_token_id=tokenizer.end_token_id,
                          architecture=architecture, **extra))
    session, conversation, widths = DecodingSession(model), "", []
    for turn in TURNS:  # each prompt holds the previous prompt and answer: widths ~2 .. ~70 tokens
        conversation += turn
        widths.append(int(tokenizer.tokenize(conversation).shape[0]))
        plain = generate_text(model, tokenizer, conversation, max_new_tokens=6)[0]
        assert generate_text(model, tokenizer, conversation, max_new_tokens=6, jit_compile=True,
                             session=session)[0] == plain
        if len(widths) > 1:  # the earlier turns came from the cache: the previous prompt and answer
            assert session.reused_tokens >= widths[-2]
        conversation += plain
    assert widths[0] < 8 and widths[-1] > 64  # prompts in two of the old 64-token buckets, and more widths
    assert compilations(model) == 1  # one program for the whole conversation (one per 64-token bucket before)
    with pytest.raises(ValueError, match="`session`.*jit_compile=True"):
        generate_text(model, tokenizer, "the", max_new_tokens=2, session=session)
    if architecture == "llama":
        return
    # Without a session: rows of different lengths, the output length as a value (max_length), one program.
    prompts = ["the dog sleeps. A cat", "the"]
    for max_length in (8, 12):  # 8: the first prompt fills it (nothing generated)
        assert generate_text(model, tokenizer, prompts, max_length=max_length, jit_compile=True) == \
            generate_text(model, tokenizer, prompts, max_length=max_length)
    assert compilations(model) == 2  # + one program for batch 2, both lengths
