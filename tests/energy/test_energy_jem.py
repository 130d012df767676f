"""JEM: energies, SGLD, the replay buffer, the loss, training through core.fit."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.core import fit, minibatches
from jaxgen.data import CORRUPTIONS, corrupt
from jaxgen.energy import (
    AbstractClassifier,
    JEMConfig,
    MLPClassifier,
    cue_conflict_shape_bias,
    distortion_ordering,
    energy_joint,
    energy_marginal,
    fit_jem,
    init_replay_buffer,
    jem_loss,
    saliency_diagnostic_correlation,
    sgld,
)
from jaxgen.metrics import brier_score, classification_nll, expected_calibration_error


def test_energy_identities(getkey):
    logits = jr.normal(getkey(), (3, 5, 7))
    y = jr.randint(getkey(), (3, 5), 0, 7)
    log_p = jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], -1)[..., 0]
    np.testing.assert_allclose(log_p, energy_marginal(logits) - energy_joint(logits, y), rtol=1e-12)
    np.testing.assert_allclose(
        energy_marginal(logits + 2.5), energy_marginal(logits) - 2.5, rtol=1e-12
    )
    big = jnp.array([[1e4, 0.0]])
    assert jnp.isfinite(energy_marginal(big)).all()
    with pytest.raises(Exception, match="y"):
        energy_joint(logits, y + 7)


def test_sgld_proper_samples_the_gaussian():
    """Check 3: E = |x|^2 / (2 s^2), s = 0.5, D = 4: variance within 5% of s^2 (1 + O(step))."""
    s = 0.5
    energy = lambda x: jnp.sum(x**2) / (2 * s**2)  # noqa: E731
    x0 = jr.uniform(jr.key(0), (4096, 4), minval=-1, maxval=1)
    step = 1e-2
    run = jax.jit(
        lambda k, x: sgld(k, energy, x, num_steps=2000, step_size=step, clip=None, proper=True)
    )
    x = run(jr.key(1), x0)
    # Euler-Maruyama on an OU process has stationary variance s^2 / (1 - step / (2 s^2))
    target = s**2 / (1 - step / (2 * s**2))
    np.testing.assert_allclose(jnp.var(x, axis=0), target, rtol=0.05)
    assert float(jnp.max(jnp.abs(jnp.mean(x, axis=0)))) <= 0.03
    # The JEM heuristic lowers the energy of its chains (sign check, check 4).
    xj = sgld(jr.key(2), energy, x0[:256], num_steps=20, step_size=0.05, noise=0.01)
    assert float(jnp.mean(jax.vmap(energy)(xj))) < float(jnp.mean(jax.vmap(energy)(x0[:256])))
    with pytest.raises(ValueError, match="`step_size` must be > 0"):
        sgld(jr.key(0), energy, x0, step_size=0.0)
    with pytest.raises(ValueError, match="`clip`"):
        sgld(jr.key(0), energy, x0, clip=(1.0, -1.0))


def test_replay_buffer_semantics(getkey):
    buf = init_replay_buffer(getkey(), 40, 3, num_classes=4)
    x0, idx = buf.sample(getkey(), 16, y=jnp.full(16, 2), reinit_freq=0.0)
    assert bool(jnp.all((idx >= 20) & (idx < 30)))  # class 2's block
    np.testing.assert_array_equal(x0, buf.data[idx])
    new = buf.update(idx, jnp.full((16, 3), 0.5))
    np.testing.assert_array_equal(new.data[idx], 0.5)
    x0, idx = buf.sample(getkey(), 64, y=jnp.zeros(64, int), reinit_freq=1.0)
    assert not bool(jnp.any(jnp.all(x0[:, None, :] == buf.data[None], axis=-1)))
    with pytest.raises(ValueError, match="divisible"):
        init_replay_buffer(getkey(), 10, 3, num_classes=4)
    with pytest.raises(ValueError, match="unconditional"):
        init_replay_buffer(getkey(), 8, 3).sample(getkey(), 2, y=jnp.zeros(2, int))
    with pytest.raises(ValueError, match="reinit_freq"):
        buf.sample(getkey(), 2, reinit_freq=1.5)


@pytest.fixture(scope="module")
def toy():
    key = jr.key(3)
    x = jnp.clip(jr.normal(key, (256, 6)) * 0.4, -1, 1)
    y = (x[:, 0] > 0).astype(jnp.int32) + 2 * (x[:, 1] > 0).astype(jnp.int32)
    return x, y


def test_mix_zero_is_cross_entropy_training(toy, getkey):
    """Check 6: mix = 0 skips SGLD and matches a plain CE trainer on the same batches."""
    x, y = toy
    model = MLPClassifier(6, 4, width=16, key=getkey())
    opt = optax.adam(1e-2)
    key = getkey()
    cfg = JEMConfig(mix=0.0, data_noise=0.0)
    jem = fit_jem(
        model,
        (x, y),
        cfg,
        optimizer=opt,
        key=key,
        num_steps=10,
        batch_size=32,
        buffer_size=64,
        progress=False,
    )

    def ce(m, batch, k):
        logits = jax.vmap(m)(batch[0])
        return jnp.mean(energy_joint(logits, batch[1]) - energy_marginal(logits))

    plain = fit(
        ce, model, minibatches((x, y), 32), opt, num_steps=10, key=jr.split(key)[1], progress=False
    )
    np.testing.assert_allclose(jem.losses, plain.losses, rtol=1e-6)
    for a, b in zip(
        jax.tree_util.tree_leaves(eqx.filter(jem.model, eqx.is_array)),
        jax.tree_util.tree_leaves(eqx.filter(plain.model, eqx.is_array)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(
        jem.buffer.data, init_replay_buffer(jr.split(key)[0], 64, 6, dtype=x.dtype).data
    )


class LinearLogits(AbstractClassifier):
    """Logits ``W x``: a user's classifier in the JEM slot."""

    w: jax.Array

    def __call__(self, x):
        return self.w @ x


