r"""Joint energy-based models from classifier logits: energies, SGLD, a replay buffer, the JEM loss.

A classifier :math:`f: R^D \to R^C` defines :math:`E(x, y) = -f(x)_y` and
:math:`E(x) = -\log\sum_y e^{f(x)_y}`, so :math:`\log p(y|x) = E(x) - E(x, y)` and
:math:`p(x) \propto e^{-E(x)}` (Grathwohl et al. 2020). The generative term
:math:`L_{gen} = \bar E(x_{data}) - \bar E(x')` with model samples :math:`x'` (stop-gradient) from
short-run SGLD started at a replay buffer has the gradient of :math:`-\log p(x)`. One mixing
coefficient moves training from cross-entropy to the likelihood: additive
:math:`L = L_{CE} + \lambda(L_{gen} + \gamma L_{reg})` or convex
:math:`(1-\alpha)L_{CE} + \alpha(L_{gen} + \gamma L_{reg})`.

References:
    Grathwohl et al., Your classifier is secretly an energy based model (JEM), ICLR 2020;
    Du & Mordatch 2019 (energy regulariser); Welling & Teh 2011 (SGLD).
"""

import abc
import functools as ft
import math
from collections.abc import Callable
from typing import Any, NamedTuple, Unpack

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from ..core import FitOptions, FitResult, check_fit_options, fit, minibatches
from ..core.checks import check_finite, check_module, check_positive_int

MODES = ("additive", "convex")


def energy_marginal(logits: Float[ArrayLike, "... C"]) -> Float[Array, "..."]:
    """``E(x) = -logsumexp_y f(x)_y`` over the last axis (stable), any leading axes.

    Raises:
        ValueError: when ``logits`` has no class axis or no classes (``C = 0``).
    """
    logits = jnp.asarray(logits)
    if logits.ndim < 1 or logits.shape[-1] < 1:
        raise ValueError(f"`logits` must have shape (..., C) with C >= 1, got {logits.shape}.")
    return -jax.nn.logsumexp(logits, axis=-1)


def energy_joint(
    logits: Float[ArrayLike, "... C"], y: Int[ArrayLike, "..."]
) -> Float[Array, "..."]:
    """``E(x, y) = -f(x)_y``; ``y`` has the leading shape of ``logits``.

    ``logits`` must be finite (a value check: an inf elsewhere in a row would otherwise go
    unnoticed); the JEM loss calls the body without it (its loss is checked as a whole).
    """
    return _energy_joint(check_finite(logits, "logits"), y)


def _energy_joint(logits: ArrayLike, y: ArrayLike) -> Array:
    # The body of `energy_joint` (shape and label checks only).
    logits, y = jnp.asarray(logits), jnp.asarray(y)
    if y.shape != logits.shape[:-1]:
        raise ValueError(f"`y` must have shape {logits.shape[:-1]}, got {y.shape}.")
    C = logits.shape[-1]
    y = eqx.error_if(y, jnp.any((y < 0) | (y >= C)), f"`y` must lie in [0, C={C}).")
    return -jnp.take_along_axis(logits, y[..., None], axis=-1)[..., 0]


