"""Posterior sampling: NUTS, delayed-acceptance HMC, box constraints by a logistic bijection."""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxgen.core.checks import (
    check_choice,
    check_finite,
    check_floating,
    check_in_interval,
    check_key,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_rank,
    check_shape,
)


def box_transform(
    u: Float[Array, " p"], lo: Float[ArrayLike, "..."], hi: Float[ArrayLike, "..."]
) -> tuple[Float[Array, " p"], Float[Array, ""]]:
    r"""Map unconstrained u to the box: x = lo + (hi - lo) sigmoid(u); returns (x, log|dx/du|).

    log|dx/du| = sum log(hi - lo) + log sigmoid(u) + log sigmoid(-u). A uniform prior on the
    box is a density exp(log|dx/du|) in u.

    ``lo`` and ``hi`` must be finite with ``lo < hi`` (value checks, free when they are
    constants closed over by a log density); ``u`` is not checked (a NaN propagates).
    """
    u = jnp.asarray(u)
    lo, width = _check_box(lo, hi, u)
    x = lo + width * jax.nn.sigmoid(u)
    return x, jnp.sum(jnp.log(width) + jax.nn.log_sigmoid(u) + jax.nn.log_sigmoid(-u))


def box_inverse(
    x: Float[Array, " p"], lo: Float[ArrayLike, " p"], hi: Float[ArrayLike, " p"]
) -> Float[Array, " p"]:
    """Inverse of `box_transform`: u = logit((x - lo) / (hi - lo)).

    ``lo < hi`` (finite) and ``x`` strictly inside ``(lo, hi)`` (value checks).
    """
    x = check_floating(x, "x", allow_int=True)
    lo, width = _check_box(lo, hi, x, name="x")
    p = (x - lo) / width
    p = check_in_interval(p, "(x - lo) / (hi - lo)", 0.0, 1.0, closed=(False, False))
    return jnp.log(p) - jnp.log1p(-p)


def _check_box(lo: ArrayLike, hi: ArrayLike, u: Array, name: str = "u") -> tuple[Array, Array]:
    lo, hi = jnp.asarray(lo, dtype=u.dtype), jnp.asarray(hi, dtype=u.dtype)
    if lo.shape != u.shape or hi.shape != u.shape:
        raise ValueError(
            f"`lo` and `hi` must have the shape of `{name}` {u.shape}, "
            f"got {lo.shape} and {hi.shape}."
        )
    # ``(lo, hi - lo)``, both checked (``hi`` finite and above ``lo``).
    return check_finite(lo, "lo"), check_positive(hi - lo, "hi - lo")


class NutsResult(NamedTuple):
    """What `run_nuts` returns.

    Attributes:
        samples: draws, shape ``(chains, num_samples, p)``.
        acceptance: mean acceptance rate per chain, shape ``(chains,)``.
        num_grads: mean number of gradient evaluations per draw (leapfrog steps), a scalar.
        rhat: split-free potential scale reduction per coordinate, shape ``(p,)``.
        ess: effective sample size per coordinate (all chains), shape ``(p,)``.
    """

    samples: Array
    acceptance: Array
    num_grads: Array
    rhat: Array
    ess: Array


