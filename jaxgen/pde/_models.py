"""Diffusion models (OU, CIR, Heston): coefficients, exact transitions, path simulation."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxgen.core import gaussian_logpdf_chol, solve_sde
from jaxgen.core.checks import check_module, check_nonnegative

from ._ncx2 import _log_ncx2_pdf


class AbstractDiffusionModel(eqx.Module):
    """A time-homogeneous Itô diffusion dX = b(X; lam) dt + sigma(X; lam) dW on one state.

    Subclasses give the drift ``b``, the diffusion matrix ``a = sigma sigma^T`` and a noise
    matrix ``sigma``; ``positive[i]`` says that coordinate i lives on (0, inf) (its diffusion
    vanishes at 0, an inaccessible boundary under the Feller condition). ``lam`` is a flat
    parameter vector whose entries are named by ``param_names``.
    """

    dim: eqx.AbstractVar[int]
    param_names: eqx.AbstractVar[tuple[str, ...]]
    positive: eqx.AbstractVar[tuple[bool, ...]]

    @abc.abstractmethod
    def drift(self, x: Float[Array, " dim"], lam: Float[Array, " p"]) -> Float[Array, " dim"]:
        """b(x; lam), shape ``(dim,)``."""

    @abc.abstractmethod
    def diffusion(
        self, x: Float[Array, " dim"], lam: Float[Array, " p"]
    ) -> Float[Array, "dim dim"]:
        """a(x; lam) = sigma sigma^T, shape ``(dim, dim)``."""

    @abc.abstractmethod
    def noise(self, x: Float[Array, " dim"], lam: Float[Array, " p"]) -> Float[Array, "dim dim"]:
        """A square root sigma(x; lam) of a (lower triangular), shape ``(dim, dim)``."""

    @abc.abstractmethod
    def check_params(self, lam: Float[Array, " p"]) -> Float[Array, " p"]:
        """Return ``lam`` after value checks (``eqx.error_if``) on the parameter domain."""

    def log_transition(
        self,
        t: Float[Array, ""],
        x: Float[Array, " dim"],
        x0: Float[Array, " dim"],
        lam: Float[Array, " p"],
    ) -> Float[Array, ""]:
        """Optional closed form of ``log p_lam(t, x | x0)`` on checked arguments.

        Override it in a model with a known transition density; `exact_log_transition` checks
        the arguments and calls it. The default raises ``TypeError`` (no closed form).
        """
        del t, x, x0, lam
        raise TypeError(
            f"`model`: no closed-form transition density for {type(self).__name__} (override "
            "`log_transition`); use a learned TransitionFlow or Monte Carlo."
        )

    @property
    def shift_invariant(self) -> tuple[bool, ...]:
        """``shift_invariant[i]``: b and a do not depend on x_i (the law of X_t - x0 is
        invariant to shifts of x0 in coordinate i). Default: none.
        """
        return (False,) * self.dim

    def check_state(
        self, x: Float[Array, "*batch dim"], name: str = "x"
    ) -> Float[Array, "*batch dim"]:
        """Return ``x`` after checking that its positive coordinates are > 0 (``eqx.error_if``)."""
        x = jnp.asarray(x)
        if x.ndim < 1 or x.shape[-1] != self.dim:
            raise ValueError(
                f"`{name}` must have a trailing state axis of size {self.dim}, got shape {x.shape}."
            )
        if any(self.positive):
            mask = jnp.broadcast_to(jnp.asarray(self.positive), x.shape)  # batch axes too
            x = eqx.error_if(
                x,
                jnp.any(mask & ~(x > 0)),
                f"`{name}` must be > 0 in the coordinates {self.positive} "
                "(outside the state space, e.g. a negative rate).",
            )
        return x

    def _check_lam_shape(self, lam: ArrayLike) -> Array:
        lam = jnp.asarray(lam)
        if lam.shape != (len(self.param_names),):
            raise ValueError(
                f"`lam` must have shape ({len(self.param_names)},) for parameters "
                f"{self.param_names}, got {lam.shape}."
            )
        return lam


class OrnsteinUhlenbeck(AbstractDiffusionModel):
    r"""Isotropic OU process dX = kappa (theta - X) dt + sigma C dW, ``lam = (kappa, sigma,
    theta_1..d)``.

    ``corr`` is a fixed (d, d) correlation matrix (identity by default): a = sigma² corr.
    Exact law: X_t | x0 ~ N(theta + (x0 - theta) e^{-kappa t}, a (1 - e^{-2 kappa t}) / (2 kappa)).
    """

    dim: int = eqx.field(static=True)
    param_names: tuple[str, ...] = eqx.field(static=True)
    positive: tuple[bool, ...] = eqx.field(static=True)
    corr_rows: tuple[tuple[float, ...], ...] = eqx.field(static=True)

    def __init__(self, dim: int = 1, corr: Float[ArrayLike, "dim dim"] | None = None):
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"`dim` must be an int >= 1, got {dim!r}.")
        self.dim = dim
        self.param_names = ("kappa", "sigma") + tuple(f"theta_{i}" for i in range(dim))
        self.positive = (False,) * dim
        corr = jnp.eye(dim) if corr is None else jnp.asarray(corr)
        if corr.shape != (dim, dim):
            raise ValueError(f"`corr` must have shape {(dim, dim)}, got {corr.shape}.")
        # Static (not a trainable array): flows and optimisers see no weights in the model.
        self.corr_rows = tuple(tuple(float(v) for v in row) for row in corr.tolist())

    @property
    def corr(self) -> Float[Array, "dim dim"]:
        """The fixed correlation matrix of the noise."""
        return jnp.asarray(self.corr_rows)

    def drift(self, x, lam):
        return lam[0] * (lam[2:] - x)

    def diffusion(self, x, lam):
        return (lam[1] ** 2 * self.corr).astype(x.dtype)

    def noise(self, x, lam):
        return (lam[1] * jnp.linalg.cholesky(self.corr)).astype(x.dtype)

    def check_params(self, lam):
        lam = self._check_lam_shape(lam)
        return eqx.error_if(
            lam,
            ~((lam[0] > 0) & (lam[1] > 0) & jnp.all(jnp.isfinite(lam))),
            "`lam`: OU needs kappa > 0 and sigma > 0 (and finite parameters).",
        )

    def log_transition(self, t, x, x0, lam):
        """Gaussian N(theta + (x0 - theta) e^{-kappa t}, a (1 - e^{-2 kappa t}) / (2 kappa))."""
        kappa = lam[0]
        mean = lam[2:] + (x0 - lam[2:]) * jnp.exp(-kappa * t)
        cov = self.diffusion(x0, lam) * (-jnp.expm1(-2 * kappa * t)) / (2 * kappa)
        return gaussian_logpdf_chol(x, mean, jnp.linalg.cholesky(cov))


class CoxIngersollRoss(AbstractDiffusionModel):
    r"""CIR process dV = kappa (theta - V) dt + sigma sqrt(V) dW, ``lam = (kappa, theta, sigma)``.

    a = sigma² v, so the diffusion vanishes at v = 0; with the Feller condition
    2 kappa theta >= sigma² the boundary is never reached. ``require_feller=True`` makes a
    parameter set violating it an error.
    """

    dim: int = eqx.field(static=True)
    param_names: tuple[str, ...] = eqx.field(static=True)
    positive: tuple[bool, ...] = eqx.field(static=True)
    require_feller: bool = eqx.field(static=True)

    def __init__(self, require_feller: bool = True):
        self.dim = 1
        self.param_names = ("kappa", "theta", "sigma")
        self.positive = (True,)
        self.require_feller = require_feller

    def drift(self, x, lam):
        return lam[0] * (lam[1] - x)

    def diffusion(self, x, lam):
        return jnp.reshape(lam[2] ** 2 * x[0], (1, 1))

    def noise(self, x, lam):
        return jnp.reshape(lam[2] * jnp.sqrt(x[0]), (1, 1))

    def check_params(self, lam):
        lam = self._check_lam_shape(lam)
        lam = eqx.error_if(
            lam,
            ~jnp.all(jnp.isfinite(lam) & (lam > 0)),
            "`lam`: CIR needs kappa, theta, sigma > 0 (and finite).",
        )
        if self.require_feller:
            lam = eqx.error_if(
                lam,
                2 * lam[0] * lam[1] < lam[2] ** 2,
                "`lam` violates the Feller condition 2 kappa theta >= sigma^2 "
                "(the model was built with require_feller=True).",
            )
        return lam

    def log_transition(self, t, x, x0, lam):
        """Log p = log(2 c_t) + log ncχ²(2 c_t x; df, nc) (see `cir_transition_params`)."""
        c, df, nc = _cir_transition_params(t, x0[0], lam)
        return jnp.log(2 * c) + _log_ncx2_pdf(2 * c * x[0], df, nc)


class Heston(AbstractDiffusionModel):
    r"""Heston model in (s = log price, v): ``lam = (mu, kappa, theta, xi, rho)``.

    ds = (mu - v/2) dt + sqrt(v) dW1, dv = kappa (theta - v) dt + xi sqrt(v) dW2,
    d<W1, W2> = rho dt, so a = v [[1, rho xi], [rho xi, xi²]]. Only v is positive.
    """

    dim: int = eqx.field(static=True)
    param_names: tuple[str, ...] = eqx.field(static=True)
    positive: tuple[bool, ...] = eqx.field(static=True)
    require_feller: bool = eqx.field(static=True)

    def __init__(self, require_feller: bool = True):
        self.dim = 2
        self.param_names = ("mu", "kappa", "theta", "xi", "rho")
        self.positive = (False, True)
        self.require_feller = require_feller

    def drift(self, x, lam):
        mu, kappa, theta = lam[0], lam[1], lam[2]
        return jnp.stack([mu - 0.5 * x[1], kappa * (theta - x[1])])

    def diffusion(self, x, lam):
        xi, rho = lam[3], lam[4]
        return x[1] * jnp.array([[1.0, rho * xi], [rho * xi, xi**2]], dtype=x.dtype)

    @property
    def shift_invariant(self) -> tuple[bool, ...]:
        """B and a do not depend on the log price s."""
        return (True, False)

    def noise(self, x, lam):
        xi, rho = lam[3], lam[4]
        chol = jnp.array([[1.0, 0.0], [rho * xi, xi * jnp.sqrt(1 - rho**2)]], dtype=x.dtype)
        return jnp.sqrt(x[1]) * chol

    def check_params(self, lam):
        lam = self._check_lam_shape(lam)
        lam = eqx.error_if(
            lam,
            jnp.any(lam[1:4] <= 0) | (jnp.abs(lam[4]) >= 1),
            "`lam`: Heston needs kappa, theta, xi > 0 and |rho| < 1.",
        )
        if self.require_feller:
            lam = eqx.error_if(
                lam,
                2 * lam[1] * lam[2] < lam[3] ** 2,
                "`lam` violates the Feller condition 2 kappa theta >= xi^2.",
            )
        return lam


def _check_time(t: ArrayLike, name: str = "t") -> Array:
    t = jnp.asarray(t)
    if t.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar time, got shape {t.shape}.")
    return eqx.error_if(
        t, ~(jnp.isfinite(t) & (t > 0)), f"`{name}` must be finite and > 0 (a positive time step)."
    )


def cir_transition_params(
    t: Float[ArrayLike, ""], x0: Float[ArrayLike, ""], lam: Float[Array, " 3"]
) -> tuple[Float[Array, ""], Float[Array, ""], Float[Array, ""]]:
    r"""(c_t, df, nc) of the CIR law: 2 c_t X_t ~ ncχ²(df = 4 kappa theta / sigma², nc = 2 c_t x0
    e^{-kappa t}).

    c_t = 2 kappa / (sigma² (1 - e^{-kappa t})).

    ``t`` must be finite and > 0, ``x0 >= 0`` and ``lam`` finite and > 0 (value checks; the CIR
    density and sampler call the body without them).
    """
    t = _check_time(t)
    x0 = check_nonnegative(x0, "x0")
    lam = CoxIngersollRoss(require_feller=False).check_params(lam)
    return _cir_transition_params(t, x0, lam)


def _cir_transition_params(t: ArrayLike, x0: ArrayLike, lam: Array) -> tuple[Array, Array, Array]:
    # The body of `cir_transition_params` (called at every step of the exact sampler).
    kappa, theta, sigma = lam[0], lam[1], lam[2]
    c = 2.0 * kappa / (sigma**2 * -jnp.expm1(-kappa * t))
    return c, 4.0 * kappa * theta / sigma**2, 2.0 * c * x0 * jnp.exp(-kappa * t)


def exact_log_transition(
    model: AbstractDiffusionModel,
    t: Float[ArrayLike, ""],
    x: Float[Array, " dim"],
    x0: Float[Array, " dim"],
    lam: Float[Array, " p"],
) -> Float[Array, ""]:
    r"""Exact log transition density log p_lam(t, x | x0): the model's ``log_transition``.

    Checks the arguments, then calls ``model.log_transition`` (implemented by OU, CIR and any
    user `AbstractDiffusionModel` that overrides it).

    OU: Gaussian N(theta + (x0 - theta) e^{-kappa t}, a (1 - e^{-2 kappa t}) / (2 kappa)).
    CIR: log p = log(2 c_t) + log ncχ²(2 c_t x; df, nc) (see `cir_transition_params`).

    Raises:
        TypeError: for models without a closed-form transition (Heston: ``log_transition`` is
            not overridden).

    References:
        Cox, Ingersoll and Ross (1985), Econometrica 53, 385-407.
    """
    check_module(model, AbstractDiffusionModel, "model")
    lam = model.check_params(lam)
    t = _check_time(t)
    x = model.check_state(x, "x")
    x0 = model.check_state(x0, "x0")
    if x.shape != (model.dim,) or x0.shape != (model.dim,):
        raise ValueError(
            f"`x` and `x0` must have shape ({model.dim},), got {x.shape} and {x0.shape}."
        )
    return model.log_transition(t, x, x0, lam)


def sample_cir_exact(
    key: PRNGKeyArray,
    x0: Float[ArrayLike, ""],
    lam: Float[Array, " 3"],
    delta: Float[ArrayLike, ""],
    n_obs: int,
) -> Float[Array, "n 1"]:
    r"""Exact CIR path at spacing ``delta``: the noncentral χ² law drawn as a Poisson-Gamma mixture.

    X_{k+1} = Gamma(df/2 + N) / c_Δ with N ~ Poisson(nc/2), which is 2 c_Δ X ~ ncχ²(df + 2N).

    Returns:
        Path of shape ``(n_obs + 1, 1)`` starting at ``x0``.
    """
    if not isinstance(n_obs, int) or n_obs < 1:
        raise ValueError(f"`n_obs` must be an int >= 1, got {n_obs!r}.")
    lam = CoxIngersollRoss(require_feller=False).check_params(lam)
    delta = _check_time(delta, "delta")
    x0 = jnp.asarray(x0, dtype=lam.dtype)
    x0 = eqx.error_if(x0, ~(x0 > 0), "`x0` must be > 0.")

    def step(x: Array, k: PRNGKeyArray) -> tuple[Array, Array]:
        kp, kg = jr.split(k)
        c, df, nc = _cir_transition_params(delta, x, lam)
        n = jr.poisson(kp, 0.5 * nc).astype(x.dtype)
        x_new = jr.gamma(kg, 0.5 * df + n, dtype=x.dtype) / c
        return x_new, x_new

    _, xs = jax.lax.scan(step, x0, jr.split(key, n_obs))
    return jnp.concatenate([x0[None], xs])[:, None]


def simulate_path(
    key: PRNGKeyArray,
    model: AbstractDiffusionModel,
    x0: Float[Array, " dim"],
    lam: Float[Array, " p"],
    delta: float,
    n_obs: int,
    substeps: int = 20,
) -> Float[Array, "n dim"]:
    r"""Euler-Maruyama path through `jaxgen.core.solve_sde`, observed every ``delta``.

    Positive coordinates use full truncation: drift and noise see v⁺ = max(v, 0), and the
    observed value is v⁺ (Lord, Koekkoek and van Dijk 2010). ``substeps`` Euler steps per
    observation interval.

    Returns:
        Path of shape ``(n_obs + 1, dim)`` starting at ``x0``.
    """
    if not isinstance(n_obs, int) or n_obs < 1:
        raise ValueError(f"`n_obs` must be an int >= 1, got {n_obs!r}.")
    if not isinstance(delta, int | float) or delta <= 0:
        raise ValueError(f"`delta` must be a positive Python float, got {delta!r}.")
    lam = model.check_params(lam)
    x0 = model.check_state(x0, "x0")
    mask = jnp.asarray(model.positive)

    def trunc(y: Array) -> Array:
        return jnp.where(mask, jnp.maximum(y, 0.0), y)

    t1 = delta * n_obs
    ts = jnp.linspace(0.0, t1, n_obs + 1, dtype=x0.dtype)
    sol = solve_sde(
        lambda t, y, args: model.drift(trunc(y), lam),
        lambda t, y, args: model.noise(trunc(y), lam),
        x0,
        key=key,
        t0=0.0,
        t1=t1,
        steps=n_obs * substeps,
        ts=ts,
    )
    return trunc(sol.ys)
