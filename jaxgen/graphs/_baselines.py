r"""Baseline graphon estimators that a user compares srGW against. Each returns $\hat P \in
[0, 1]^{n \times n}$ for one symmetric adjacency matrix.

References:
    Chatterjee. Matrix estimation by universal singular value thresholding. Ann. Stat. 2015.
    Xu. Rates of convergence of spectral methods for graphon estimation. ICML 2018.
    Chan, Airoldi. A consistent histogram estimator for exchangeable graph models. ICML 2014.
    Olhede, Wolfe. Network histograms and universality of blockmodel approximation. PNAS 2014.
    Chambolle. An algorithm for total variation minimization and applications. JMIV 2004.
"""

import math
from typing import Literal

import jax
import jax.numpy as jnp
import jax.random as jr
from jax.scipy.special import xlogy

from jaxgen.core.checks import (
    check_finite,
    check_floating,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_rank,
)
from jaxgen.core.types import Array, Float, Int, PRNGKeyArray

from ._estimate import check_adjacency


def usvt(
    A: Float[Array, "n n"], *, eta: float = 0.01, regime: Literal["dense", "sparse"] = "dense"
) -> Float[Array, "n n"]:
    r"""Universal singular value thresholding.

    Keep the singular values of $A$ (the $|\lambda|$ of the symmetric $A$) that are at least
    $(2 + \eta)\sqrt n$ (``"dense"``, Chatterjee 2015) or $(1 + \eta)\kappa\sqrt{n\hat\rho}$ with
    $\hat\rho$ the edge density and $\kappa = 4$ if $n\hat\rho < \log n$ else $2$ (``"sparse"``,
    Xu 2018), reconstruct and clip to $[0, 1]$.
    """
    A = check_adjacency(A, allow_self_loops=True)
    eta = check_nonnegative(eta, "eta")
    n = A.shape[0]
    if regime == "dense":
        thresh = (2.0 + eta) * jnp.sqrt(jnp.asarray(n, A.dtype))
    elif regime == "sparse":
        rho = jnp.sum(A) / (n * (n - 1))
        kappa = jnp.where(n * rho < jnp.log(n), 4.0, 2.0)
        thresh = (1.0 + eta) * kappa * jnp.sqrt(n * rho)
    else:
        raise ValueError(f"`regime` must be 'dense' or 'sparse', got {regime!r}.")
    evals, evecs = jnp.linalg.eigh(A)
    keep = jnp.where(jnp.abs(evals) >= thresh, evals, 0.0)
    return jnp.clip((evecs * keep[None, :]) @ evecs.T, 0.0, 1.0)


def tv_denoise(
    image: Float[Array, "r c"], weight: float, *, num_steps: int = 200
) -> Float[Array, "r c"]:
    r"""Isotropic total-variation denoising by Chambolle's dual projection algorithm.

    Solves $\min_u \frac{\text{weight}}{2}\|u - f\|^2 + \mathrm{TV}(u)$ (the convention of
    scikit-image's `denoise_tv_bregman`: a larger weight means less smoothing) with a fixed
    number of dual steps of size 1/8.
    """
    image = check_rank(image, 2, "image", layout="(r, c)")
    image = check_finite(check_floating(image, "image"), "image")
    weight = check_positive(weight, "weight")
    lam = 1.0 / weight
    tau = 0.125

    def grad(u: Array) -> tuple[Array, Array]:
        gx = jnp.concatenate([u[1:] - u[:-1], jnp.zeros_like(u[:1])], axis=0)
        gy = jnp.concatenate([u[:, 1:] - u[:, :-1], jnp.zeros_like(u[:, :1])], axis=1)
        return gx, gy

    def div(px: Array, py: Array) -> Array:
        dx = (
            jnp.concatenate([px[:1], px[1:-1] - px[:-2], -px[-2:-1]], axis=0)
            if px.shape[0] > 1
            else jnp.zeros_like(px)
        )
        dy = (
            jnp.concatenate([py[:, :1], py[:, 1:-1] - py[:, :-2], -py[:, -2:-1]], axis=1)
            if py.shape[1] > 1
            else jnp.zeros_like(py)
        )
        return dx + dy

    def body(_: Array, p: tuple[Array, Array]) -> tuple[Array, Array]:
        px, py = p
        gx, gy = grad(div(px, py) - image / lam)
        norm = 1.0 + tau * jnp.sqrt(gx**2 + gy**2)
        return (px + tau * gx) / norm, (py + tau * gy) / norm

    p0 = (jnp.zeros_like(image), jnp.zeros_like(image))
    px, py = jax.lax.fori_loop(0, num_steps, body, p0)
    return image - lam * div(px, py)


