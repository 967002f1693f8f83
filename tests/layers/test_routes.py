"""The route policy of MultiHeadAttention (attnlayers.routes): one table of routes, what each needs, the choice."""

import numpy as np
import pytest
from keras import ops

from attnlayers import chunked, routes
from attnlayers.multi_head import MultiHeadAttention
from attnlayers.routes import AttentionRoute


def _call(**overrides):
    facts = {"implementation": "auto", "flash_attention": None, "query_length": 8, "key_length": 8, "dtype": "float32",
             "key_dim": 4, "value_dim": 4, "scale": 0.5, "score": "scaled_dot", "layer_class": "MultiHeadAttention"}
    return routes.Call(**{**facts, **overrides})


def test_the_table_decides_and_says_why():
    """"auto" takes the first route of the table that it may take; a named route that cannot compute the call is
    refused with the sentence of its first unmet need."""
    assert routes.choose(_call()) == "exact"  # no cuDNN here; short queries
    assert routes.choose(_call(query_length=routes.CHUNKED_MIN_LENGTH, key_length=16)) == "chunked"
    assert routes.choose(_call(implementation="chunked", cached=True)) == "exact"  # decoding attends exactly
    assert routes.refusal("chunked", _call(per_head_mask=True)).startswith("it takes one attention mask")
    assert routes.refusal("exact", _call(scale=None, return_attention_scores=True)) is None
    with pytest.raises(ValueError, match="implementation='chunked'.*Sub overrides _masked_softmax"):
        routes.choose(_call(implementation="chunked", layer_class="Sub", overridden=("_masked_softmax",)))
    with pytest.raises(ValueError, match="flash_attention=True.*position_bias hook \\(ALiBi\\)"):
        routes.choose(_call(implementation="chunked", flash_attention=True, position_bias="ALiBi"))


def test_a_new_route_is_one_entry_and_one_function(monkeypatch):
    """A route added to the table (its needs, whether "auto" takes it, its function) computes the layer's calls."""
    problems = []

    def attend(problem):
        problems.append(problem)
        heads = chunked.chunked_attention(problem.query, problem.key, problem.value, problem.bias,
                                          scale=problem.scale, **problem.structure)
        return heads, AttentionRoute("blocks")

    table = {"blocks": routes.Route(routes.ROUTES["chunked"].needs, lambda call: True, attend), **routes.ROUTES}
    monkeypatch.setattr(routes, "ROUTES", table)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    layer = MultiHeadAttention(2, 4, implementation="exact")
    expected = layer(x, x, use_causal_mask=True)
    layer._implementation = "auto"
    got = layer(x, x, use_causal_mask=True)
    assert layer.last_attention == AttentionRoute("blocks") and len(problems) == 1
    np.testing.assert_allclose(ops.convert_to_numpy(got), ops.convert_to_numpy(expected), atol=1e-5)


def test_flash_runs_when_named_and_auto_takes_it_where_triton_compiles_it(monkeypatch):
    """The flash route computes a call when named where its kernel runs; "auto" takes it on a GPU (Triton) for
    what cuDNN's fused route does not take (attention dropout), in Pallas' interpreter never; it refuses what its
    kernel does not compute, by reason, and "auto" then goes on down the table."""
    monkeypatch.setattr(routes, "flash_kernel", lambda: "triton")  # JAX on a GPU
    monkeypatch.setattr(routes.fused, "kernel", lambda *args, **kwargs: "cudnn")  # cuDNN there (none here)
    assert routes.choose(_call(implementation="flash", dropout=0.1)) == "flash"
    assert routes.choose(_call(dropout=0.1)) == "flash"
    assert routes.choose(_call()) == "fused"  # no dropout: cuDNN first
    assert routes.choose(_call(dtype="float32", key_dim=256, value_dim=256, dropout=0.1)) == "exact"  # untried size
    assert routes.choose(_call(dropout=0.1, attention_bias=True)) == "exact"
    assert routes.choose(_call(dropout=0.1, attention_bias=True, query_length=routes.CHUNKED_MIN_LENGTH)) == \
        "chunked"
    assert routes.refusal("flash", _call(attention_bias=True)) == "it adds no bias to the logits; received an " \
                                                                  "attention_bias"
    assert routes.refusal("flash", _call(key_length=None)).startswith("its kernels are compiled for the lengths")
    assert routes.loadable_implementation("flash") == "flash"
    monkeypatch.setattr(routes, "flash_kernel", lambda: "interpret")  # no GPU, the interpreter allowed
    assert routes.choose(_call(dropout=0.1)) == "exact"
    assert routes.choose(_call(implementation="flash", dropout=0.1)) == "flash"
    monkeypatch.setattr(routes, "flash_kernel", lambda: None)
    with pytest.raises(ValueError, match="implementation='flash'.*the flash route cannot compute"):
        routes.choose(_call(implementation="flash", dropout=0.1))
    assert routes.loadable_implementation("flash") == "auto"  # a config saved on a GPU loads anywhere
