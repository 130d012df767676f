"""Context-dependent slow manifolds of two dynamical systems, simulated by `core.solve_ode`.

Coupled pendulum (16 DoF, context: coupling kappa): small-amplitude motion in the lowest linear
mode of ``K = diag(g / l) + kappa * Lap`` (free ends), whose shape depends on kappa because the
lengths differ. Lorenz96 (context: forcing F): near ``x = F 1`` the leading eigenpair (k = 2 for
N = 8) crosses the imaginary axis at F = 1 (Hopf): spiral decay below, a limit cycle above; the
2-D centre-unstable manifold exists on both sides. Generators return numpy float64.
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..core import solve_ode
from ..core.checks import check_nonnegative, check_positive_int

PENDULUM_DOF = 16
PENDULUM_G = 9.81
PENDULUM_DAMPING = 0.05


def pendulum_lengths(num: int = PENDULUM_DOF) -> np.ndarray:
    """The unequal lengths ``linspace(0.7, 1.3, num)`` that make the lowest mode depend on kappa."""
    return np.linspace(0.7, 1.3, num)


def _laplacian(n: int) -> np.ndarray:
    """Free-end chain Laplacian (theta_0 := theta_1, theta_{n+1} := theta_n); negative semidef."""
    lap = -2.0 * np.eye(n) + np.eye(n, k=1) + np.eye(n, k=-1)
    lap[0, 0] = lap[-1, -1] = -1.0
    return lap


def coupled_pendulum_field(t, x: Float[Array, " dim"], args) -> Float[Array, " dim"]:
    r""":math:`\ddot\theta_i = -(g/l_i)\sin\theta_i + \kappa(\theta_{i+1} - 2\theta_i +
    \theta_{i-1}) - \zeta\dot\theta_i` with free ends, as a first-order field on ``(theta, omega)``.

    Args:
        t: time (unused: autonomous).
        x: state ``(theta, theta_dot)``, shape ``(2n,)``.
        args: ``(kappa, lengths (n,), g, zeta)``.

    No argument is checked: this is an ODE vector field, evaluated at every solver step
    (`jaxgen.core.solve_ode` checks the initial state).
    """
    kappa, lengths, g, zeta = args
    n = x.shape[0] // 2
    theta, omega = x[:n], x[n:]
    left = jnp.concatenate([theta[:1], theta[:-1]])
    right = jnp.concatenate([theta[1:], theta[-1:]])
    acc = -(g / lengths) * jnp.sin(theta) + kappa * (right - 2 * theta + left) - zeta * omega
    return jnp.concatenate([omega, acc])


def lorenz96_field(t, x: Float[Array, " N"], args) -> Float[Array, " N"]:
    r""":math:`\dot x_i = (x_{i+1} - x_{i-2}) x_{i-1} - x_i + F` (cyclic indices); ``args`` = F.

    ``t`` is unused (autonomous). No argument is checked: this is an ODE vector field, evaluated
    at every solver step (`jaxgen.core.solve_ode` checks the initial state).
    """
    F = args
    return (jnp.roll(x, -1) - jnp.roll(x, 2)) * jnp.roll(x, 1) - x + F


def _check_counts(**counts: int) -> None:
    for name, v in counts.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"`{name}` must be an int >= 1, got {v!r}.")


def _simulate(field, x0: Array, ts: Array, args) -> Array:
    """Trajectories ``(B, T, n)`` from ``x0 (B, n)`` saved at ``ts`` (Tsit5, tight tolerances)."""
    # tight tolerances in float64; float32 cannot resolve them, so it gets looser ones
    tight = x0.dtype == jnp.float64
    rtol, atol = (1e-8, 1e-10) if tight else (1e-6, 1e-7)
    # Python numbers in `args` become arrays of the state's dtype: traced, so every context
    # (forcing F, coupling kappa) with the same end time reuses one compiled solver.
    args = jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, x0.dtype) if isinstance(a, int | float) else a, args
    )
    return _simulate_compiled(field, x0, ts, args, float(ts[-1]), rtol, atol)


@eqx.filter_jit
def _simulate_compiled(
    field, x0: Array, ts: Array, args, t1: float, rtol: float, atol: float
) -> Array:
    def one(x):
        return solve_ode(
            field,
            x,
            t0=0.0,
            t1=t1,
            ts=ts,
            args=args,
            rtol=rtol,
            atol=atol,
            dt0=1e-2,
            max_steps=100_000,
            solver=dfx.Tsit5(),
        ).ys

    return jax.vmap(one)(x0)


def pendulum_lowest_mode(kappa: float, lengths: np.ndarray) -> tuple[np.ndarray, float]:
    """Lowest linear mode ``v_1`` (unit max-norm) and its frequency ``omega_1`` (rad/s)."""
    K = np.diag(PENDULUM_G / lengths) - kappa * _laplacian(len(lengths))
    evals, evecs = np.linalg.eigh(K)
    v = evecs[:, 0]
    v = v / v[np.argmax(np.abs(v))]
    return v, float(np.sqrt(evals[0]))


def pendulum_manifold_dataset(
    key: PRNGKeyArray, kappas, *, n_amp: int = 32, n_t: int = 32
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points of each context's 2-D manifold (amplitude x phase) of the 16-DoF pendulum.

    Per kappa: initial states ``(a v_1, 0)`` with ``a ~ U(0.05, 0.8)`` rad (``n_amp`` draws),
    integrated over one linear period ``2 pi / omega_1``, saved at ``n_t`` times.

    Returns:
        ``X (M, 32)`` states, ``C (M, 1)`` contexts ``log10 kappa``, ``coords (M, 2)`` the
        intrinsic coordinates (amplitude, phase in [0, 1)); ``M = len(kappas) n_amp n_t``.
    """
    _check_counts(n_amp=n_amp, n_t=n_t)
    kappas = [float(k) for k in np.atleast_1d(kappas)]
    if not kappas or any(not 0 < k < np.inf for k in kappas):
        raise ValueError(f"`kappas` must be finite and > 0, got {kappas}.")
    lengths = pendulum_lengths()
    Xs, Cs, coords = [], [], []
    for i, kappa in enumerate(kappas):
        v, omega = pendulum_lowest_mode(kappa, lengths)
        amps = np.asarray(jr.uniform(jr.fold_in(key, i), (n_amp,), minval=0.05, maxval=0.8))
        x0 = np.concatenate([amps[:, None] * v[None, :], np.zeros((n_amp, len(v)))], axis=1)
        period = 2 * np.pi / omega
        ts = jnp.linspace(0.0, period, n_t + 1)[1:]
        args = (kappa, jnp.asarray(lengths), PENDULUM_G, PENDULUM_DAMPING)
        traj = np.asarray(_simulate(coupled_pendulum_field, jnp.asarray(x0), ts, args))
        Xs.append(traj.reshape(-1, traj.shape[-1]))
        Cs.append(np.full((n_amp * n_t, 1), np.log10(kappa)))
        phase = np.asarray(ts) / period
        coords.append(np.stack(np.meshgrid(amps, phase, indexing="ij"), -1).reshape(-1, 2))
    return np.concatenate(Xs), np.concatenate(Cs), np.concatenate(coords)