def run_nuts(
    key: PRNGKeyArray,
    logdensity_fn: Callable[[Float[Array, " p"]], Float[Array, ""]],
    init: Float[Array, " p"],
    *,
    num_warmup: int = 500,
    num_samples: int = 1000,
    num_chains: int = 2,
    init_jitter: float = 0.1,
) -> NutsResult:
    """NUTS (blackjax) with window adaptation, ``num_chains`` chains vmapped.

    Each chain starts from ``init`` plus N(0, init_jitter²) noise, adapts step size and a
    diagonal mass matrix for ``num_warmup`` steps (Stan's windows), then draws
    ``num_samples``. Work in unconstrained coordinates (see `box_transform`). ``num_chains``
    must be >= 2 (the potential scale reduction compares chains).

    References:
        Hoffman and Gelman (2014), The No-U-Turn sampler, JMLR 15; Cabezas et al., BlackJAX
        (2024), arXiv 2402.10797.
    """
    import blackjax

    key = check_key(key)
    init = jnp.asarray(init)
    if init.ndim != 1 or init.shape[0] == 0:
        raise ValueError(
            f"`init` must be a flat parameter vector (p,) with p >= 1, got shape {init.shape}."
        )
    for name, v in (("num_warmup", num_warmup), ("num_samples", num_samples)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"`{name}` must be an int >= 1, got {v!r}.")
    # The potential scale reduction compares chains: one chain has none.
    num_chains = check_positive_int(num_chains, "num_chains", minimum=2)
    init_jitter = check_nonnegative(init_jitter, "init_jitter")

    def one_chain(k: PRNGKeyArray) -> tuple[Array, Array, Array]:
        kj, kw, ks = jr.split(k, 3)
        start = init + init_jitter * jr.normal(kj, init.shape, dtype=init.dtype)
        adapt = blackjax.window_adaptation(blackjax.nuts, logdensity_fn)
        (state, params), _ = adapt.run(kw, start, num_steps=num_warmup)
        step = blackjax.nuts(logdensity_fn, **params).step

        def body(s: object, kk: PRNGKeyArray) -> tuple[object, tuple[Array, Array, Array]]:
            s, info = step(kk, s)
            return s, (s.position, info.acceptance_rate, info.num_integration_steps)

        _, (pos, acc, nsteps) = jax.lax.scan(body, state, jr.split(ks, num_samples))
        return pos, jnp.mean(acc), jnp.mean(nsteps.astype(init.dtype))

    samples, acc, nsteps = jax.jit(jax.vmap(one_chain))(jr.split(key, num_chains))
    rhat = blackjax.diagnostics.potential_scale_reduction(samples)
    ess = blackjax.diagnostics.effective_sample_size(samples)
    return NutsResult(samples, acc, jnp.mean(nsteps), rhat, ess)


class DelayedAcceptanceResult(NamedTuple):
    """What `delayed_acceptance_hmc` returns (one chain).

    Attributes:
        samples: the chain after each exact-stage decision, shape ``(num_samples, p)``.
        exact_log_density: the correcting log density at ``samples``, shape ``(num_samples,)``.
        log_weight: ``exact - surrogate`` log density at ``samples`` (the log importance weight
            of the surrogate; only its variation matters), shape ``(num_samples,)``.
        acceptance: fraction of surrogate proposals the exact stage accepted, a scalar.
        surrogate_acceptance: mean Metropolis acceptance probability of the surrogate HMC
            steps, a scalar.
    """

    samples: Array
    exact_log_density: Array
    log_weight: Array
    acceptance: Array
    surrogate_acceptance: Array


def _delayed_acceptance_log_ratio(
    exact_new: Float[ArrayLike, ""],
    surrogate_new: Float[ArrayLike, ""],
    exact_old: Float[ArrayLike, ""],
    surrogate_old: Float[ArrayLike, ""],
) -> Float[Array, ""]:
    """Log of the second-stage Metropolis-Hastings ratio [pi(y)/pi~(y)] / [pi(x)/pi~(x)].

    A NaN (a density undefined at y) is -inf: the proposal is rejected.
    """
    log_r = (exact_new - surrogate_new) - (exact_old - surrogate_old)
    return jnp.where(jnp.isnan(log_r), -jnp.inf, log_r)


