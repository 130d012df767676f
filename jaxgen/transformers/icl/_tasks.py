"""In-context regression tasks on a mixture of manifolds (circles, spheres, flat tori).

A task is ``n`` noisy pairs ``(x_i, y_i)``, ``x_i`` in R^D on a union of K separated pieces, and
``Q`` queries from the same design. On piece k the regression function is a centred Gaussian
process in the piece's angle coordinates ``t`` with the periodic product covariance
`prior_kernel` (eq. 2.1):

    Cov(f(t), f(t')) = A^2 prod_m k(t_m - t'_m),   k(u) = 1/2 sum_{j=1}^J j^-(2 beta + 1) cos(j u).

It is drawn in weight space, ``f(t) = A sum_j w_j phi_j(t)`` with ``w ~ N(0, I)`` and
``phi(t) = sqrt(c_j / 2) [cos(j t), sin(j t)]`` (tensor products for d = 2), so the posterior
mean in `bayes_predict` is the exact Bayes predictor. Pieces carry independent functions.

References:
    Bickel and Li, Local polynomial regression on unknown manifolds (2007); the
    task distribution is reconstructed from the ICL paper's abstract (a jaxgen choice).
"""

import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ...core.checks import check_nonnegative, check_positive, check_positive_int

#: Intrinsic dimension and number of ambient coordinates of each shipped piece kind.
KINDS = {"circle": (1, 2), "sphere": (2, 3), "torus": (2, 4)}


class ManifoldPiece(NamedTuple):
    """One piece: ``centre + radius * R[:, :m] @ e(t)`` with ``e`` the kind's unit embedding.

    Attributes:
        kind: ``"circle"`` (d = 1, m = 2), ``"sphere"`` (d = 2, m = 3) or ``"torus"`` (flat
            torus, d = 2, m = 4, ``e(t) = (cos t1, sin t1, cos t2, sin t2) / sqrt 2``).
        d: intrinsic dimension.
        R: orthogonal matrix, shape ``(D, D)``; its first m columns span the piece.
        centre: shape ``(D,)``.
        radius: scale of the piece.
    """

    kind: str
    d: int
    R: Float[Array, "D D"]
    centre: Float[Array, " D"]
    radius: float


class ICLTask(NamedTuple):
    """One in-context regression task (see `sample_task`); ``Q`` queries, ``d`` intrinsic dims."""

    x: Float[Array, "n D"]
    y: Float[Array, " n"]
    f: Float[Array, " n"]
    xq: Float[Array, "Q D"]
    fq: Float[Array, " Q"]
    piece: Int[Array, " n"]
    piece_q: Int[Array, " Q"]
    coords: Float[Array, "n d"]
    coords_q: Float[Array, "Q d"]
    tangent_q: Float[Array, "Q D d"]


class ICLBatch(NamedTuple):
    """A padded batch of tasks for training (see `task_batch`).

    ``x (B, n_max, D)``, ``y (B, n_max)``, ``mask (B, n_max)`` (True = real context point),
    ``xq (B, Q, D)``, ``yq (B, Q)`` noisy query labels, ``fq (B, Q)`` noise-free values and ``n``
    the number of real points (the same for every task of the batch).
    """

    x: Float[Array, "B n D"]
    y: Float[Array, "B n"]
    mask: Bool[Array, "B n"]
    xq: Float[Array, "B Q D"]
    yq: Float[Array, "B Q"]
    fq: Float[Array, "B Q"]
    n: Int[Array, ""]


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"`{name}` must be > 0, got {value!r}.")


def _check_kinds(kinds: tuple[str, ...], D: int) -> None:
    if len(kinds) == 0:
        raise ValueError("`kinds` must name at least one piece kind.")
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"unknown piece kind {kind!r}; expected one of {sorted(KINDS)}.")
        if D < KINDS[kind][1]:
            raise ValueError(
                f"a {kind} needs D >= {KINDS[kind][1]} ambient dimensions, got D = {D}."
            )