def lorenz96_eigenplane(N: int, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Real and imaginary parts (unit norm) of the Fourier mode ``k`` of the cyclic chain.

    Raises:
        ValueError: unless ``N >= 3`` and ``1 <= k < N / 2`` (at ``k = 0`` or ``k = N / 2`` the
            imaginary part vanishes and the mode spans no plane).
    """
    N = check_positive_int(N, "N", minimum=3)
    k = check_positive_int(k, "k")
    if not 2 * k < N:
        raise ValueError(f"`k` must be an int in [1, N/2) = [1, {N / 2}), got {k}.")
    i = np.arange(N)
    w = 2 * np.pi * k / N
    q_re, q_im = np.cos(w * i), np.sin(w * i)
    return q_re / np.linalg.norm(q_re), q_im / np.linalg.norm(q_im)


def lorenz96_manifold_dataset(
    key: PRNGKeyArray,
    forcings,
    *,
    N: int = 8,
    n_ic: int = 32,
    n_t: int = 60,
    t_burn: float = 15.0,
    t_end: float = 45.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points near the 2-D slow manifold of Lorenz96 for each forcing F.

    Initial states ``F 1 + A (cos t0 q_re + sin t0 q_im) + 0.05 xi`` (``A ~ U(0.05, 1.5)``) in the
    k = 2 eigenplane; transients until ``t_burn`` are discarded, ``n_t`` states in
    ``[t_burn, t_end]`` are kept.

    Returns:
        ``X (M, N)``, ``C (M, 1)`` (F), ``coords (M, 2)``: the state's coordinates in the
        eigenplane (the intrinsic 2-D coordinates of the slow manifold).
    """
    _check_counts(N=N, n_ic=n_ic, n_t=n_t)
    if N < 4:
        raise ValueError(f"`N` must be >= 4 for the k = 2 Hopf mode, got {N}.")
    forcings = [float(F) for F in np.atleast_1d(forcings)]
    if not forcings or not all(np.isfinite(forcings)):
        raise ValueError(f"`forcings` must be finite numbers (at least one), got {forcings}.")
    t_burn = float(check_nonnegative(t_burn, "t_burn"))  # a number: raises now (NaN included)
    if not (np.isfinite(t_end) and t_end > t_burn):
        raise ValueError(f"`t_end` must be finite and > `t_burn` = {t_burn}, got {t_end!r}.")
    q_re, q_im = lorenz96_eigenplane(N)
    ts = jnp.linspace(t_burn, t_end, n_t)
    Xs, Cs, coords = [], [], []
    for i, F in enumerate(forcings):
        ka, kt, kx = jr.split(jr.fold_in(key, i), 3)
        A = np.asarray(jr.uniform(ka, (n_ic,), minval=0.05, maxval=1.5))
        t0 = np.asarray(jr.uniform(kt, (n_ic,), maxval=2 * np.pi))
        xi = np.asarray(jr.normal(kx, (n_ic, N)))
        x0 = F + A[:, None] * (np.cos(t0)[:, None] * q_re + np.sin(t0)[:, None] * q_im) + 0.05 * xi
        traj = np.asarray(_simulate(lorenz96_field, jnp.asarray(x0), ts, F))
        X = traj.reshape(-1, N)
        Xs.append(X)
        Cs.append(np.full((X.shape[0], 1), F))
        coords.append(np.stack([(X - F) @ q_re, (X - F) @ q_im], axis=1))
    return np.concatenate(Xs), np.concatenate(Cs), np.concatenate(coords)
