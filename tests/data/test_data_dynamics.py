"""NcAE simulators: linear modes, energy, Hopf behaviour, scipy DOP853."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.integrate

from jaxgen.core import solve_ode
from jaxgen.data import (
    coupled_pendulum_field,
    lorenz96_field,
    lorenz96_manifold_dataset,
    pendulum_lengths,
    pendulum_lowest_mode,
    pendulum_manifold_dataset,
)

LENGTHS = pendulum_lengths()
T_END = 10 * 2 * np.pi / pendulum_lowest_mode(1.0, LENGTHS)[1]  # ten periods at kappa = 1


def _pendulum(x0, ts, kappa, zeta=0.0):
    args = (kappa, jnp.asarray(LENGTHS), 9.81, zeta)
    return solve_ode(
        coupled_pendulum_field,
        jnp.asarray(x0),
        t1=T_END,
        ts=ts,
        args=args,
        rtol=1e-10,
        atol=1e-12,
        max_steps=100_000,
    ).ys


def test_pendulum_linear_mode_and_energy():
    kappa = 1.0
    v, omega = pendulum_lowest_mode(kappa, LENGTHS)
    a = 1e-4
    x0 = np.concatenate([a * v, np.zeros(16)])
    ts = jnp.linspace(0.1, T_END, 50)
    traj = jax.jit(lambda x: _pendulum(x, ts, kappa))(x0)
    expected = a * v[None, :] * np.cos(omega * np.asarray(ts))[:, None]
    assert np.max(np.abs(np.asarray(traj[:, :16]) - expected)) <= 1e-3 * a

    def energy(x):
        th, om = x[:16], x[16:]
        return (
            0.5 * jnp.sum(om**2)
            + jnp.sum(9.81 / LENGTHS * (1 - jnp.cos(th)))
            + 0.5 * kappa * jnp.sum(jnp.diff(th) ** 2)
        )

    big = np.concatenate([0.6 * v, np.zeros(16)])
    traj = _pendulum(big, ts, kappa)
    e0 = energy(jnp.asarray(big))
    assert float(jnp.max(jnp.abs(jax.vmap(energy)(traj) - e0)) / e0) <= 1e-8


def test_lorenz96_spectrum_hopf_and_scipy():
    N = 8
    for F in (0.9, 1.1):
        J = jax.jacfwd(lambda x, F=F: lorenz96_field(0.0, x, F))(jnp.full(N, F))
        w = 2 * np.pi * np.arange(N) / N
        lam = -1 + F * (np.exp(1j * w) - np.exp(-2j * w))
        ev = np.linalg.eigvals(np.asarray(J))
        assert np.max(np.min(np.abs(ev[:, None] - lam[None, :]), axis=1)) <= 1e-10
    x0 = jnp.full(N, 0.9) + 0.3 * jnp.sin(jnp.arange(N))
    end = solve_ode(
        lorenz96_field, x0, t1=200.0, args=0.9, rtol=1e-8, atol=1e-10, max_steps=100_000
    ).ys[-1]
    assert float(jnp.max(jnp.abs(end - 0.9))) <= 1e-3
    ts = jnp.linspace(150.0, 200.0, 400)
    x0 = jnp.full(N, 1.1) + 0.3 * jnp.sin(jnp.arange(N))
    late = solve_ode(
        lorenz96_field, x0, t1=200.0, ts=ts, args=1.1, rtol=1e-8, atol=1e-10, max_steps=100_000
    ).ys
    amp = float(jnp.max(jnp.abs(late - 1.1)))
    assert 0.44 <= amp <= 0.54
    ours = solve_ode(
        lorenz96_field, x0, t1=10.0, args=1.1, rtol=1e-10, atol=1e-12, max_steps=100_000
    ).ys[-1]
    ref = scipy.integrate.solve_ivp(
        lambda t, x: np.asarray(lorenz96_field(t, jnp.asarray(x), 1.1)),
        (0, 10),
        np.asarray(x0),
        method="DOP853",
        rtol=1e-10,
        atol=1e-12,
    ).y[:, -1]
    assert np.max(np.abs(np.asarray(ours) - ref)) <= 1e-6


def test_manifold_datasets_shapes_and_errors():
    X, C, coords = pendulum_manifold_dataset(jr.key(0), [0.5, 2.0], n_amp=3, n_t=4)
    assert X.shape == (24, 32) and C.shape == (24, 1) and coords.shape == (24, 2)
    np.testing.assert_allclose(np.unique(C), np.log10([0.5, 2.0]))
    X, C, coords = lorenz96_manifold_dataset(jr.key(1), [0.9, 1.1], N=8, n_ic=2, n_t=5)
    assert X.shape == (20, 8) and C.shape == (20, 1) and coords.shape == (20, 2)
    with pytest.raises(ValueError, match="kappas"):
        pendulum_manifold_dataset(jr.key(0), [0.0], n_amp=2, n_t=2)
    with pytest.raises(ValueError, match="n_amp"):
        pendulum_manifold_dataset(jr.key(0), [1.0], n_amp=0, n_t=2)
    with pytest.raises(ValueError, match="`N`"):
        lorenz96_manifold_dataset(jr.key(0), [1.0], N=0, n_ic=2, n_t=2)
    # A NaN start time, a window ending before it and a NaN forcing raise before integrating
    # (each gave a NaN or an empty-looking dataset).
    with pytest.raises(ValueError, match="`t_burn` must be finite and >= 0"):
        lorenz96_manifold_dataset(jr.key(0), [1.0], n_ic=2, n_t=2, t_burn=float("nan"))
    with pytest.raises(ValueError, match="`t_end` must be finite and > `t_burn`"):
        lorenz96_manifold_dataset(jr.key(0), [1.0], n_ic=2, n_t=2, t_burn=2.0, t_end=1.0)
    with pytest.raises(ValueError, match="`forcings` must be finite"):
        lorenz96_manifold_dataset(jr.key(0), [float("nan")], n_ic=2, n_t=2)
    with pytest.raises(ValueError, match="`kappas` must be finite and > 0"):
        pendulum_manifold_dataset(jr.key(0), [float("inf")], n_amp=2, n_t=2)