def sgld(
    key: PRNGKeyArray,
    energy_fn: Callable[[Array], Array],
    x0: Float[Array, "B D"],
    *,
    num_steps: int = 20,
    step_size: float = 1.0,
    noise: float = 0.01,
    clip: tuple[float, float] | None = (-1.0, 1.0),
    proper: bool = False,
) -> Float[Array, "B D"]:
    r"""Short-run stochastic-gradient Langevin dynamics, one ``lax.scan`` over steps.

    ``x <- x - step_size grad E(x) + noise xi`` (the JEM heuristic: step and noise decoupled),
    or with ``proper=True`` ``x <- x - step_size grad E(x) + sqrt(2 step_size) xi`` (an Euler-
    Maruyama step of the Langevin SDE whose stationary law is ``exp(-E)``; ``noise`` ignored);
    then clipped to ``clip`` unless ``None``.

    Args:
        key: PRNG key of the noise.
        energy_fn: maps ONE sample ``(D,)`` to a scalar energy.
        x0: starting points ``(B, D)``.
        num_steps: K >= 1.
        step_size: > 0.
        noise: sd of the added noise (JEM form), >= 0.
        clip: ``(low, high)`` with low < high, or ``None``.
        proper: use the Langevin noise scale.

    Returns:
        The chains after ``num_steps`` steps, ``(B, D)``.
    """
    if not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"`num_steps` must be an int >= 1, got {num_steps!r}.")
    if not step_size > 0:
        raise ValueError(f"`step_size` must be > 0, got {step_size}.")
    if not noise >= 0:
        raise ValueError(f"`noise` must be >= 0, got {noise}.")
    if clip is not None and not clip[0] < clip[1]:
        raise ValueError(f"`clip` must be (low, high) with low < high, got {clip}.")
    if x0.ndim != 2:
        raise ValueError(f"`x0` must have shape (B, D), got {x0.shape}.")
    sd = (2 * step_size) ** 0.5 if proper else noise
    grad = jax.vmap(jax.grad(energy_fn))

    def step(x: Array, k: PRNGKeyArray) -> tuple[Array, None]:
        x = x - step_size * grad(x) + sd * jr.normal(k, x.shape, x.dtype)
        if clip is not None:
            x = jnp.clip(x, clip[0], clip[1])
        return x, None

    x, _ = jax.lax.scan(step, x0, jr.split(key, num_steps))
    return x


class ReplayBuffer(eqx.Module):
    """A functional replay buffer of SGLD chain states (JEM's persistent short-run chains).

    Attributes:
        data: the stored states ``(size, dim)``.
        num_classes: ``None`` (unconditional) or C: rows ``[y size/C, (y+1) size/C)`` hold the
            chains of class y.
        low, high: the uniform law of fresh (re-initialised) rows.
    """

    data: Float[Array, "N D"]
    num_classes: int | None = eqx.field(static=True)
    low: float = eqx.field(static=True)
    high: float = eqx.field(static=True)

    def __check_init__(self):
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(
                f"`low` and `high` must be finite with low < high, got {self.low} and {self.high}."
            )
        if self.num_classes is not None:
            check_positive_int(self.num_classes, "num_classes")

    def sample(
        self,
        key: PRNGKeyArray,
        batch_size: int,
        *,
        y: Int[Array, " B"] | None = None,
        reinit_freq: float = 0.05,
    ) -> tuple[Float[Array, "B D"], Int[Array, " B"]]:
        """Draw ``batch_size`` rows (row i from class ``y[i]``'s block if ``y``); each is replaced
        by a fresh ``U(low, high)`` draw with probability ``reinit_freq``. Returns ``(x0, idx)``.
        """
        if not 0.0 <= reinit_freq <= 1.0:
            raise ValueError(f"`reinit_freq` must lie in [0, 1], got {reinit_freq}.")
        if y is not None and self.num_classes is None:
            raise ValueError("`y` given for an unconditional buffer (num_classes=None).")
        k_idx, k_re, k_new = jr.split(key, 3)
        size, dim = self.data.shape
        if y is None:
            idx = jr.randint(k_idx, (batch_size,), 0, size)
        else:
            if y.shape != (batch_size,):
                raise ValueError(f"`y` must have shape ({batch_size},), got {y.shape}.")
            block = size // self.num_classes  # type: ignore[operator]
            y = eqx.error_if(y, jnp.any((y < 0) | (y >= self.num_classes)), "`y` out of range.")
            idx = y * block + jr.randint(k_idx, (batch_size,), 0, block)
        fresh = jr.uniform(k_new, (batch_size, dim), self.data.dtype, self.low, self.high)
        reinit = jr.bernoulli(k_re, reinit_freq, (batch_size, 1))
        return jnp.where(reinit, fresh, self.data[idx]), idx

    def update(self, idx: Int[Array, " B"], x: Float[Array, "B D"]) -> "ReplayBuffer":
        """The buffer with rows ``idx`` replaced by ``x``."""
        return eqx.tree_at(lambda b: b.data, self, self.data.at[idx].set(x.astype(self.data.dtype)))


