"""SMFSR pieces: VSD, GAN stage, nets, resume."""

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.core import fit, minibatches
from jaxgen.flows import (
    FeatureDiscriminator,
    FrozenFeatures,
    GaussianAverageVelocity,
    GaussianVelocity,
    IntervalConditionedNet,
    LinearInterpolant,
    NoiseAtOneVelocity,
    SRVelocityNet,
    fake_score_loss,
    feature_matching_loss,
    flow_matching_loss,
    gan_optimizer,
    gan_refine_loss,
    hinge_d_loss,
    hinge_g_loss,
    sample_velocity_euler,
    splitmeanflow_loss,
    vsd_loss,
    with_ema,
)

SHAPE = (2, 2, 1)


def gauss(mu, s):
    return GaussianVelocity(GaussianAverageVelocity(jnp.asarray([mu]), s))


def test_vsd_zero_with_equal_scores_and_sign(getkey):
    """Check 7: v_psi = v_phi gives a zero generator gradient; N(1,1) vs teacher N(0,1) moves
    the generator's mean towards 0."""
    noise = jr.normal(getkey(), (256, 1))
    key = getkey()

    @jax.jit
    def grad(shift, teacher_mu, fake_mu):
        return jax.grad(lambda b: vsd_loss(b + noise, gauss(teacher_mu, 1.0), gauss(fake_mu, 1.0),
                                           None, key))(shift)  # fmt: skip

    assert float(grad(1.0, 0.0, 0.0)) == 0.0
    g = float(grad(1.0, 0.0, 1.0))
    assert g > 0  # gradient descent lowers the mean: towards the teacher's 0
    # fake-score loss of the exact field of p_G's path is its irreducible minimum, lower than a
    # wrong field's
    g_out = 1.0 + noise
    exact = float(fake_score_loss(gauss(1.0, 1.0), g_out, None, key))
    wrong = float(fake_score_loss(gauss(-1.0, 1.0), g_out, None, key))
    assert exact < wrong


@pytest.fixture(scope="module")
def stage():
    """A tiny teacher (library convention), its t = 1-noise view, student, D, data."""
    keys = jr.split(jr.key(0), 6)
    net = SRVelocityNet(SHAPE, width=16, depth=2, emb_dim=8, key=keys[0])
    teacher = NoiseAtOneVelocity(net)
    student = IntervalConditionedNet.from_velocity(teacher, key=keys[1], freq_dim=8)
    features = FrozenFeatures(teacher, tau=0.1)
    x = jr.normal(keys[2], (64, 4))
    cond = x + 0.3 * jr.normal(keys[3], (64, 4))
    feats = features(x[0], cond[0])
    disc = FeatureDiscriminator(tuple(f.shape[0] for f in feats), 4, width=8, key=keys[4])
    # one loss object per stage: fit's compiled chunk is reused (a functools.partial is static
    # for filter_jit, so the frozen teacher is a constant, never a donated argument)
    losses = {
        "teacher": teacher_loss,
        "smf": with_ema(ft.partial(smf_loss, teacher=teacher), 0.9),
        "gan": ft.partial(gan_refine_loss, teacher=teacher, features=features, ema_decay=0.9),
    }
    return net, teacher, student, features, disc, (x, cond), losses


@pytest.mark.slow  # the --full path; `run splitmeanflow_sr --full --smoke` also runs it
def test_unet_path_shapes_and_init_identity(stage, getkey):
    """The --full U-Net: output and feature shapes, D on its features, student = teacher at init.

    (eager == jit and vmap == loop of the nets are covered by the samplers and losses of
    test_flows_mean_flow; everything here runs in one compiled call.)
    """
    unet = SRVelocityNet((4, 4, 3), kind="unet", width=4, emb_dim=8, key=getkey())
    z = jr.normal(getkey(), (48,))
    feats_shape = jax.eval_shape(FrozenFeatures(NoiseAtOneVelocity(unet)), z, z)
    assert [f.shape for f in feats_shape] == [(4, 4, 4), (8, 2, 2), (4, 4, 4)]
    d = FeatureDiscriminator(tuple(f.shape[0] for f in feats_shape), 48, width=4, key=getkey())
    student = IntervalConditionedNet.from_velocity(NoiseAtOneVelocity(unet), key=getkey())

    @eqx.filter_jit
    def outputs(unet, student, d, z):
        feats = FrozenFeatures(NoiseAtOneVelocity(unet))(z, z)
        return unet(0.4, z, z), student(z, 0.2, 0.6, z), d(feats, z)

    v, u, logit = outputs(unet, student, d, z)
    assert v.shape == (48,) and logit.shape == ()
    np.testing.assert_allclose(u, -v, rtol=1e-12)


