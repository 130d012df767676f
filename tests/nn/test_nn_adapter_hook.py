"""The optional low-rank adapter hook of `jaxgen.nn` (absent = the plain graph)."""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.nn import Transformer, TransformerBlock

DIM, HEADS, L = 8, 2, 5


@pytest.mark.parametrize("mixer", ["swiglu", "mlp"])
def test_adapter_adds_exactly_a_linear_term(mixer, getkey):
    """An adapter returning ``x D^T`` equals the block with every adapted weight W -> W + D."""
    block = TransformerBlock(
        DIM, HEADS, mixer, {}, rotary=True, time_conditioning=False, out_std=0.02, key=getkey()
    )
    h = jr.normal(getkey(), (L, DIM))
    names = ["attn.w_qkv"] + [
        f"mixer.{n}" for n in ("w_gate", "w_value", "w_out", "w_in") if hasattr(block.mixer, n)
    ]
    weights = {
        n: getattr(block.attn if n.startswith("attn") else block.mixer, n.split(".")[1])
        for n in names
    }
    deltas = {n: 0.1 * jr.normal(getkey(), w.shape) for n, w in weights.items()}

    def adapter(name, x):
        return x @ deltas[name].T

    merged = block
    for n in names:
        part, field = n.split(".")
        merged = eqx.tree_at(
            lambda b, part=part, field=field: getattr(getattr(b, part), field),
            merged,
            weights[n] + deltas[n],
        )
    f = eqx.filter_jit(lambda b, h, a: b(h, None, causal=True, adapter=a))
    out, _ = f(block, h, adapter)
    ref, _ = merged(h, None, causal=True)
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)
    # the hook is really used: without it the output differs
    assert np.abs(np.asarray(block(h, None, causal=True)[0] - out)).max() > 1e-3


def test_no_adapter_is_the_plain_graph(getkey):
    """``adapter=None`` (the default) is bit for bit the graph without the hook argument."""
    model = Transformer(11, DIM, 2, HEADS, 16, key=getkey())
    tokens = jr.randint(getkey(), (L,), 0, 11)
    h = model.embedding[tokens]
    block = model.blocks[0]
    np.testing.assert_array_equal(
        block(h, None, causal=True)[0], block(h, None, causal=True, adapter=None)[0]
    )
    np.testing.assert_array_equal(
        block.attn(h, causal=True), block.attn(h, causal=True, adapter=None)
    )
    # a zero adapter changes nothing either (x @ W^T + 0 == x @ W^T exactly)
    out_dims = {"attn.w_qkv": 3 * DIM, "mixer.w_out": DIM}

    def zero(name, x):
        return jnp.zeros((x.shape[0], out_dims.get(name, block.mixer.w_gate.shape[0])), x.dtype)

    np.testing.assert_allclose(
        block(h, None, causal=True, adapter=zero)[0],
        block(h, None, causal=True)[0],
        rtol=1e-12,
        atol=1e-14,
    )


def test_adapter_rejects_unsupported_mixer(getkey):
    block = TransformerBlock(
        DIM, HEADS, "moe", {}, rotary=True, time_conditioning=False, out_std=0.02, key=getkey()
    )
    with pytest.raises(TypeError, match="adapter"):
        block(jnp.zeros((L, DIM)), None, causal=True, adapter=lambda n, x: x)
