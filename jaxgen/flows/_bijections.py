"""Smooth (C^infinity) normalizing-flow bijections acting on one sample.

The Fokker-Planck residual of a flow density needs third derivatives of the map, so these
bijections are built from tanh and exp only (no splines, no ReLU).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ..core.checks import check_finite, check_positive_int


def monotone_tanh(
    params: Float[Array, " q"], x: Float[Array, ""], num_units: int
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    r"""Scalar monotone map S(x) and log S'(x) from a flat parameter vector.

    S(x) = beta + e^alpha [x + (1/K) sum_k tanh(eta_k) e^{-omega_k} tanh(e^{omega_k} x + delta_k)],
    params = (alpha, beta, eta_1..K, omega_1..K, delta_1..K), q = 2 + 3K. Since
    |tanh eta_k| < 1, S'(x) >= e^alpha (1 - sum_k |tanh eta_k| / K) > 0, so S is a C^infinity
    bijection of R; eta = 0 and alpha = beta = 0 give the identity.

    Raises:
        ValueError: unless ``params`` has shape ``(2 + 3 num_units,)``; ``params`` and ``x`` must
            be finite (value checks; the flows call the body without them).
    """
    num_units = check_positive_int(num_units, "num_units")
    params = _check_params(params, num_units)
    return _monotone_tanh(params, check_finite(x, "x"), num_units)


def _check_params(params: Array, num_units: int) -> Array:
    params = jnp.asarray(params)
    if params.shape != (2 + 3 * num_units,):
        raise ValueError(
            f"`params` must have shape (2 + 3 num_units,) = ({2 + 3 * num_units},), "
            f"got {params.shape}."
        )
    return check_finite(params, "params")


def _monotone_tanh(params: Array, x: Array, num_units: int) -> tuple[Array, Array]:
    # The body of `monotone_tanh` (called per coordinate and per Newton iteration).
    k = num_units
    alpha, beta = params[0], params[1]
    eta, omega, delta = params[2 : 2 + k], params[2 + k : 2 + 2 * k], params[2 + 2 * k : 2 + 3 * k]
    w = jnp.tanh(eta) / k
    u = jnp.exp(omega) * x + delta
    th = jnp.tanh(u)
    inner = x + jnp.sum(w * jnp.exp(-omega) * th)
    deriv = 1.0 + jnp.sum(w * (1.0 - th**2))
    return beta + jnp.exp(alpha) * inner, alpha + jnp.log(deriv)


def monotone_tanh_inverse(
    params: Float[Array, " q"], z: Float[Array, ""], num_units: int, num_iters: int = 40
) -> Float[Array, ""]:
    """Inverse of `monotone_tanh` by safeguarded Newton (bisection fallback), fixed iterations.

    The root lies in [x0 - M, x0 + M] with x0 = (z - beta) e^{-alpha} and
    M = max_k e^{-omega_k} >= |(1/K) sum_k tanh(eta_k) e^{-omega_k} tanh(.)|. A Newton step
    that leaves the bracket is replaced by bisection, so the iteration always converges.
    No gradient is meant to flow through it (used for sampling).

    ``params`` (shape ``(2 + 3 num_units,)``) and ``z`` are checked as in `monotone_tanh`.
    """
    num_units = check_positive_int(num_units, "num_units")
    num_iters = check_positive_int(num_iters, "num_iters")
    params = _check_params(params, num_units)
    return _monotone_tanh_inverse(params, check_finite(z, "z"), num_units, num_iters)


def _monotone_tanh_inverse(params: Array, z: Array, num_units: int, num_iters: int) -> Array:
    # The body of `monotone_tanh_inverse` (called per coordinate by the flow).
    k = num_units
    omega = params[2 + k : 2 + 2 * k]
    x0 = (z - params[1]) * jnp.exp(-params[0])
    m = jnp.max(jnp.exp(-omega)) + 1e-12
    lo, hi = x0 - m, x0 + m

    def body(_: Array, state: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        x, lo, hi = state
        s, log_d = _monotone_tanh(params, x, k)
        f = s - z
        lo = jnp.where(f < 0, x, lo)
        hi = jnp.where(f >= 0, x, hi)
        newton = x - f / jnp.exp(log_d)
        ok = (newton > lo) & (newton < hi)
        return jnp.where(ok, newton, 0.5 * (lo + hi)), lo, hi

    x, _, _ = jax.lax.fori_loop(0, num_iters, body, (x0, lo, hi))
    return x


class ConditionalMonotoneTanh(eqx.Module):
    r"""Elementwise conditional bijection z_i = S(x_i; theta_i(c)), a `monotone_tanh` per
    coordinate.

    The conditioner is a tanh MLP from the condition c (``cond_dim``,) to the ``dim * (2 + 3K)``
    parameters. Its last layer is zero for (alpha, beta, eta), so at initialisation the map is
    the identity for every condition; (omega, delta) start random so that the tanh units are
    spread out.

    Attributes:
        dim: state dimension.
        cond_dim: condition dimension.
        num_units: K, tanh units per coordinate.
    """

    mlp: eqx.nn.MLP
    dim: int = eqx.field(static=True)
    cond_dim: int = eqx.field(static=True)
    num_units: int = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        cond_dim: int,
        *,
        num_units: int = 8,
        width: int = 32,
        depth: int = 2,
        key: PRNGKeyArray,
    ):
        for name, v in (
            ("dim", dim),
            ("cond_dim", cond_dim),
            ("num_units", num_units),
            ("width", width),
            ("depth", depth),
        ):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"`{name}` must be an int >= 1, got {v!r}.")
        self.dim, self.cond_dim, self.num_units = dim, cond_dim, num_units
        q = 2 + 3 * num_units
        mkey, wkey = jr.split(key)
        mlp = eqx.nn.MLP(cond_dim, dim * q, width, depth, activation=jnp.tanh, key=mkey)
        last = mlp.layers[-1]
        # Output layout per coordinate: (alpha, beta, eta_1..K, omega_1..K, delta_1..K).
        keep = jnp.zeros((dim, q), dtype=bool).at[:, 2 + num_units :].set(True).reshape(-1)
        bias = (
            jnp.zeros((dim, q))
            .at[:, 2 + num_units : 2 + 2 * num_units]
            .set(jnp.linspace(-0.5, 1.5, num_units))
        )
        bias = bias.at[:, 2 + 2 * num_units :].set(jnp.linspace(-2.0, 2.0, num_units))
        weight = jnp.where(keep[:, None], 0.1 * jr.normal(wkey, last.weight.shape), 0.0)
        last = eqx.tree_at(
            lambda layer: (layer.weight, layer.bias),
            last,
            (weight.astype(last.weight.dtype), bias.reshape(-1).astype(last.weight.dtype)),
        )
        self.mlp = eqx.tree_at(lambda m: m.layers[-1], mlp, last)

    def _params(self, condition: Array) -> Array:
        if condition.shape != (self.cond_dim,):
            raise ValueError(
                f"`condition` must have shape ({self.cond_dim},), got {condition.shape}."
            )
        return self.mlp(condition).reshape(self.dim, 2 + 3 * self.num_units)

    def transform_and_log_det(
        self, x: Float[Array, " dim"], condition: Float[Array, " cond_dim"]
    ) -> tuple[Float[Array, " dim"], Float[Array, ""]]:
        """Forward map of one sample: (z, log|det dz/dx|)."""
        if x.shape != (self.dim,):
            raise ValueError(f"`x` must have shape ({self.dim},), got {x.shape}.")
        params = self._params(condition)
        z, logd = jax.vmap(_monotone_tanh, in_axes=(0, 0, None))(params, x, self.num_units)
        return z, jnp.sum(logd)

    def inverse(
        self, z: Float[Array, " dim"], condition: Float[Array, " cond_dim"]
    ) -> Float[Array, " dim"]:
        """Inverse map of one sample (Newton with bisection fallback)."""
        if z.shape != (self.dim,):
            raise ValueError(f"`z` must have shape ({self.dim},), got {z.shape}.")
        params = self._params(condition)
        return jax.vmap(_monotone_tanh_inverse, in_axes=(0, 0, None, None))(
            params, z, self.num_units, 40
        )


class ConditionalAffineCoupling(eqx.Module):
    r"""Conditional affine coupling: z_A = x_A, z_B = x_B e^{s(x_A, c)} + t(x_A, c).

    A = the first ``split`` coordinates. s and t come from one tanh MLP whose last layer is
    zero-initialised (identity at initialisation); s is squashed by tanh to keep the scale
    bounded. log|det| = sum s.

    References:
        Dinh, Sohl-Dickstein and Bengio, Density estimation using Real NVP, ICLR 2017.
    """

    mlp: eqx.nn.MLP
    dim: int = eqx.field(static=True)
    cond_dim: int = eqx.field(static=True)
    split: int = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        cond_dim: int,
        *,
        width: int = 32,
        depth: int = 2,
        split: int | None = None,
        key: PRNGKeyArray,
    ):
        if not isinstance(dim, int) or dim < 2:
            raise ValueError(f"`dim` must be an int >= 2 for a coupling, got {dim!r}.")
        check_positive_int(cond_dim, "cond_dim", minimum=0)
        check_positive_int(width, "width")
        check_positive_int(depth, "depth", minimum=0)
        split = dim // 2 if split is None else split
        if not 1 <= split < dim:
            raise ValueError(f"`split` must be in [1, {dim - 1}], got {split}.")
        self.dim, self.cond_dim, self.split = dim, cond_dim, split
        mlp = eqx.nn.MLP(
            split + cond_dim, 2 * (dim - split), width, depth, activation=jnp.tanh, key=key
        )
        self.mlp = eqx.tree_at(
            lambda m: (m.layers[-1].weight, m.layers[-1].bias),
            mlp,
            (jnp.zeros_like(mlp.layers[-1].weight), jnp.zeros_like(mlp.layers[-1].bias)),
        )

    def _scale_shift(self, xa: Array, condition: Array) -> tuple[Array, Array]:
        if condition.shape != (self.cond_dim,):
            raise ValueError(
                f"`condition` must have shape ({self.cond_dim},), got {condition.shape}."
            )
        out = self.mlp(jnp.concatenate([xa, condition]))
        nb = self.dim - self.split
        return jnp.tanh(out[:nb]), out[nb:]

    def transform_and_log_det(
        self, x: Float[Array, " dim"], condition: Float[Array, " cond_dim"]
    ) -> tuple[Float[Array, " dim"], Float[Array, ""]]:
        """Forward map of one sample: (z, log|det dz/dx|)."""
        if x.shape != (self.dim,):
            raise ValueError(f"`x` must have shape ({self.dim},), got {x.shape}.")
        xa, xb = x[: self.split], x[self.split :]
        s, t = self._scale_shift(xa, condition)
        return jnp.concatenate([xa, xb * jnp.exp(s) + t]), jnp.sum(s)

    def inverse(
        self, z: Float[Array, " dim"], condition: Float[Array, " cond_dim"]
    ) -> Float[Array, " dim"]:
        """Inverse map of one sample (closed form)."""
        if z.shape != (self.dim,):
            raise ValueError(f"`z` must have shape ({self.dim},), got {z.shape}.")
        za, zb = z[: self.split], z[self.split :]
        s, t = self._scale_shift(za, condition)
        return jnp.concatenate([za, (zb - t) * jnp.exp(-s)])


class ConditionalSmoothCouplingFlow(eqx.Module):
    r"""Smooth conditional flow for ``dim >= 2``: ``num_blocks`` blocks of
    [`ConditionalMonotoneTanh`] -> [`ConditionalAffineCoupling`] -> [fixed permutation].

    Block b maps x to P (C_b(E_b(x; c); c)) with E_b elementwise monotone, C_b the affine
    coupling z_B <- z_B e^{s(z_A, c)} + t(z_A, c) (tanh MLPs, so the whole map is C^infinity
    in x, as a Fokker-Planck residual needs) and P the reversal of the coordinates, so that
    the next coupling transforms the other part. log|det| is the sum of the blocks' log-dets
    (a permutation has |det| = 1). Every sub-bijection is the identity at initialisation, so
    the flow is the identity for every condition. The inverse runs the blocks backwards
    (Newton with bisection for the elementwise maps, closed form for the couplings).

    Attributes:
        dim: state dimension (>= 2).
        cond_dim: condition dimension.
        num_blocks: number of blocks.

    References:
        Dinh, Sohl-Dickstein and Bengio, Density estimation using Real NVP, ICLR 2017;
        Saporiti and Nobile, arXiv 2606.04324 (2026) (smooth flows for Fokker-Planck).
    """

    elementwise: tuple[ConditionalMonotoneTanh, ...]
    couplings: tuple[ConditionalAffineCoupling, ...]
    dim: int = eqx.field(static=True)
    cond_dim: int = eqx.field(static=True)
    num_blocks: int = eqx.field(static=True)

    def __init__(
        self,
        dim: int,
        cond_dim: int,
        *,
        num_blocks: int = 2,
        num_units: int = 8,
        width: int = 32,
        depth: int = 2,
        key: PRNGKeyArray,
    ):
        if not isinstance(dim, int) or dim < 2:
            raise ValueError(f"`dim` must be an int >= 2 for a coupling flow, got {dim!r}.")
        if not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"`num_blocks` must be an int >= 1, got {num_blocks!r}.")
        self.dim, self.cond_dim, self.num_blocks = dim, cond_dim, num_blocks
        keys = jr.split(key, 2 * num_blocks)
        self.elementwise = tuple(
            ConditionalMonotoneTanh(
                dim, cond_dim, num_units=num_units, width=width, depth=depth, key=k
            )
            for k in keys[:num_blocks]
        )
        self.couplings = tuple(
            ConditionalAffineCoupling(dim, cond_dim, width=width, depth=depth, key=k)
            for k in keys[num_blocks:]
        )

    def transform_and_log_det(
        self, x: Float[Array, " dim"], condition: Float[Array, " cond_dim"]
    ) -> tuple[Float[Array, " dim"], Float[Array, ""]]:
        """Forward map of one sample: (z, log|det dz/dx|)."""
        if x.shape != (self.dim,):
            raise ValueError(f"`x` must have shape ({self.dim},), got {x.shape}.")
        logdet = jnp.zeros((), dtype=x.dtype)
        for elem, coup in zip(self.elementwise, self.couplings, strict=True):
            x, ld_e = elem.transform_and_log_det(x, condition)
            x, ld_c = coup.transform_and_log_det(x, condition)
            x, logdet = x[::-1], logdet + ld_e + ld_c
        return x, logdet

    def inverse(
        self, z: Float[Array, " dim"], condition: Float[Array, " cond_dim"]
    ) -> Float[Array, " dim"]:
        """Inverse map of one sample (blocks in reverse order)."""
        if z.shape != (self.dim,):
            raise ValueError(f"`z` must have shape ({self.dim},), got {z.shape}.")
        for elem, coup in zip(self.elementwise[::-1], self.couplings[::-1], strict=True):
            z = elem.inverse(coup.inverse(z[::-1], condition), condition)
        return z