def init_replay_buffer(
    key: PRNGKeyArray,
    size: int,
    dim: int,
    *,
    num_classes: int | None = None,
    low: float = -1.0,
    high: float = 1.0,
    dtype: Any = None,
) -> ReplayBuffer:
    """A buffer of ``size`` rows drawn ``U(low, high)^dim``."""
    if not isinstance(size, int) or size < 1 or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"`size` and `dim` must be ints >= 1, got {size!r} and {dim!r}.")
    if num_classes is not None and size % num_classes:
        raise ValueError(
            f"buffer `size` ({size}) must be divisible by `num_classes` ({num_classes})."
        )
    if not low < high:
        raise ValueError(f"need low < high, got {low} and {high}.")
    data = jr.uniform(key, (size, dim), dtype or jnp.result_type(float), low, high)
    return ReplayBuffer(data, num_classes, float(low), float(high))


class JEMConfig(NamedTuple):
    """The mixing coefficient and the SGLD / buffer / data settings.

    Attributes:
        mix: lambda >= 0 (additive) or alpha in [0, 1] (convex); 0 is plain cross-entropy.
        mode: ``"additive"`` or ``"convex"``.
        gamma_reg: weight of the energy-magnitude penalty inside the generative term.
        num_steps, step_size, noise, clip: SGLD (JEM form).
        reinit_freq: buffer re-initialisation probability.
        data_noise: sd of Gaussian noise added to data inputs.
        loss_guard: |loss| above this stops training with an error (JEM's restart guard).
    """

    mix: float
    mode: str = "additive"
    gamma_reg: float = 0.0
    num_steps: int = 20
    step_size: float = 1.0
    noise: float = 0.01
    clip: tuple[float, float] | None = (-1.0, 1.0)
    reinit_freq: float = 0.05
    data_noise: float = 0.03
    loss_guard: float = 1e8


def _check_config(config: JEMConfig) -> None:
    if config.mode not in MODES:
        raise ValueError(f"`mode` must be one of {MODES}, got {config.mode!r}.")
    if config.mix < 0 or (config.mode == "convex" and config.mix > 1):
        raise ValueError(f"`mix` must be >= 0 (<= 1 in convex mode), got {config.mix}.")


class AbstractClassifier(eqx.Module):
    """The classifier slot of JEM: logits of ONE flat sample, ``model(x (D,)) -> (C,)``.

    The energies are read from the logits (``E(x, y) = -f(x)[y]``, ``E(x) = -logsumexp f(x)``),
    so any subclass trains with `jem_loss` / `fit_jem` and samples with `sgld` on its energy.
    """

    @abc.abstractmethod
    def __call__(self, x: Float[Array, " D"]) -> Float[Array, " C"]:
        """Logits of one sample."""


def jem_loss(
    model: AbstractClassifier,
    x: Float[Array, "B D"],
    y: Int[Array, " B"],
    x_neg: Float[Array, "B D"],
    config: JEMConfig,
) -> tuple[Float[Array, ""], dict[str, Array]]:
    """The JEM objective on data ``(x, y)`` and model samples ``x_neg`` (stop-gradient).

    ``model`` (an `AbstractClassifier`) maps ONE sample to logits. Returns ``(loss, aux)`` with
    ``ce``, ``gen``, ``reg``, ``e_pos``, ``e_neg``; deterministic.
    """
    check_module(model, AbstractClassifier, "model")
    _check_config(config)
    logits = jax.vmap(model)(x)
    ce = jnp.mean(_energy_joint(logits, y) - energy_marginal(logits))
    e_pos = energy_marginal(logits)
    e_neg = energy_marginal(jax.vmap(model)(jax.lax.stop_gradient(x_neg)))
    gen = jnp.mean(e_pos) - jnp.mean(e_neg)
    reg = jnp.mean(e_pos**2) + jnp.mean(e_neg**2)
    generative = gen + config.gamma_reg * reg
    if config.mode == "additive":
        loss = ce + config.mix * generative
    else:
        loss = (1 - config.mix) * ce + config.mix * generative
    aux = {"ce": ce, "gen": gen, "reg": reg, "e_pos": jnp.mean(e_pos), "e_neg": jnp.mean(e_neg)}
    return loss, aux


