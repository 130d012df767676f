"""Every channel mixer and the transformer: shapes, jit == eager, vmap == loop, errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from jaxgen.nn import (
    MIXERS,
    MoEMixer,
    RMSNorm,
    Transformer,
    make_mixer,
    sinusoidal_embedding,
    swiglu_hidden,
)

P = 8


# The gated continued-fraction mixer runs by default; the others (compiled elsewhere in the
# suite through the transformer and the MoE test) with -m slow.
@pytest.mark.parametrize(
    "name",
    [n if n == "gated_cofrgenet" else pytest.param(n, marks=pytest.mark.slow) for n in MIXERS],
)
def test_mixer_shapes_jit_vmap(getkey, name):
    mixer = make_mixer(name, P, key=getkey())
    h = jr.normal(getkey(), (5, P))
    eager = mixer(h[0])
    assert eager.shape == (P,)
    one = eqx.filter_jit(lambda m, x: m(x))
    np.testing.assert_allclose(one(mixer, h[0]), eager, rtol=1e-10)
    out, aux = eqx.filter_jit(lambda m, x: m.apply_sequence(x))(mixer, h)
    np.testing.assert_allclose(out, jnp.stack([one(mixer, x) for x in h]), rtol=1e-10)
    assert aux.shape == ()
    batched = eqx.filter_jit(jax.vmap(lambda x: mixer.apply_sequence(x)[0]))(h[None])
    assert batched.shape == (1, 5, P)
    # bf16 forward stays finite (F10)
    m16 = jax.tree_util.tree_map(
        lambda x: x.astype(jnp.bfloat16) if eqx.is_inexact_array(x) else x, mixer
    )
    y16 = eqx.filter_jit(lambda m, x: m.apply_sequence(x)[0])(m16, h.astype(jnp.bfloat16))
    assert y16.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(y16)))


def test_moe_load_loss_balanced_is_one(getkey):
    moe = MoEMixer(P, num_experts=4, top_k=1, key=getkey(), expert="gated_cofrgenet")
    moe = eqx.tree_at(lambda m: m.router, moe, jnp.zeros_like(moe.router))  # uniform router
    _, aux = eqx.filter_jit(lambda m, x: m.apply_sequence(x))(moe, jr.normal(getkey(), (6, P)))
    # uniform probabilities: P_i = 1/E, sum_i f_i = 1 -> E * (1/E) = 1
    assert float(aux) == pytest.approx(1.0, rel=1e-12)


def test_layers_closed_forms():
    norm = RMSNorm(4)
    x = jnp.array([1.0, -1.0, 1.0, -1.0])
    np.testing.assert_allclose(norm(3 * x), x, rtol=1e-5)
    emb = sinusoidal_embedding(jnp.asarray(0.0), 6)
    np.testing.assert_allclose(emb, [1, 1, 1, 0, 0, 0])
    assert swiglu_hidden(128) == 344


def test_mixer_bad_input(getkey):
    with pytest.raises(ValueError, match="unknown mixer 'ffn'.*gated_cofrgenet"):
        make_mixer("ffn", P, key=getkey())
    with pytest.raises(ValueError, match="one token of shape"):
        make_mixer("mlp", P, key=getkey())(jnp.zeros((2, P)))
    with pytest.raises(ValueError, match="top_k"):
        MoEMixer(P, num_experts=2, top_k=3, key=getkey())
    with pytest.raises(ValueError, match="unknown `expert`"):
        MoEMixer(P, expert="moe", key=getkey())
    with pytest.raises(ValueError, match="RMSNorm expects"):
        RMSNorm(3)(jnp.zeros(4))
    with pytest.raises(ValueError, match="even"):
        sinusoidal_embedding(jnp.asarray(1.0), 5)


@pytest.fixture(scope="module")
def tiny_models():
    causal = Transformer(11, 8, 2, 2, 6, key=jr.key(1), mixer="gated_cofrgenet")
    bidir = Transformer(
        12,
        8,
        1,
        2,
        6,
        key=jr.key(2),
        causal=False,
        time_conditioning=True,
        out_size=11,
        tie_embeddings=False,
        positions="learned",
    )
    return causal, bidir


def test_transformer_causality(tiny_models):
    causal, bidir = tiny_models
    x = jnp.array([1, 2, 3, 4, 5, 6])
    y = x.at[4].set(9)
    f = eqx.filter_jit(lambda m, s: m(s))
    lc_x, lc_y = f(causal, x), f(causal, y)
    np.testing.assert_allclose(lc_x[:4], lc_y[:4], rtol=1e-12)  # past unaffected by the future
    assert not np.allclose(lc_x[4:], lc_y[4:])
    t = jnp.asarray(0.5)
    g = eqx.filter_jit(lambda m, s, t: m(s, t))
    lb_x, lb_y = g(bidir, x, t), g(bidir, y, t)
    assert lb_x.shape == (6, 11)
    assert not np.allclose(lb_x[:4], lb_y[:4])  # bidirectional: every position sees position 4
    np.testing.assert_allclose(g(bidir, x, t), bidir(x, t), rtol=1e-10)  # jit == eager


def test_transformer_time_hook(tiny_models, getkey):
    _, bidir = tiny_models
    x = jnp.array([1, 2, 3])
    # The zero-initialised modulation makes t irrelevant at init; a nonzero one makes it matter.
    np.testing.assert_allclose(bidir(x, jnp.asarray(0.1)), bidir(x, jnp.asarray(0.9)))
    mod = jr.normal(getkey(), bidir.blocks[0].modulation.shape)
    m2 = eqx.tree_at(lambda m: m.blocks[0].modulation, bidir, mod)
    assert not np.allclose(m2(x, jnp.asarray(0.1)), m2(x, jnp.asarray(0.9)))


def test_transformer_bad_input(tiny_models):
    causal, bidir = tiny_models
    with pytest.raises(ValueError, match="exceeds the model's max_len 6"):
        causal(jnp.zeros(7, int))
    with pytest.raises(TypeError):  # the jaxtyping hook rejects a batch / float ids first
        causal(jnp.zeros((2, 3), int))
    with pytest.raises(TypeError):
        causal(jnp.zeros(3))
    with pytest.raises(ValueError, match="no time conditioning"):
        causal(jnp.zeros(3, int), jnp.asarray(0.5))
    with pytest.raises(ValueError, match="pass `t`"):
        bidir(jnp.zeros(3, int))
    with pytest.raises(Exception, match="outside"):
        causal(jnp.array([0, 11]))
    with pytest.raises(ValueError, match="positions"):
        Transformer(5, 8, 1, 2, 4, key=jr.key(0), positions="alibi")
    with pytest.raises(ValueError, match="tie_embeddings=False"):
        Transformer(5, 8, 1, 2, 4, key=jr.key(0), out_size=4)
    with pytest.raises(ValueError, match="divisible"):
        Transformer(5, 8, 1, 3, 4, key=jr.key(0))


def test_attention_key_mask_equals_attention_on_kept_tokens():
    from jaxgen.nn import MultiHeadAttention, TransformerBlock

    key = jr.key(7)
    attn = MultiHeadAttention(8, 2, rotary=False, key=key)
    x = jr.normal(jr.key(8), (6, 8))
    mask = jnp.array([True, False, True, True, False, True])
    keep = np.flatnonzero(np.asarray(mask))
    masked = jax.jit(lambda x, m: attn(x, causal=False, mask=m))(x, mask)
    # Without rotary positions, a query attending to the kept keys only is exactly the
    # unmasked attention on the sequence with the padding removed.
    dense = attn(x[keep], causal=False)
    np.testing.assert_allclose(masked[keep], dense, rtol=1e-10, atol=1e-12)
    # Padded keys with any content change nothing.
    x2 = x.at[1].set(100.0).at[4].set(-3.0)
    np.testing.assert_allclose(attn(x2, causal=False, mask=mask)[keep], masked[keep], rtol=1e-10)
    # mask=None is the unmasked graph; an all-True mask gives the same values.
    np.testing.assert_allclose(
        attn(x, causal=True, mask=jnp.ones(6, bool)), attn(x, causal=True), rtol=1e-12
    )
    block = TransformerBlock(
        8, 2, "mlp", {}, rotary=False, time_conditioning=False, out_std=0.02, key=key
    )
    out, _ = block(x2, None, causal=False, mask=mask)
    ref, _ = block(x[keep], None, causal=False)
    np.testing.assert_allclose(out[keep], ref, rtol=1e-10, atol=1e-12)
    # The annotation refuses a wrong length first under the jaxtyping hook; the check otherwise.
    with pytest.raises((TypeError, ValueError), match="mask"):
        attn(x, causal=False, mask=jnp.ones(5, bool))