def sas(
    A: Float[Array, "n n"], *, h: int | None = None, tv_weight: float = 15.0
) -> Float[Array, "n n"]:
    r"""Sorting-and-smoothing (Chan & Airoldi 2014).

    Sort the nodes by degree (descending), average $A$ over $h\times h$ blocks (default
    $h = \lfloor\log n\rfloor$), denoise the block matrix by total variation (weight
    ``tv_weight`` $= 2\mu$ with $\mu = 7.5$, as pygraphon does) and expand back to the nodes.
    Consistent only when the degree function of the graphon is strictly monotone.
    """
    A = check_adjacency(A, allow_self_loops=True)
    n = A.shape[0]
    h = max(int(math.log(n)), 1) if h is None else int(h)
    if not 1 <= h <= n:
        raise ValueError(f"`h` must satisfy 1 <= h <= n = {n}, got {h}.")
    nb = -(-n // h)
    order = jnp.argsort(-jnp.sum(A, axis=1))
    rank = jnp.zeros(n, dtype=jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
    block = rank // h
    Z = jax.nn.one_hot(block, nb, dtype=A.dtype)
    counts = jnp.sum(Z, 0)
    H = (Z.T @ A @ Z) / (counts[:, None] * counts[None, :])
    H = tv_denoise(H, tv_weight)
    return jnp.clip(H[block][:, block], 0.0, 1.0)


def _block_loglik(E: Array, N: Array) -> Array:
    p = E / jnp.where(N > 0, N, 1.0)
    return jnp.sum(xlogy(E, p) + xlogy(N - E, 1.0 - p))


def network_histogram(
    key: PRNGKeyArray, A: Float[Array, "n n"], K: int, *, sweeps: int = 5
) -> tuple[Float[Array, "n n"], Int[Array, " n"]]:
    r"""Network histogram (Olhede & Wolfe 2014): a $K$-block SBM with (near) equal block sizes.

    Nodes are ordered by the Fiedler vector of the graph Laplacian and cut into $K$ consecutive
    groups of size $\lceil n/K\rceil$; then ``sweeps`` x $n$ random node swaps between blocks are
    proposed and kept when they raise the Bernoulli block log-likelihood
    $\sum_{a \le b} E_{ab}\log\hat p_{ab} + (N_{ab} - E_{ab})\log(1 - \hat p_{ab})$. Swaps keep
    the block sizes; each costs $O(nK + K^2)$ with $A Z$ and $E = Z^\top A Z$ updated in place.

    Returns:
        ``(P_hat, labels)``.
    """
    A = check_adjacency(A, allow_self_loops=True)
    n = A.shape[0]
    if not isinstance(K, int) or not 1 <= K <= n:
        raise ValueError(f"`K` must be an int with 1 <= K <= n = {n}, got {K!r}.")
    check_positive_int(sweeps, "sweeps")
    size = -(-n // K)
    L = jnp.diag(jnp.sum(A, 1)) - A
    _, evecs = jnp.linalg.eigh(L)
    order = jnp.argsort(evecs[:, 1] if n > 1 else evecs[:, 0])
    z = jnp.zeros(n, dtype=jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32) // size)
    Z = jax.nn.one_hot(z, K, dtype=A.dtype)
    sizes = jnp.sum(Z, 0)
    N = sizes[:, None] * sizes[None, :] - jnp.diag(sizes)
    AZ = A @ Z
    E = Z.T @ AZ
    num = sweeps * n
    key_i, key_j = jr.split(key)
    ii = jr.randint(key_i, (num,), 0, n)
    jj = jr.randint(key_j, (num,), 0, n)

    def body(
        t: Array, carry: tuple[Array, Array, Array, Array]
    ) -> tuple[Array, Array, Array, Array]:
        z, AZ, E, ll = carry
        i, j = ii[t], jj[t]
        a, b = z[i], z[j]
        delta = jax.nn.one_hot(b, K, dtype=A.dtype) - jax.nn.one_hot(a, K, dtype=A.dtype)
        v = AZ[i] - AZ[j]
        c = A[i, i] + A[j, j] - 2.0 * A[i, j]
        E_new = (
            E
            + delta[:, None] * v[None, :]
            + v[:, None] * delta[None, :]
            + c * delta[:, None] * delta[None, :]
        )
        ll_new = _block_loglik(E_new, N)
        accept = (a != b) & (ll_new > ll)
        z = jnp.where(accept, z.at[i].set(b).at[j].set(a), z)
        AZ = jnp.where(accept, AZ + (A[:, i] - A[:, j])[:, None] * delta[None, :], AZ)
        return z, AZ, jnp.where(accept, E_new, E), jnp.where(accept, ll_new, ll)

    z, _, E, _ = jax.lax.fori_loop(0, num, body, (z, AZ, E, _block_loglik(E, N)))
    p = E / jnp.where(N > 0, N, 1.0)
    return p[z][:, z], z