def delayed_acceptance_hmc(
    key: PRNGKeyArray,
    surrogate_logdensity_fn: Callable[[Float[Array, " p"]], Float[Array, ""]],
    exact_logdensity_fn: Callable[[Float[Array, " p"]], Float[Array, ""]],
    init: ArrayLike,
    *,
    num_samples: int,
    step_size: Float[ArrayLike, ""],
    inverse_mass_matrix: Float[ArrayLike, " p"],
    num_integration_steps: int = 5,
    num_surrogate_steps: int = 4,
    step_jitter: float = 0.2,
) -> DelayedAcceptanceResult:
    r"""Delayed-acceptance MCMC: a cheap surrogate screens proposals, the exact density decides.

    Targets the exact posterior pi(u) ∝ exp l(u) while spending the gradients on a surrogate
    pi~(u) ∝ exp l~(u) (e.g. the Neural Galerkin flow's path log-likelihood, whose small
    per-transition error adds up over many observations and biases a surrogate-only chain).
    One iteration from the state x:

    1. Stage 1 (surrogate): y ~ K~^m(x, .), m = ``num_surrogate_steps`` HMC transitions
       targeting pi~ (``num_integration_steps`` leapfrog steps of size
       ``step_size * U[1 - step_jitter, 1 + step_jitter]`` drawn independently of the state,
       momentum N(0, M) with M^{-1} = diag(``inverse_mass_matrix``), Metropolis accept on
       pi~). Each HMC transition is reversible with respect to pi~, so is their mixture over
       the step size and the m-fold product K~^m:
       pi~(x) K~^m(x, y) = pi~(y) K~^m(y, x).
    2. Stage 2 (exact): accept y with probability

           alpha(x, y) = min{1, [pi(y) K~^m(y, x)] / [pi(x) K~^m(x, y)]}
                       = min{1, exp([l(y) - l~(y)] - [l(x) - l~(x)])},

       the second line by the reversibility of stage 1; else stay at x.

    Then pi(x) K~^m(x, y) alpha(x, y) = min{pi(x) K~^m(x, y), pi(y) K~^m(y, x)} is symmetric
    in (x, y): the chain satisfies detailed balance with respect to the exact pi, whatever
    the surrogate's error (Christen and Fox 2005, with a whole surrogate-reversible kernel as
    the first stage: Liu's surrogate transition method). The surrogate's error only costs
    efficiency: alpha depends on the variation of the log weight w = l - l~ between x and y,
    so a constant offset (the flow's error summed over the observations at fixed parameters)
    is free, and alpha -> 1 as w flattens. Cost per iteration: m x ``num_integration_steps``
    surrogate gradients and one exact evaluation, of the value only (no exact gradient); l(x)
    and l~(x) are carried in the state, never recomputed.

    Where no exact likelihood exists (the Heston coupling), ``exact_logdensity_fn`` is the most
    accurate deterministic likelihood at hand, e.g. a finer Neural Galerkin solve (more steps
    and collocation points) or a sub-stepped Euler/Milstein transition with fixed quadrature;
    the chain then targets that likelihood's posterior exactly, so the guarantee holds relative
    to it and its own error is not corrected. (An unbiased random estimate, such as a
    simulated bridge likelihood, would need the pseudo-marginal form, not implemented.)

    Args:
        key: PRNG key.
        surrogate_logdensity_fn: u -> l~(u), differentiable, the screening density (any
            additive constant).
        exact_logdensity_fn: u -> l(u), the target (any additive constant); evaluated once
            per iteration, never differentiated.
        init: starting point, shape ``(p,)``; l(init) and l~(init) must be finite.
        num_samples: iterations (= draws returned).
        step_size: leapfrog step size > 0 (e.g. adapted on the surrogate, see
            `run_delayed_acceptance`).
        inverse_mass_matrix: diagonal of M^{-1} > 0, shape ``(p,)`` (the surrogate posterior's
            variances).
        num_integration_steps: leapfrog steps per HMC transition.
        num_surrogate_steps: HMC transitions (m) per exact decision: more makes y less
            correlated with x, at m x the surrogate cost.
        step_jitter: relative half-width of the uniform step-size jitter, in [0, 1).

    Returns:
        A `DelayedAcceptanceResult` (samples shape ``(num_samples, p)``).

    References:
        J. A. Christen and C. Fox (2005), Markov chain Monte Carlo using an approximation,
        J. Comput. Graph. Stat. 14(4), 795-810; J. S. Liu (2001), Monte Carlo Strategies in
        Scientific Computing, Springer, section 9.4.3 (surrogate transition method);
        R. M. Neal (2011), MCMC using Hamiltonian dynamics, Handbook of MCMC.
    """
    key = check_key(key)
    init = check_rank(check_floating(init, "init"), 1, "init", layout="(p,)")
    if init.shape[0] == 0:
        raise ValueError(f"`init` must have shape (p,) with p >= 1, got {init.shape}.")
    num_samples = check_positive_int(num_samples, "num_samples")
    num_integration_steps = check_positive_int(num_integration_steps, "num_integration_steps")
    num_surrogate_steps = check_positive_int(num_surrogate_steps, "num_surrogate_steps")
    if not isinstance(step_jitter, int | float) or not 0.0 <= step_jitter < 1.0:
        raise ValueError(f"`step_jitter` must be a float in [0, 1), got {step_jitter!r}.")
    if not callable(surrogate_logdensity_fn) or not callable(exact_logdensity_fn):
        raise TypeError(
            "`surrogate_logdensity_fn` and `exact_logdensity_fn` must be callables u -> "
            f"scalar, got {type(surrogate_logdensity_fn).__name__} and "
            f"{type(exact_logdensity_fn).__name__}."
        )
    dtype = init.dtype
    step_size = check_positive(jnp.asarray(step_size, dtype=dtype), "step_size")
    if step_size.ndim != 0:
        raise ValueError(f"`step_size` must be a scalar, got shape {step_size.shape}.")
    inv_mass = check_positive(
        check_shape(
            jnp.asarray(inverse_mass_matrix, dtype=dtype), init.shape, "inverse_mass_matrix"
        ),
        "inverse_mass_matrix",
    )
    sur_vg = jax.value_and_grad(surrogate_logdensity_fn)

    def hmc_step(carry: tuple, k: PRNGKeyArray) -> tuple[tuple, Array]:
        x, lx, gx = carry
        kp, ke, ku = jr.split(k, 3)
        eps = step_size * jr.uniform(
            ke, (), dtype=dtype, minval=1.0 - step_jitter, maxval=1.0 + step_jitter
        )
        p0 = jr.normal(kp, x.shape, dtype=dtype) / jnp.sqrt(inv_mass)

        def leapfrog(c: tuple, _: None) -> tuple[tuple, None]:
            q, p, _, g = c
            p = p + 0.5 * eps * g
            q = q + eps * inv_mass * p
            lq, g = sur_vg(q)
            return (q, p + 0.5 * eps * g, lq, g), None

        (y, p1, ly, gy), _ = jax.lax.scan(
            leapfrog, (x, p0, lx, gx), None, length=num_integration_steps
        )
        log_r = (ly - 0.5 * p1 @ (inv_mass * p1)) - (lx - 0.5 * p0 @ (inv_mass * p0))
        log_r = jnp.where(jnp.isnan(log_r), -jnp.inf, log_r)
        ok = jnp.log(jr.uniform(ku, (), dtype=dtype)) < log_r
        acc = jnp.exp(jnp.minimum(log_r, 0.0))
        return jax.tree.map(lambda a, b: jnp.where(ok, a, b), (y, ly, gy), (x, lx, gx)), acc

    def iteration(state: tuple, k: PRNGKeyArray) -> tuple[tuple, tuple]:
        x, lx, gx, ex = state
        ks, ku = jr.split(k)
        (y, ly, gy), acc = jax.lax.scan(hmc_step, (x, lx, gx), jr.split(ks, num_surrogate_steps))
        ey = exact_logdensity_fn(y)
        log_a = _delayed_acceptance_log_ratio(ey, ly, ex, lx)
        ok = jnp.log(jr.uniform(ku, (), dtype=dtype)) < log_a
        new = jax.tree.map(lambda a, b: jnp.where(ok, a, b), (y, ly, gy, ey), state)
        return new, (new[0], new[3], new[3] - new[1], ok, jnp.mean(acc))

    l0, g0 = sur_vg(init)
    e0 = exact_logdensity_fn(init)
    # Both log densities at the start, as one array so that one check names them.
    start = check_finite(jnp.stack([l0, e0]), "logdensity_fn(init)")
    l0, e0 = start[0], start[1]
    _, (xs, es, ws, oks, accs) = jax.lax.scan(
        iteration, (init, l0, g0, e0), jr.split(key, num_samples)
    )
    return DelayedAcceptanceResult(xs, es, ws, jnp.mean(oks.astype(dtype)), jnp.mean(accs))