def test_frozen_features_pass_input_gradients_only(stage):
    net, teacher, _, features, disc, (x, cond), _ = stage

    def score(feat_module, img):
        return sum(jnp.sum(f**2) for f in feat_module(img, cond[0]))

    # jitted: eagerly, each small op of the feature nets and their gradients compiles on its own
    g_params = eqx.filter_jit(eqx.filter_grad(score))(features, x[0])
    assert all(float(jnp.max(jnp.abs(a))) == 0.0 for a in jax.tree.leaves(g_params))
    g_input = eqx.filter_jit(jax.grad(score, argnums=1))(features, x[0])
    assert float(jnp.max(jnp.abs(g_input))) > 0
    # the feature-matching loss is 0 at G = x and positive elsewhere; hinge losses
    fm_loss = eqx.filter_jit(feature_matching_loss)
    assert float(fm_loss(features, x[:4], x[:4], cond[:4])) < 1e-20
    assert float(fm_loss(features, x[4:8], x[:4], cond[:4])) > 0
    assert float(hinge_d_loss(jnp.array([2.0, 1.5]), jnp.array([-3.0, -1.0]))) == 0.0
    assert float(hinge_g_loss(jnp.array([1.0, 3.0]))) == -2.0


def teacher_loss(model, batch, key):
    """Stage 0: library convention, x0 = noise, x1 = HR, cond = upsampled LR."""
    x, cond = batch
    noise = jr.normal(jr.fold_in(key, 1), x.shape, x.dtype)
    return flow_matching_loss(model, (noise, x, cond), key, interpolant=LinearInterpolant(),
                              time_sampler="logit_normal", cond_dropout=0.1)  # fmt: skip


def smf_loss(model, batch, key, *, teacher):
    return splitmeanflow_loss(model, batch, key, teacher=teacher)


ADAM = optax.adam(1e-3)
GAN_OPT = gan_optimizer(optax.adam(2e-5), optax.adam(1e-4), optax.adam(1e-4))


def _stage_run(stage, which, num_steps, ckpt):
    net, teacher, student, features, disc, data, losses = stage
    batches = minibatches(data, 16)
    ema0 = eqx.filter(student, eqx.is_inexact_array)
    kw = dict(num_steps=num_steps, key=jr.key(3), steps_per_call=2, progress=False,
              checkpoint_dir=ckpt, checkpoint_every=2)  # fmt: skip
    if which == "teacher":
        return fit(losses[which], net, batches, ADAM, **kw)
    if which == "smf":
        return fit(losses[which], student, batches, ADAM, state=ema0, **kw)
    return fit(losses[which], (student, disc, teacher), batches, GAN_OPT, state=ema0, **kw)


# each stage compiles a fit chunk (5-10 CPU-s): slow. Fast twins: the fit-resume tests of
# tests/core and the one-trace training step of test_flows_mean_flow.
@pytest.mark.slow
@pytest.mark.parametrize("which", ["teacher", "smf", "gan"])
def test_stage_resume_equals_uninterrupted(stage, which, tmp_path):
    full = _stage_run(stage, which, 4, str(tmp_path / "a"))
    _stage_run(stage, which, 2, str(tmp_path / "b"))
    resumed = _stage_run(stage, which, 4, str(tmp_path / "b"))
    assert resumed.resumed_from == 2
    np.testing.assert_allclose(resumed.losses, full.losses, rtol=1e-10)
    leaves = [jax.tree.leaves(eqx.filter(r.model, eqx.is_array)) for r in (resumed, full)]
    for a, b in zip(*leaves, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert np.all(np.isfinite(full.losses))
    if which == "gan":
        # per-player optimisers: the frozen teacher is never an argument; D moved, and the
        # EMA state differs from the student
        student, disc, fake = full.model
        assert not np.allclose(disc.outs[0].weight, stage[4].outs[0].weight)
        assert not np.allclose(
            fake.field.body.layers[0].weight, stage[1].field.body.layers[0].weight
        )


def test_euler_teacher_sampling_through_solve_ode(getkey):
    """Euler-1 from noise is z - v(1, z), through jaxgen.core.solve_ode."""
    exact = GaussianAverageVelocity(jnp.array([0.5, -1.0]), jnp.array([0.3, 0.8]))
    field = GaussianVelocity(exact)
    key = getkey()
    eps = jr.normal(key, (2,))
    # one Euler step from t = 1 is eps - v(1, eps): the time reversal and sign are right (the
    # Euler convergence itself is solve_ode's, tested in tests/core)
    one = eqx.filter_jit(sample_velocity_euler)(key, field, None, 2, steps=1)
    np.testing.assert_allclose(one, eps - field(1.0, eps), rtol=1e-10)


def test_bad_inputs(stage, getkey):
    net, teacher, student, features, disc, (x, cond), _ = stage
    with pytest.raises(ValueError, match="kind"):
        SRVelocityNet(SHAPE, kind="vit", key=getkey())
    with pytest.raises(ValueError, match="even H and W"):
        SRVelocityNet((3, 4, 1), kind="unet", key=getkey())
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        net(0.1, x[0], None)
    with pytest.raises(ValueError, match="flat"):
        net(0.1, x[:2], cond[0])
    with pytest.raises(TypeError, match="AbstractSRVelocityField"):
        FrozenFeatures(gauss(0.0, 1.0))
    with pytest.raises(ValueError, match="tau_range"):
        vsd_loss(x[:2], teacher, teacher, cond[:2], getkey(), tau_range=(0.0, 1.0))
    with pytest.raises(ValueError, match="triple"):
        gan_refine_loss((student, disc), (x, cond), getkey(), teacher=teacher, features=features)
    with pytest.raises(ValueError, match="decay"):
        with_ema(lambda m, b, k: 0.0, 1.5)
