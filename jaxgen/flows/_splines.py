"""Rational-quadratic spline bijections (neural spline flows) acting on one sample.

A monotone rational-quadratic spline with K bins maps [-B, B] onto itself and is the identity
outside (linear tails with unit slope, so the map is C^1 at +-B). `SplineAutoregressive` makes
coordinate i a spline of coordinate i whose knots depend on the coordinates before it, in the
"sampling" direction: the forward map is one parallel pass, the inverse is ``dim`` sequential
passes (cheap for the small dimensions these priors are used at).

References:
    Durkan, Bekasov, Murray, Papamakarios, Neural Spline Flows, NeurIPS 2019 (eqs. 4-8).
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ..core.checks import check_finite, check_positive_int

_MIN_BIN = 1e-3
_MIN_DERIV = 1e-3


def _knots(
    params: Float[Array, " q"], num_bins: int, tail_bound: float, max_derivative: float
) -> tuple[Array, Array, Array]:
    """Knot abscissae (K+1,), ordinates (K+1,) and derivatives (K+1,) from raw parameters."""
    k = num_bins
    w_raw, h_raw, d_raw = params[:k], params[k : 2 * k], params[2 * k :]

    def cum(raw: Array) -> Array:
        frac = _MIN_BIN + (1.0 - _MIN_BIN * k) * jax.nn.softmax(raw)
        edges = jnp.concatenate([jnp.zeros((1,), raw.dtype), jnp.cumsum(frac)])
        edges = 2.0 * tail_bound * edges - tail_bound
        return edges.at[0].set(-tail_bound).at[-1].set(tail_bound)

    inner = _MIN_DERIV + (max_derivative - _MIN_DERIV) * jax.nn.sigmoid(d_raw)
    one = jnp.ones((1,), params.dtype)
    return cum(w_raw), cum(h_raw), jnp.concatenate([one, inner, one])


def _identity_derivative_raw(max_derivative: float) -> float:
    """Raw derivative parameter that gives slope 1 (so zero widths/heights = the identity)."""
    p = (1.0 - _MIN_DERIV) / (max_derivative - _MIN_DERIV)
    return float(jnp.log(p / (1.0 - p)))


def rq_spline(
    params: Float[Array, " q"],
    x: Float[Array, ""],
    *,
    num_bins: int,
    tail_bound: float,
    max_derivative: float = 10.0,
    inverse: bool = False,
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    r"""Scalar monotone rational-quadratic spline and its log-derivative.

    With bin k of width w_k, height h_k, slope s_k = h_k / w_k, knot derivatives
    delta_k, delta_{k+1} and xi = (x - x_k) / w_k:
    $y = y_k + h_k [s_k\xi^2 + \delta_k t] / [s_k + (\delta_{k+1}+\delta_k-2s_k) t]$,
    $t = \xi(1-\xi)$
    (Durkan et al. 2019, eq. 4); the inverse solves the quadratic in xi (eqs. 6-8). Outside
    [-B, B] the map is the identity.

    Args:
        params: (3K - 1,) raw widths (K), heights (K) and interior derivatives (K - 1).
        x: the input (a scalar).
        num_bins: K.
        tail_bound: B.
        max_derivative: cap on knot derivatives.
        inverse: evaluate the inverse map instead.

    Returns:
        (y, log|dy/dx|) of the map evaluated (for ``inverse=True``, log|dx/dy| of the inverse).

    Raises:
        ValueError: for ``num_bins < 1``, ``params`` not of shape ``(3K - 1,)``, or a
            ``tail_bound`` or ``max_derivative`` that is not finite and > 0; ``params`` and ``x``
            must be finite (value checks; the spline flow calls the body without them).
    """
    num_bins = check_positive_int(num_bins, "num_bins")
    params = jnp.asarray(params)
    if params.shape != (3 * num_bins - 1,):
        raise ValueError(
            f"`params` must have shape (3 num_bins - 1,) = ({3 * num_bins - 1},), "
            f"got {params.shape}."
        )
    for name, v in (("tail_bound", tail_bound), ("max_derivative", max_derivative)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"`{name}` must be finite and > 0, got {v}.")
    params, x = check_finite(params, "params"), check_finite(x, "x")
    return _rq_spline(params, x, num_bins, tail_bound, max_derivative, inverse)


def _rq_spline(
    params: Array, x: Array, num_bins: int, tail_bound: float, max_derivative: float, inverse: bool
) -> tuple[Array, Array]:
    # The body of `rq_spline` (called per coordinate by the spline flow).
    xs, ys, ds = _knots(params, num_bins, tail_bound, max_derivative)
    inside = jnp.abs(x) < tail_bound
    xc = jnp.clip(x, -tail_bound, tail_bound)
    edges = ys if inverse else xs
    k = jnp.clip(jnp.searchsorted(edges, xc, side="right") - 1, 0, num_bins - 1)
    x_k, w_k = xs[k], xs[k + 1] - xs[k]
    y_k, h_k = ys[k], ys[k + 1] - ys[k]
    d_k, d_k1 = ds[k], ds[k + 1]
    s_k = h_k / w_k
    if inverse:
        dy = xc - y_k
        a = h_k * (s_k - d_k) + dy * (d_k1 + d_k - 2.0 * s_k)
        b = h_k * d_k - dy * (d_k1 + d_k - 2.0 * s_k)
        c = -s_k * dy
        disc = jnp.clip(b**2 - 4.0 * a * c, 0.0)
        xi = jnp.clip(2.0 * c / (-b - jnp.sqrt(disc)), 0.0, 1.0)
        out = x_k + xi * w_k
    else:
        xi = (xc - x_k) / w_k
        out = None
    t = xi * (1.0 - xi)
    denom = s_k + (d_k1 + d_k - 2.0 * s_k) * t
    numer = s_k**2 * (d_k1 * xi**2 + 2.0 * s_k * t + d_k * (1.0 - xi) ** 2)
    log_deriv = jnp.log(numer) - 2.0 * jnp.log(denom)
    if not inverse:
        out = y_k + h_k * (s_k * xi**2 + d_k * t) / denom
    else:
        log_deriv = -log_deriv
    return jnp.where(inside, out, x), jnp.where(inside, log_deriv, 0.0)


class SplineAutoregressive(eqx.Module):
    r"""Autoregressive rational-quadratic spline bijection of R^dim (one sample).

    Forward: $z_i = S(u_i; \theta_i(u_{<i}))$ with `rq_spline`; the conditioner is one MLP
    shared over coordinates, fed $(u \odot 1[j < i], e_i)$ (masked input and a one-hot of i).
    Its last layer starts at zero with the derivative bias of slope 1, so the initial map is
    the identity. ``dim = 1`` gives an unconditional spline.

    Attributes:
        dim: dimension.
        num_bins: K, bins per spline.
        tail_bound: B, the spline acts on [-B, B] (identity outside).
        max_derivative: cap on knot derivatives.
    """

    mlp: eqx.nn.MLP
    dim: int = eqx.field(static=True)
    num_bins: int = eqx.field(static=True)
    tail_bound: float = eqx.field(static=True)
    max_derivative: float = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        *,
        num_bins: int = 8,
        width: int = 32,
        depth: int = 1,
        tail_bound: float = 5.0,
        max_derivative: float = 10.0,
        key: PRNGKeyArray,
    ):
        for name, v in (("dim", dim), ("num_bins", num_bins), ("width", width), ("depth", depth)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"`{name}` must be an int >= 1, got {v!r}.")
        if not tail_bound > 0 or not max_derivative > 1:
            raise ValueError(
                f"`tail_bound` must be > 0 and `max_derivative` > 1, got {tail_bound}, "
                f"{max_derivative}."
            )
        self.dim, self.num_bins = dim, num_bins
        self.tail_bound, self.max_derivative = float(tail_bound), float(max_derivative)
        q = 3 * num_bins - 1
        mlp = eqx.nn.MLP(2 * dim, q, width, depth, activation=jax.nn.gelu, key=key)
        last = mlp.layers[-1]
        bias = jnp.zeros(q).at[2 * num_bins :].set(_identity_derivative_raw(max_derivative))
        last = eqx.tree_at(
            lambda layer: (layer.weight, layer.bias),
            last,
            (jnp.zeros_like(last.weight), bias.astype(last.bias.dtype)),
        )
        self.mlp = eqx.tree_at(lambda m: m.layers[-1], mlp, last)

    def _params(self, u: Array, i: Array) -> Array:
        mask = (jnp.arange(self.dim) < i).astype(u.dtype)
        onehot = (jnp.arange(self.dim) == i).astype(u.dtype)
        return self.mlp(jnp.concatenate([u * mask, onehot]))

    def _spline(self, params: Array, x: Array, inverse: bool) -> tuple[Array, Array]:
        return _rq_spline(params, x, self.num_bins, self.tail_bound, self.max_derivative, inverse)

    def transform_and_log_det(
        self, u: Float[Array, " dim"]
    ) -> tuple[Float[Array, " dim"], Float[Array, ""]]:
        """Forward map of one sample: (z, log|det dz/du|), one parallel pass."""
        if u.shape != (self.dim,):
            raise ValueError(f"`u` must have shape ({self.dim},), got {u.shape}.")
        idx = jnp.arange(self.dim)
        params = jax.vmap(self._params, in_axes=(None, 0))(u, idx)
        z, logd = jax.vmap(lambda p, x: self._spline(p, x, False))(params, u)
        return z, jnp.sum(logd)

    def inverse_and_log_det(
        self, z: Float[Array, " dim"]
    ) -> tuple[Float[Array, " dim"], Float[Array, ""]]:
        """Inverse map of one sample: (u, log|det du/dz|), ``dim`` sequential passes."""
        if z.shape != (self.dim,):
            raise ValueError(f"`z` must have shape ({self.dim},), got {z.shape}.")
        u = jnp.zeros_like(z)
        total = jnp.zeros((), z.dtype)
        for i in range(self.dim):  # dim is small and static
            params = self._params(u, jnp.asarray(i))
            ui, logd = self._spline(params, z[i], True)
            u, total = u.at[i].set(ui), total + logd
        return u, total