class _LogWeightModel(NamedTuple):
    """w^(u) = c_0 + c^T z + z^T H z / 2 with z = (u - center) / scale."""

    linear: Array  # (1 + p,)
    hessian: Array  # (p, p)
    center: Array  # (p,)
    scale: Array  # (p,)

    def __call__(self, u: Float[Array, " p"]) -> Float[Array, ""]:
        z = (u - self.center) / self.scale
        return self.linear[0] + z @ self.linear[1:] + 0.5 * z @ self.hessian @ z


def _fit_log_weight(
    points: Float[Array, "k p"], log_weight: Float[Array, " k"], degree: int
) -> _LogWeightModel:
    """Least-squares polynomial fit of the log weight w = l - l~ at ``points``.

    In z = (u - mean) / sd of the points the surrogate's log posterior has Hessian ~ -I; the
    fitted Hessian H (degree 2) is clipped to eigenvalues <= 1/2 so that the screen
    l~ + w^ stays at least half as concave as l~ (a convex fit from points in the bulk would
    make it improper in the tails), then the constant and linear terms are refitted given H.
    Rows with a non-finite weight get zero weight.
    """
    p = points.shape[1]
    center = jnp.mean(points, axis=0)
    scale = jnp.std(points, axis=0) + 1e-12 * (1.0 + jnp.abs(center))
    z = (points - center[None]) / scale[None]
    ok = jnp.isfinite(log_weight)
    w = jnp.where(ok, log_weight, 0.0)
    lin = jnp.concatenate([jnp.ones_like(z[:, :1]), z], axis=1)
    hess = jnp.zeros((p, p), dtype=z.dtype)
    if degree == 2:
        iu, ju = jnp.triu_indices(p)
        x = jnp.concatenate([lin, z[:, iu] * z[:, ju]], axis=1)
        c = jnp.linalg.lstsq(jnp.where(ok[:, None], x, 0.0), w)[0][1 + p :]
        # sum_{i<=j} c_ij z_i z_j = z^T H z / 2 with H_ii = 2 c_ii, H_ij = H_ji = c_ij.
        upper = jnp.zeros((p, p), dtype=z.dtype).at[iu, ju].set(c)
        hess = upper + upper.T
        evals, evecs = jnp.linalg.eigh(hess)
        hess = (evecs * jnp.minimum(evals, 0.5)[None]) @ evecs.T
        w = w - jnp.where(ok, 0.5 * jnp.einsum("ki,ij,kj->k", z, hess, z), 0.0)
    coef = jnp.linalg.lstsq(jnp.where(ok[:, None], lin, 0.0), w)[0]
    return _LogWeightModel(coef, hess, center, scale)