def test_jem_loss_gradient_and_training_resume(toy, getkey, tmp_path):
    """Check 2 (linear logits: autodiff of L_gen = E-gradient difference) and resume."""
    x, y = toy
    W = jr.normal(getkey(), (4, 6))
    x_neg = jr.uniform(getkey(), (32, 6), minval=-1, maxval=1)
    cfg = JEMConfig(mix=1.0)

    def gen(W):
        return jem_loss(LinearLogits(W), x[:32], y[:32], x_neg, cfg)[1]["gen"]

    def expected(W):  # dE(x)/dW = -softmax(Wx) x^T
        def de(z):
            return -jnp.outer(jax.nn.softmax(W @ z), z)

        return jnp.mean(jax.vmap(de)(x[:32]), 0) - jnp.mean(jax.vmap(de)(x_neg), 0)

    np.testing.assert_allclose(jax.grad(gen)(W), expected(W), rtol=1e-10, atol=1e-12)
    model = MLPClassifier(6, 4, width=16, key=getkey())
    cfg = JEMConfig(mix=0.3, num_steps=5, step_size=0.5, gamma_reg=0.1)
    key = getkey()
    kw = dict(key=key, batch_size=32, buffer_size=64, steps_per_call=3)
    whole = fit_jem(
        model, (x, y), cfg, optimizer=optax.adam(1e-2), num_steps=8, progress=False, **kw
    )
    assert np.all(np.isfinite(whole.losses))
    ckpt = str(tmp_path / "jem")
    fit_jem(
        model,
        (x, y),
        cfg,
        optimizer=optax.adam(1e-2),
        num_steps=4,
        checkpoint_dir=ckpt,
        checkpoint_every=4,
        progress=False,
        **kw,
    )
    resumed = fit_jem(
        model,
        (x, y),
        cfg,
        optimizer=optax.adam(1e-2),
        num_steps=8,
        checkpoint_dir=ckpt,
        checkpoint_every=4,
        progress=False,
        **kw,
    )
    assert resumed.resumed_from == 4
    np.testing.assert_allclose(resumed.losses, whole.losses, rtol=1e-10)
    np.testing.assert_allclose(resumed.buffer.data, whole.buffer.data, rtol=1e-10)
    with pytest.raises(ValueError, match="`mix`"):
        fit_jem(
            model,
            (x, y),
            JEMConfig(mix=1.5, mode="convex"),
            optimizer=optax.adam(1e-2),
            num_steps=1,
            key=key,
            batch_size=8,
            buffer_size=8,
        )
    with pytest.raises(ValueError, match="`mode`"):
        jem_loss(model, x, y, x, JEMConfig(mix=0.1, mode="mul"))
    with pytest.raises(Exception, match=r"\[-1, 1\]"):
        fit_jem(
            model,
            (x * 5, y),
            cfg,
            optimizer=optax.adam(1e-2),
            num_steps=1,
            key=key,
            batch_size=8,
            buffer_size=8,
            progress=False,
        )