def sample_mixture(
    key: PRNGKeyArray,
    D: int,
    K: int,
    *,
    kinds: tuple[str, ...] = ("circle",),
    radius: float = 1.0,
    sep: float = 3.0,
) -> list[ManifoldPiece]:
    """K separated pieces in R^D, piece k of kind ``kinds[k % len(kinds)]``.

    Centres sit on the integer grid of R^D scaled by ``sep + 2 radius`` (first K grid points,
    centred) and then rotated together by a random orthogonal matrix, so two pieces are at set
    distance >= ``sep``. Each piece gets its own random orientation ``R`` (QR of a Gaussian
    matrix, signs fixed so it is Haar). Works under `jax.jit` with ``D, K`` static.

    Returns:
        A list of K `ManifoldPiece`.
    """
    if not isinstance(D, int) or D < 1:
        raise ValueError(f"`D` must be an int >= 1, got {D!r}.")
    if not isinstance(K, int) or K < 1:
        raise ValueError(f"`K` must be an int >= 1, got {K!r}.")
    kinds = tuple(kinds)
    _check_kinds(kinds, D)
    _positive("radius", radius)
    _positive("sep", sep)
    side = 1
    while side**D < K:
        side += 1
    grid = jnp.asarray(list(itertools.islice(itertools.product(range(side), repeat=D), K)))
    grid = grid.astype(jnp.zeros(()).dtype)
    grid = (grid - jnp.mean(grid, axis=0)[None, :]) * (sep + 2.0 * radius)
    k_rot, k_pieces = jr.split(key)
    centres = grid @ _haar(k_rot, D).T
    rotations = jax.vmap(lambda k: _haar(k, D))(jr.split(k_pieces, K))
    return [
        ManifoldPiece(kinds[k % len(kinds)], KINDS[kinds[k % len(kinds)]][0], rotations[k],
                      centres[k], float(radius))
        for k in range(K)
    ]  # fmt: skip


def _haar(key: PRNGKeyArray, D: int) -> Float[Array, "D D"]:
    q, r = jnp.linalg.qr(jr.normal(key, (D, D)))
    return q * jnp.sign(jnp.diagonal(r))[None, :]


def _draw_coords(key: PRNGKeyArray, kind: str, num: int) -> Float[Array, "num d"]:
    """Uniform points in the intrinsic measure (arc length / area)."""
    if kind == "circle":
        return jr.uniform(key, (num, 1), maxval=2 * math.pi)
    if kind == "torus":
        return jr.uniform(key, (num, 2), maxval=2 * math.pi)
    ka, kb = jr.split(key)  # sphere: polar angle by inverse CDF, azimuth uniform
    polar = jnp.arccos(1.0 - 2.0 * jr.uniform(ka, (num,)))
    return jnp.stack([polar, jr.uniform(kb, (num,), maxval=2 * math.pi)], axis=-1)


def _embed(kind: str, t: Float[Array, " d"]) -> tuple[Float[Array, " m"], Float[Array, "m d"]]:
    """Unit embedding e(t) and an orthonormal tangent basis at t, in the piece's m coordinates."""
    if kind == "circle":
        c, s = jnp.cos(t[0]), jnp.sin(t[0])
        return jnp.stack([c, s]), jnp.stack([-s, c])[:, None]
    if kind == "torus":
        c1, s1, c2, s2 = jnp.cos(t[0]), jnp.sin(t[0]), jnp.cos(t[1]), jnp.sin(t[1])
        z = jnp.zeros_like(c1)
        e = jnp.stack([c1, s1, c2, s2]) / math.sqrt(2.0)
        tan = jnp.stack([jnp.stack([-s1, z]), jnp.stack([c1, z]), jnp.stack([z, -s2]),
                         jnp.stack([z, c2])])  # fmt: skip
        return e, tan
    ca, sa, cb, sb = jnp.cos(t[0]), jnp.sin(t[0]), jnp.cos(t[1]), jnp.sin(t[1])
    e = jnp.stack([sa * cb, sa * sb, ca])
    tan = jnp.stack([jnp.stack([ca * cb, -sb]), jnp.stack([ca * sb, cb]),
                     jnp.stack([-sa, jnp.zeros_like(sa)])])  # fmt: skip
    return e, tan


def _series_coefficients(beta: float, J: int, dtype: jnp.dtype) -> Float[Array, " J"]:
    J = check_positive_int(J, "J")  # J <= 0 gave no features: a zero function, silently
    beta = check_positive(beta, "beta")  # the smoothness: beta <= 0 is no Sobolev prior
    j = jnp.arange(1, J + 1, dtype=dtype)
    return j ** (-(2.0 * beta + 1.0))


def prior_features(
    t: Float[Array, " d"], *, beta: float, J: int, amplitude: float = 1.0
) -> Float[Array, " F"]:
    """Weight-space features ``Phi(t)``, ``F = (2J)^d``, with ``Phi(t) . Phi(t') = prior_kernel``.

    One coordinate: ``A^(1/d) sqrt(c_j / 2) [cos(j t), sin(j t)]_{j <= J}``; d coordinates: the
    Kronecker product.
    """
    if t.ndim != 1 or t.shape[0] < 1:
        raise ValueError(f"`t` must have shape (d,) with d >= 1, got {t.shape}.")
    _positive("amplitude", amplitude)
    c = _series_coefficients(beta, J, t.dtype)
    j = jnp.arange(1, J + 1, dtype=t.dtype)
    scale = jnp.asarray(amplitude, t.dtype) ** (1.0 / t.shape[0])
    out = jnp.ones((1,), t.dtype)
    for m in range(t.shape[0]):
        phi = scale * jnp.concatenate([jnp.sqrt(c / 2) * jnp.cos(j * t[m]),
                                       jnp.sqrt(c / 2) * jnp.sin(j * t[m])])  # fmt: skip
        out = jnp.kron(out, phi)
    return out