class DelayedAcceptanceRun(NamedTuple):
    """What `run_delayed_acceptance` returns.

    Attributes:
        samples: draws, shape ``(chains, num_samples, p)``.
        log_weight: exact minus surrogate log density at the draws, ``(chains, num_samples)``.
        acceptance: exact-stage acceptance rate per chain, shape ``(chains,)``.
        surrogate_acceptance: mean surrogate HMC acceptance per chain, shape ``(chains,)``.
        step_size: adapted step size per chain, shape ``(chains,)``.
        inverse_mass_matrix: adapted diagonal M^{-1} per chain, shape ``(chains, p)``.
        error_fit_rmse: root-mean-square residual of the fitted error model at its fitting
            points per chain, nats, shape ``(chains,)`` (0 where no error model is fitted).
        rhat: potential scale reduction per coordinate, shape ``(p,)``.
        ess: effective sample size per coordinate (all chains), shape ``(p,)``.
    """

    samples: Array
    log_weight: Array
    acceptance: Array
    surrogate_acceptance: Array
    step_size: Array
    inverse_mass_matrix: Array
    error_fit_rmse: Array
    rhat: Array
    ess: Array


def run_delayed_acceptance(
    key: PRNGKeyArray,
    surrogate_logdensity_fn: Callable[[Float[Array, " p"]], Float[Array, ""]],
    exact_logdensity_fn: Callable[[Float[Array, " p"]], Float[Array, ""]],
    init: ArrayLike,
    *,
    num_warmup: int = 500,
    num_samples: int = 1000,
    num_chains: int = 2,
    num_integration_steps: int = 5,
    num_surrogate_steps: int = 2,
    error_model_degree: int = 2,
    num_error_fit: int = 32,
    init_jitter: float = 0.1,
) -> DelayedAcceptanceRun:
    r"""Delayed-acceptance HMC on ``num_chains`` vmapped chains, tuned on the surrogate.

    Per chain:

    1. Warm-up on the surrogate alone: from ``init`` plus N(0, init_jitter²) noise, blackjax's
       window adaptation of HMC (``num_integration_steps`` leapfrog steps; step size and
       diagonal mass matrix, Stan's windows) for ``num_warmup`` steps. No exact evaluation.
    2. Error model (``error_model_degree`` 1 or 2; 0 skips it): the exact log density is
       evaluated at ``num_error_fit`` points spread over the second half of the warm-up
       trajectory and the log weight w = l - l~ is fitted there by least squares with a
       polynomial w^(u) of that degree in the standardised u (a quadratic's Hessian clipped
       so that the screen stays concave where the surrogate is). The screening density of
       stage 1 is then l~ + w^. The surrogate's error that biases its posterior is the
       variation of w over the posterior, which is smooth in u and mostly linear (a shifted
       mean) and quadratic (a wrong width); removing it makes the screen accept what the exact
       stage would accept, so that the exact stage rejects little. Without it, a surrogate
       whose posterior is off by s sd gives the exact stage a log ratio that varies by ~s
       between distant points, and the chain sticks where the surrogate under-weights the
       exact posterior. The fit is frozen before sampling, so it only changes the proposal:
       this is the approximation-error model of adaptive delayed acceptance (Cui, Fox and
       O'Sullivan 2011).
    3. `delayed_acceptance_hmc` from the adapted state for ``num_samples`` iterations with
       the screen l~ + w^ and the exact ``exact_logdensity_fn``: the draws target the exact
       density whatever the surrogate's or the fit's error (see `delayed_acceptance_hmc`).

    Exact evaluations per chain: ``num_error_fit + num_samples`` (values, no gradient);
    surrogate gradients: ``num_integration_steps`` x (``num_warmup`` + ``num_samples`` x
    ``num_surrogate_steps``).

    Args:
        key: PRNG key.
        surrogate_logdensity_fn: u -> l~(u), differentiable (e.g. the flow's log posterior).
        exact_logdensity_fn: u -> l(u), the target, never differentiated.
        init: starting point, shape ``(p,)``.
        num_warmup: surrogate warm-up steps (>= 2 ``num_error_fit`` with an error model).
        num_samples: delayed-acceptance iterations per chain.
        num_chains: chains, vmapped (>= 2: the potential scale reduction compares chains).
        num_integration_steps: leapfrog steps per HMC transition.
        num_surrogate_steps: HMC transitions per exact decision.
        error_model_degree: 0 (none), 1 (linear) or 2 (quadratic) polynomial error model.
        num_error_fit: exact evaluations for the error model, at least its number of
            coefficients (1 + p, or 1 + p + p(p + 1)/2).
        init_jitter: sd of the starting-point noise.

    Returns:
        A `DelayedAcceptanceRun` (samples shape ``(chains, num_samples, p)``).

    References:
        J. A. Christen and C. Fox (2005), Markov chain Monte Carlo using an approximation,
        J. Comput. Graph. Stat. 14(4), 795-810; T. Cui, C. Fox and M. J. O'Sullivan (2011),
        Bayesian calibration of a large-scale geothermal reservoir model by a new adaptive
        delayed acceptance Metropolis Hastings algorithm, Water Resour. Res. 47, W10521;
        Cabezas et al., BlackJAX (2024), arXiv 2402.10797.
    """
    import blackjax

    key = check_key(key)
    init = check_rank(check_floating(init, "init"), 1, "init", layout="(p,)")
    if init.shape[0] == 0:
        raise ValueError(f"`init` must have shape (p,) with p >= 1, got {init.shape}.")
    init_jitter = check_nonnegative(init_jitter, "init_jitter")
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_chains = check_positive_int(num_chains, "num_chains", minimum=2)
    num_integration_steps = check_positive_int(num_integration_steps, "num_integration_steps")
    degree = check_choice(error_model_degree, (0, 1, 2), "error_model_degree")
    p = init.shape[0]
    num_coef = 1 + p + (p * (p + 1) // 2 if degree == 2 else 0)
    if degree:
        num_error_fit = check_positive_int(num_error_fit, "num_error_fit", minimum=num_coef)
        if num_warmup < 2 * num_error_fit:
            raise ValueError(
                f"`num_warmup` must be >= 2 * num_error_fit = {2 * num_error_fit} (the error "
                f"model's points come from the second half of the warm-up), got {num_warmup}."
            )

    def one_chain(k: PRNGKeyArray) -> tuple[DelayedAcceptanceResult, Array, Array, Array]:
        kj, kw, ks = jr.split(k, 3)
        start = init + init_jitter * jr.normal(kj, init.shape, dtype=init.dtype)
        adapt = blackjax.window_adaptation(
            blackjax.hmc, surrogate_logdensity_fn, num_integration_steps=num_integration_steps
        )
        (state, params), info = adapt.run(kw, start, num_steps=num_warmup)
        screen, rmse = surrogate_logdensity_fn, jnp.zeros((), dtype=init.dtype)
        if degree:
            tail = info.state.position[num_warmup - num_warmup // 2 :]
            pts = tail[jnp.linspace(0, tail.shape[0] - 1, num_error_fit).astype(jnp.int32)]
            w = jax.vmap(exact_logdensity_fn)(pts) - jax.vmap(surrogate_logdensity_fn)(pts)
            model = _fit_log_weight(pts, w, degree)

            def screen(u: Array) -> Array:
                return surrogate_logdensity_fn(u) + model(u)

            rmse = jnp.sqrt(jnp.nanmean((jax.vmap(model)(pts) - w) ** 2))
        res = delayed_acceptance_hmc(
            ks,
            screen,
            exact_logdensity_fn,
            state.position,
            num_samples=num_samples,
            step_size=params["step_size"],
            inverse_mass_matrix=params["inverse_mass_matrix"],
            num_integration_steps=num_integration_steps,
            num_surrogate_steps=num_surrogate_steps,
        )
        return res, params["step_size"], params["inverse_mass_matrix"], rmse

    res, eps, imm, rmse = jax.jit(jax.vmap(one_chain))(jr.split(key, num_chains))
    rhat = jnp.atleast_1d(blackjax.diagnostics.potential_scale_reduction(res.samples))
    ess = jnp.atleast_1d(blackjax.diagnostics.effective_sample_size(res.samples))
    return DelayedAcceptanceRun(
        res.samples,
        res.log_weight,
        res.acceptance,
        res.surrogate_acceptance,
        eps,
        imm,
        rmse,
        rhat,
        ess,
    )