def test_calibration_metrics_against_closed_forms_and_netcal():
    """Check 7: calibrated predictor ECE <= 0.01, over-confident >= 0.05; netcal agreement."""
    n, C = 100_000, 5
    key = jr.key(4)
    probs = jax.nn.softmax(2 * jr.normal(key, (n, C)))
    labels = jr.categorical(jr.fold_in(key, 1), jnp.log(probs))
    assert float(expected_calibration_error(probs, labels)) <= 0.01
    sharp = jax.nn.softmax(jnp.log(probs) / 0.3)
    assert float(expected_calibration_error(sharp, labels)) >= 0.05
    try:
        # netcal's docstrings hold invalid escapes: compiling them without a cached .pyc warns,
        # which this project's filterwarnings = error would turn into a SyntaxError
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
            from netcal.metrics import ECE
    except ImportError:
        pytest.skip("netcal not installed")
    ref = ECE(bins=15).measure(np.asarray(probs[:20000]), np.asarray(labels[:20000]))
    ours = expected_calibration_error(probs[:20000], labels[:20000])
    np.testing.assert_allclose(ours, ref, atol=1e-4)
    onehot = jax.nn.one_hot(labels, C)
    np.testing.assert_allclose(brier_score(onehot, labels), 0.0, atol=1e-12)
    np.testing.assert_allclose(
        classification_nll(probs, labels),
        -jnp.mean(jnp.log(probs[jnp.arange(n), labels])),
        rtol=1e-10,
    )


def test_corruptions_and_proxies(toy, getkey):
    """Check 8 and the proxies on a trained toy classifier."""
    imgs = jr.uniform(getkey(), (4, 8, 8), minval=-1, maxval=1)
    for name in CORRUPTIONS:
        k = getkey()
        a, b = corrupt(k, imgs, name, 0.5), corrupt(k, imgs, name, 0.5)
        np.testing.assert_array_equal(a, b)
        assert float(a.min()) >= -1 and float(a.max()) <= 1 and a.shape == imgs.shape
    np.testing.assert_allclose(corrupt(getkey(), imgs, "contrast", 1.0), imgs, rtol=1e-12)
    flat = jnp.ones((1, 8, 8)) * 0.3
    np.testing.assert_allclose(corrupt(getkey(), flat, "blur", 1.0), flat, rtol=1e-12)
    with pytest.raises(ValueError, match="unknown corruption"):
        corrupt(getkey(), imgs, "fog", 0.1)
    x, y = toy
    model = MLPClassifier(64, 4, width=16, key=getkey())
    X = jnp.tile(x, (1, 11))[:, :64]
    bias = cue_conflict_shape_bias(
        getkey(),
        model,
        X.reshape(-1, 8, 8),
        y,
        low_pass=lambda z: corrupt(jr.key(0), z, "blur", 1.0),
        num_pairs=64,
    )
    assert 0.0 <= float(bias) <= 1.0
    diag = jnp.abs(jr.normal(getkey(), (4, 64)))
    log_p = lambda z, c: jax.nn.log_softmax(model(z))[c]  # noqa: E731
    corr = saliency_diagnostic_correlation(log_p, X, y, diag)
    assert -1.0 <= float(corr) <= 1.0
    order = distortion_ordering(getkey(), model.features, X)
    assert float(order) > 0.5  # stronger noise moves features further, most of the time