def _jem_step_loss(model, batch, key, buffer, *, config: JEMConfig):
    """One fit step: data noise, buffer draw, SGLD, loss, write-back (buffer = carried state)."""
    x, y = batch
    k_noise, k_buf, k_sgld = jr.split(key, 3)
    x = x + config.data_noise * jr.normal(k_noise, x.shape, x.dtype)
    if config.mix == 0:  # static branch: plain cross-entropy, no sampling
        loss, _ = jem_loss(model, x, y, x, config)
        return _guard(loss, config), buffer
    x0, idx = buffer.sample(k_buf, x.shape[0], reinit_freq=config.reinit_freq)

    def energy(z):
        return energy_marginal(model(z))

    x_neg = sgld(k_sgld, energy, x0, num_steps=config.num_steps, step_size=config.step_size,
                 noise=config.noise, clip=config.clip)  # fmt: skip
    x_neg = jax.lax.stop_gradient(x_neg)
    loss, aux = jem_loss(model, x, y, x_neg, config)
    loss = eqx.error_if(
        loss, ~(jnp.isfinite(aux["e_pos"]) & jnp.isfinite(aux["e_neg"])),
        "JEM energies became non-finite: lower step_size or mix, or raise gamma_reg.",
    )  # fmt: skip
    return _guard(loss, config), buffer.update(idx, x_neg)


def _guard(loss: Array, config: JEMConfig) -> Array:
    return eqx.error_if(
        loss,
        ~(jnp.abs(loss) <= config.loss_guard),
        "JEM loss diverged (|loss| > loss_guard or NaN): lower step_size or mix, raise gamma_reg.",
    )


class JEMResult(FitResult):
    """`fit_jem` output: `jaxgen.core.FitResult` plus the final replay buffer.

    Attributes:
        buffer: the replay buffer after the last step (also ``state``).
    """

    buffer: ReplayBuffer | None = None


def fit_jem(
    model: AbstractClassifier,
    data: tuple[Float[ArrayLike, "N D"], Int[ArrayLike, " N"]],
    config: JEMConfig,
    *,
    key: PRNGKeyArray,
    num_steps: int,
    batch_size: int,
    buffer_size: int,
    optimizer: optax.GradientTransformation | None = None,
    **fit_options: Unpack[FitOptions],
) -> JEMResult:
    """Train a classifier on the JEM objective through `jaxgen.core.fit`.

    The replay buffer is fit's carried state: data noise, buffer draw, SGLD, loss and write-back
    are one compiled step, and the buffer is checkpointed and resumed with the model.
    ``config.mix == 0`` is plain cross-entropy (no SGLD, the buffer untouched).

    Args:
        model: a one-sample classifier ``(D,) -> (C,)`` logits: any `AbstractClassifier`
            (`MLPClassifier`, `ConvClassifier` or your own subclass).
        data: the arrays ``(x, y)``: images ``(N, D)`` scaled to ``[-1, 1]`` and labels ``(N,)``
            (arrays only: JEM reads them to check the range and size the buffer); each step
            draws ``batch_size`` rows (`jaxgen.core.minibatches`).
        config: `JEMConfig`.
        key: PRNG key of the run (buffer initialisation and the steps).
        num_steps: optimiser steps.
        batch_size: rows per step.
        buffer_size: replay-buffer size.
        optimizer: default ``optax.adam(1e-3)``.
        **fit_options: `jaxgen.core.FitOptions`, forwarded to `jaxgen.core.fit`.

    Returns:
        `JEMResult`: the `jaxgen.core.FitResult` fields and ``buffer``.
    """
    check_fit_options(fit_options)
    check_module(model, AbstractClassifier, "model")
    _check_config(config)
    if callable(data) or not isinstance(data, tuple | list) or len(data) != 2:
        raise TypeError(f"`data` must be the arrays (x, y), got {type(data).__name__}.")
    x, y = jnp.asarray(data[0]), jnp.asarray(data[1])
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"`x` (N, D) and `y` (N,) expected, got {x.shape} and {y.shape}.")
    x = eqx.error_if(x, jnp.any((x < -1) | (x > 1)), "images must lie in [-1, 1] (scale them).")
    if optimizer is None:
        optimizer = optax.adam(1e-3)
    k_buf, k_fit = jr.split(key)
    buffer = init_replay_buffer(k_buf, buffer_size, x.shape[1], dtype=x.dtype)
    loss = ft.partial(_jem_step_loss, config=config)
    res = fit(loss, model, minibatches((x, y), batch_size), optimizer, num_steps=num_steps,
              key=k_fit, state=buffer, **fit_options)  # fmt: skip
    return JEMResult.extend(res, buffer=res.state)


