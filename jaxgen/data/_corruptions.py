"""Image corruptions for robustness curves: key-first, values kept in [-1, 1].

Each acts on images ``(..., H, W)`` or flat ``(..., H*W)`` with ``shape=(H, W)`` given, in
[-1, 1]; ``severity`` is the corruption's own scale (noise sd, flip fraction, blur sd in pixels,
contrast factor, occluded side fraction, shift in pixels).
"""

import functools as ft

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ..core.checks import check_finite

CORRUPTIONS = ("gaussian_noise", "salt_pepper", "blur", "contrast", "occlusion", "shift")


def _gaussian_kernel(sigma: float, radius: int) -> Array:
    x = jnp.arange(-radius, radius + 1, dtype=float)
    k = jnp.exp(-(x**2) / (2 * sigma**2))
    return k / jnp.sum(k)


def corrupt(
    key: PRNGKeyArray, images: Float[Array, "... H W"], name: str, severity: float
) -> Float[Array, "... H W"]:
    """Apply corruption ``name`` (see `CORRUPTIONS`) at ``severity`` to images ``(..., H, W)``."""
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; expected one of {CORRUPTIONS}.")
    if not severity >= 0:
        raise ValueError(f"`severity` must be >= 0, got {severity}.")
    x = jnp.asarray(images)
    if x.ndim < 2:
        raise ValueError(f"`images` must have shape (..., H, W), got {x.shape}.")
    # Clipping to [-1, 1] would turn an inf pixel into a plausible one.
    x = check_finite(x, "images")
    return _corrupt(key, x, name, float(severity))


# One compiled program per (name, severity, shape): severities set Python-level sizes (blur
# radius, occluded side, shift range), and op-by-op dispatch costs seconds per eager call.
@ft.partial(jax.jit, static_argnames=("name", "severity"))
def _corrupt(key: PRNGKeyArray, x: Array, name: str, severity: float) -> Array:
    H, W = x.shape[-2:]
    if name == "gaussian_noise":
        out = x + severity * jr.normal(key, x.shape, x.dtype)
    elif name == "salt_pepper":
        k1, k2 = jr.split(key)
        flip = jr.bernoulli(k1, min(severity, 1.0), x.shape)
        salt = jnp.where(jr.bernoulli(k2, 0.5, x.shape), 1.0, -1.0).astype(x.dtype)
        out = jnp.where(flip, salt, x)
    elif name == "blur":
        if severity == 0:
            return x
        radius = max(1, int(3 * severity + 0.5))
        k = _gaussian_kernel(severity, radius).astype(x.dtype)
        pad = [(0, 0)] * (x.ndim - 2) + [(radius, radius), (radius, radius)]
        xp = jnp.pad(x, pad, mode="edge")
        rows = sum(k[i] * xp[..., i : i + H, :] for i in range(2 * radius + 1))
        out = sum(k[i] * rows[..., :, i : i + W] for i in range(2 * radius + 1))
    elif name == "contrast":
        mean = jnp.mean(x, axis=(-2, -1), keepdims=True)
        out = mean + severity * (x - mean)
    elif name == "occlusion":
        side_h, side_w = int(round(severity * H)), int(round(severity * W))
        k1, k2 = jr.split(key)
        top = jr.randint(k1, x.shape[:-2], 0, H - side_h + 1)
        left = jr.randint(k2, x.shape[:-2], 0, W - side_w + 1)
        lead = (1,) * (x.ndim - 2)
        rows = jnp.arange(H).reshape(lead + (H, 1))
        cols = jnp.arange(W).reshape(lead + (1, W))
        inside = (
            (rows >= top[..., None, None])
            & (rows < top[..., None, None] + side_h)
            & (cols >= left[..., None, None])
            & (cols < left[..., None, None] + side_w)
        )
        out = jnp.where(inside, -1.0, x)
    else:  # shift, with edge padding
        s = int(round(severity))
        if s == 0:
            return x
        k1, k2 = jr.split(key)
        dy, dx = jr.randint(k1, (), -s, s + 1), jr.randint(k2, (), -s, s + 1)
        pad = [(0, 0)] * (x.ndim - 2) + [(s, s), (s, s)]
        xp = jnp.pad(x, pad, mode="edge")
        out = jax.lax.dynamic_slice_in_dim(
            jax.lax.dynamic_slice_in_dim(xp, s + dy, H, axis=x.ndim - 2), s + dx, W, axis=x.ndim - 1
        )
    return jnp.clip(out, -1.0, 1.0)