def prior_kernel(
    t: Float[Array, " d"],
    t2: Float[Array, " d"],
    *,
    beta: float,
    J: int,
    amplitude: float = 1.0,
) -> Float[Array, ""]:
    """Prior covariance ``A^2 prod_m k(t_m - t2_m)``, ``k(u) = 1/2 sum_{j<=J} j^-(2b+1) cos(j u)``.

    Sample paths behave like Hölder-beta functions down to the scale 2 pi / J.
    """
    _positive("beta", beta)
    _positive("amplitude", amplitude)  # as in `prior_features` (A and -A gave the same kernel)
    if t.shape != t2.shape or t.ndim != 1:
        raise ValueError(f"`t` and `t2` must both have shape (d,), got {t.shape} and {t2.shape}.")
    c = _series_coefficients(beta, J, t.dtype)
    j = jnp.arange(1, J + 1, dtype=t.dtype)
    per_coord = 0.5 * jnp.sum(c[None, :] * jnp.cos(j[None, :] * (t - t2)[:, None]), axis=-1)
    return jnp.asarray(amplitude, t.dtype) ** 2 * jnp.prod(per_coord)


def sample_task(
    key: PRNGKeyArray,
    pieces: list[ManifoldPiece],
    n: int,
    *,
    num_queries: int = 8,
    beta: float = 1.5,
    J: int = 64,
    amplitude: float = 1.0,
    sigma: float = 0.1,
    weights: Float[Array, " K"] | None = None,
) -> ICLTask:
    """Draw one task: design on the pieces, GP function per piece, noisy labels (eq. 2.1).

    Each of the ``n + num_queries`` points picks piece k with probability ``weights[k]``
    (default uniform; zero weights switch pieces off, as `task_batch` does for K_n < K_max),
    then a uniform point of the piece. Labels ``y = f(x) + sigma * eps``; queries are noise-free
    (``fq``). All pieces must share their intrinsic dimension d (coords are ``(n, d)``).

    Returns:
        `ICLTask` with ``tangent_q (Q, D, d)`` an orthonormal basis of the query's tangent space.
    """
    if not pieces:
        raise ValueError("`pieces` must hold at least one ManifoldPiece.")
    ds = {p.d for p in pieces}
    if len(ds) != 1:
        raise ValueError(f"all pieces must share their intrinsic dimension d, got {sorted(ds)}.")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"`n` must be an int >= 1, got {n!r}.")
    if not isinstance(num_queries, int) or num_queries < 1:
        raise ValueError(f"`num_queries` must be an int >= 1, got {num_queries!r}.")
    _positive("beta", beta)
    sigma = check_nonnegative(sigma, "sigma")  # a NaN sigma made NaN labels
    K, d = len(pieces), ds.pop()
    D = pieces[0].centre.shape[0]
    for p in pieces:
        _check_kinds((p.kind,), D)
        _positive("radius", p.radius)
    dtype = pieces[0].centre.dtype
    if weights is None:
        weights = jnp.full((K,), 1.0 / K, dtype)
    elif weights.shape != (K,):
        raise ValueError(f"`weights` must have shape ({K},) (one per piece), got {weights.shape}.")
    total = n + num_queries
    k_piece, k_coord, k_fun, k_noise = jr.split(key, 4)
    piece = jr.categorical(k_piece, jnp.log(weights), shape=(total,))
    # Vectorised over points: one coordinate draw and one embedding per distinct kind, the
    # piece's rotation / centre / radius gathered per point, and the prior features computed
    # once (not once per piece): O(total F) work and a program whose size does not grow with K.
    kinds = sorted({p.kind for p in pieces})
    kind_of = jnp.asarray([kinds.index(p.kind) for p in pieces])[piece]
    R = jnp.stack([p.R for p in pieces])
    centre = jnp.stack([p.centre for p in pieces])[piece]
    radius = jnp.asarray([p.radius for p in pieces], dtype)[piece]
    x = jnp.zeros((total, D), dtype)
    coords = jnp.zeros((total, d), dtype)
    tangent = jnp.zeros((total, D, d), dtype)
    for kind, kc in zip(kinds, jr.split(k_coord, len(kinds)), strict=True):
        on = kind_of == kinds.index(kind)
        t = _draw_coords(kc, kind, total).astype(dtype)
        e, tan = jax.vmap(_embed_fn(kind))(t)
        Rm = R[:, :, : e.shape[-1]][piece]
        xk = centre + radius[:, None] * jnp.einsum("nDm,nm->nD", Rm, e)
        x = jnp.where(on[:, None], xk, x)
        coords = jnp.where(on[:, None], t, coords)
        tangent = jnp.where(on[:, None, None], jnp.einsum("nDm,nmd->nDd", Rm, tan), tangent)
    phi = jax.vmap(lambda s: prior_features(s, beta=beta, J=J, amplitude=amplitude))(coords)
    w = jr.normal(k_fun, (K, phi.shape[-1]), dtype)  # independent GP weights per piece
    f = jnp.sum(phi * w[piece], axis=-1)
    y = f[:n] + sigma * jr.normal(k_noise, (n,), dtype)
    return ICLTask(x[:n], y, f[:n], x[n:], f[n:], piece[:n], piece[n:], coords[:n], coords[n:],
                   tangent[n:])  # fmt: skip