class MLPClassifier(AbstractClassifier):
    """``in_dim -> width x depth -> num_classes`` with SiLU, no normalisation (one sample)."""

    layers: tuple[eqx.nn.Linear, ...]

    def __init__(
        self, in_dim: int, num_classes: int, *, width: int = 256, depth: int = 2, key: PRNGKeyArray
    ):
        check_positive_int(in_dim, "in_dim")
        check_positive_int(num_classes, "num_classes")
        check_positive_int(width, "width")
        check_positive_int(depth, "depth", minimum=0)
        sizes = [in_dim] + [width] * depth + [num_classes]
        keys = jr.split(key, len(sizes) - 1)
        self.layers = tuple(
            eqx.nn.Linear(a, b, key=k) for a, b, k in zip(sizes[:-1], sizes[1:], keys, strict=True)
        )

    def features(self, x: Float[Array, " D"]) -> Float[Array, " width"]:
        """Penultimate activations (for linear probes and feature distances)."""
        for layer in self.layers[:-1]:
            x = jax.nn.silu(layer(x))
        return x

    def __call__(self, x: Float[Array, " D"]) -> Float[Array, " C"]:
        """Logits of one sample."""
        return self.layers[-1](self.features(x))


class ConvClassifier(AbstractClassifier):
    """A small 8x8 conv net: conv3x3(32)-SiLU-conv3x3(64)-SiLU-mean pool-Linear (flat input)."""

    conv1: eqx.nn.Conv2d
    conv2: eqx.nn.Conv2d
    head: eqx.nn.Linear
    side: int = eqx.field(static=True)

    def __init__(self, num_classes: int, *, side: int = 8, key: PRNGKeyArray):
        check_positive_int(num_classes, "num_classes")
        check_positive_int(side, "side")
        k1, k2, k3 = jr.split(key, 3)
        self.conv1 = eqx.nn.Conv2d(1, 32, 3, padding=1, key=k1)
        self.conv2 = eqx.nn.Conv2d(32, 64, 3, padding=1, key=k2)
        self.head = eqx.nn.Linear(64, num_classes, key=k3)
        self.side = side

    def features(self, x: Float[Array, " D"]) -> Float[Array, " 64"]:
        """Pooled features of one flat image ``(side * side,)``."""
        h = jnp.reshape(x, (1, self.side, self.side))
        h = jax.nn.silu(self.conv2(jax.nn.silu(self.conv1(h))))
        return jnp.mean(h, axis=(1, 2))

    def __call__(self, x: Float[Array, " D"]) -> Float[Array, " C"]:
        """Logits of one flat image."""
        return self.head(self.features(x))