def test_jem_step_eager_jit_vmap_and_traces_once(toy, getkey):
    """Eager == jit for jem_loss and sgld, vmap over keys == loop, a step compiles once."""
    x, y = toy
    x, y = x[:16], y[:16]
    model = MLPClassifier(6, 4, width=8, key=getkey())
    cfg = JEMConfig(mix=0.5, gamma_reg=0.1, num_steps=3)
    x_neg = jr.uniform(getkey(), (16, 6), minval=-1, maxval=1)
    eager = jem_loss(model, x, y, x_neg, cfg)
    jitted = eqx.filter_jit(jem_loss)(model, x, y, x_neg, cfg)
    for a, b in zip(
        jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(jitted), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-10)

    def energy(z):
        return energy_marginal(model(z))

    def run(k):
        return sgld(k, energy, x_neg, num_steps=3, step_size=0.1)

    keys = jr.split(getkey(), 3)
    batched = jax.jit(jax.vmap(run))(keys)
    for i in range(3):
        np.testing.assert_allclose(batched[i], run(keys[i]), rtol=1e-10, atol=1e-12)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def step(model, buffer, key):
        k1, k2 = jr.split(key)
        x0, idx = buffer.sample(k1, 16, reinit_freq=cfg.reinit_freq)
        xn = sgld(k2, lambda z: energy_marginal(model(z)), x0, num_steps=cfg.num_steps)
        (loss, _), g = eqx.filter_value_and_grad(jem_loss, has_aux=True)(model, x, y, xn, cfg)
        model = eqx.apply_updates(model, jax.tree_util.tree_map(lambda t: -1e-2 * t, g))
        return model, buffer.update(idx, xn), loss

    buffer = init_replay_buffer(getkey(), 32, 6)
    for _ in range(3):
        model, buffer, loss = step(model, buffer, getkey())
        assert np.isfinite(float(loss))


def test_proxies_refuse_bad_input():
    """NaN images, labels outside the classes and a NaN gain gave plausible proxy values."""
    w = jnp.linspace(-1.0, 1.0, 32).reshape(2, 16)
    imgs = jnp.linspace(-0.8, 0.8, 64).reshape(4, 4, 4)
    labels = jnp.array([0, 1, 0, 1])

    def shape_bias(images=imgs, labels=labels, gain=1.0):
        return cue_conflict_shape_bias(
            jr.key(0), lambda x: w @ x, images, labels, low_pass=lambda x: x * 0.5, gain=gain,
            num_pairs=8,
        )  # fmt: skip

    assert 0.0 <= float(shape_bias()) <= 1.0
    with pytest.raises(ValueError, match=r"`images` must lie in \[-1.0, 1.0\]"):
        shape_bias(images=imgs.at[0, 0, 0].set(jnp.nan))
    with pytest.raises(ValueError, match=r"`labels` must be integer labels in \[0, 2\)"):
        shape_bias(labels=labels.at[0].set(2))
    with pytest.raises(ValueError, match="`gain` must be finite and >= 0"):
        shape_bias(gain=float("nan"))
    flat = imgs.reshape(4, 16)
    log_p = lambda x, c: jax.nn.log_softmax(w @ x)[c]  # noqa: E731
    with pytest.raises(eqx.EquinoxRuntimeError, match="`diagnostic` must be finite"):
        eqx.filter_jit(saliency_diagnostic_correlation)(
            log_p, flat, labels, jnp.abs(w).at[1, 2].set(jnp.inf)
        )
    with pytest.raises(ValueError, match=r"`labels` must be integer labels in \[0, 2\)"):
        saliency_diagnostic_correlation(log_p, flat, labels.at[1].set(-1), jnp.abs(w))
    with pytest.raises(ValueError, match="`images` must have shape"):
        distortion_ordering(jr.key(0), lambda x: w @ x, flat[:0])
    with pytest.raises(ValueError, match="`levels` must be noise sds"):
        distortion_ordering(jr.key(0), lambda x: w @ x, flat, levels=(float("nan"), 0.4))