def _embed_fn(kind: str):
    """``t -> _embed(kind, t)`` (a named closure so vmap sees one function per kind)."""
    return lambda t: _embed(kind, t)


def num_pieces(n: int, kappa: float, c_K: float = 1.0) -> int:
    """``K_n = ceil(c_K n^kappa)``."""
    n = check_positive_int(n, "n")
    _positive("c_K", c_K)  # c_K <= 0 (or NaN) gave one piece whatever n
    if not 0 <= kappa < 1:
        raise ValueError(f"`kappa` must lie in [0, 1), got {kappa!r}.")
    return max(1, math.ceil(c_K * n**kappa - 1e-9))


def task_batch(
    key: PRNGKeyArray,
    *,
    batch: int,
    n_min: int,
    n_max: int,
    D: int,
    kappa: float,
    c_K: float = 1.0,
    kinds: tuple[str, ...] = ("circle",),
    radius: float = 1.0,
    sep: float = 3.0,
    num_queries: int = 1,
    beta: float = 1.5,
    J: int = 64,
    amplitude: float = 1.0,
    sigma: float = 0.1,
) -> ICLBatch:
    """A padded batch of fresh tasks for pretraining; jit-able, ``key`` first.

    One ``n ~ U{n_min, ..., n_max}`` per batch; each task gets new pieces (``K_max =
    ceil(c_K n_max^kappa)`` placed, the first ``K_n = ceil(c_K n^kappa)`` used), new functions
    and noise. Context slots ``>= n`` are padding (``mask`` False). ``yq`` are noisy labels.
    """
    if not (isinstance(n_min, int) and isinstance(n_max, int) and 1 <= n_min <= n_max):
        raise ValueError(f"need ints 1 <= n_min <= n_max, got n_min={n_min!r}, n_max={n_max!r}.")
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"`batch` must be an int >= 1, got {batch!r}.")
    if not 0 <= kappa < 1:
        raise ValueError(f"`kappa` must lie in [0, 1), got {kappa!r}.")
    num_queries = check_positive_int(num_queries, "num_queries")  # 0 gave no query, silently
    k_max = num_pieces(n_max, kappa, c_K)
    k_n, k_tasks = jr.split(key)
    n = jr.randint(k_n, (), n_min, n_max + 1)
    num_k = jnp.clip(jnp.ceil(c_K * n.astype(jnp.zeros(()).dtype) ** kappa - 1e-9), 1, k_max)

    def one(k: PRNGKeyArray) -> ICLTask:
        kp, kt = jr.split(k)
        pieces = sample_mixture(kp, D, k_max, kinds=kinds, radius=radius, sep=sep)
        w = (jnp.arange(k_max) < num_k).astype(pieces[0].centre.dtype)
        return sample_task(kt, pieces, n_max + num_queries, num_queries=1, beta=beta, J=J,
                           amplitude=amplitude, sigma=sigma, weights=w / jnp.sum(w))  # fmt: skip

    tasks = jax.vmap(one)(jr.split(k_tasks, batch))
    # the first n_max points are the context, the next num_queries (noisy) ones the queries
    mask = jnp.broadcast_to(jnp.arange(n_max) < n, (batch, n_max))
    return ICLBatch(
        x=tasks.x[:, :n_max],
        y=tasks.y[:, :n_max],
        mask=mask,
        xq=tasks.x[:, n_max:],
        yq=tasks.y[:, n_max:],
        fq=tasks.f[:, n_max:],
        n=n,
    )
