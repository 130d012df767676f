"""Peer wrappers shared by the benchmarks: torch MLP velocity fields trained with torchcfm.

Each benchmark keeps its experiment (data, evaluation, what it reports); the torch side of a
flow-matching peer (the network, the training loop, Euler sampling, thread settings) lives here
once, so that every torchcfm number in the benchmarks comes from the same code. The velocity
network takes ``[t, x, cond]`` (time first) in every peer.
"""

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Any


def import_torchcfm() -> tuple[Any, Any] | None:
    """``(torch, torchcfm.conditional_flow_matching)``, or ``None`` if either is missing."""
    try:
        import torch
        from torchcfm import conditional_flow_matching
    except Exception:  # noqa: BLE001 - any import failure means the peer is unavailable
        return None
    return torch, conditional_flow_matching


@contextlib.contextmanager
def torch_threads(num: int = 1, seed: int = 0) -> Iterator[None]:
    """Seed torch and run it on ``num`` threads (OpenMP spin-waits collapse on a loaded CPU that
    the JAX arms share), restoring the thread count afterwards.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(num)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def torch_mlp(in_size: int, out_size: int, width: int, depth: int, *, double: bool = False) -> Any:
    """``depth`` hidden layers of ``width`` with SiLU (the jaxgen MLP velocity fields' shape)."""
    import torch

    layers, size = [], in_size
    for _ in range(depth):
        layers += [torch.nn.Linear(size, width), torch.nn.SiLU()]
        size = width
    net = torch.nn.Sequential(*layers, torch.nn.Linear(size, out_size))
    return net.double() if double else net


def velocity_input(t: Any, x: Any, cond: Any = None) -> Any:
    """The network input ``[t, x, cond]`` of a batch (``t`` of shape (B,) or (B, 1))."""
    import torch

    t = t[:, None] if t.ndim == 1 else t
    return torch.cat([t, x] + ([] if cond is None else [cond]), -1)


def warmup_cosine(num_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """Learning-rate factor of step ``i``: linear warm-up, then cosine decay to 0 (as
    `jaxgen.core.adamw_cosine`).
    """
    warm = max(warmup_steps, 1)

    def factor(i: int) -> float:
        if i < warm:
            return (i + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (i - warm) / max(num_steps - warm, 1)))

    return factor


def cosine(num_steps: int) -> Callable[[int], float]:
    """Learning-rate factor of step ``i``: cosine decay to 0 over ``num_steps`` (no warm-up)."""
    return lambda i: 0.5 * (1 + math.cos(math.pi * min(i, num_steps) / num_steps))


def torchcfm_train(
    net: Any,
    matcher: Any,
    draw: Callable[[int], tuple[Any, Any, Any]],
    num_steps: int,
    *,
    lr: float,
    weight_decay: float = 1e-4,
    schedule: Callable[[int], float] | None = None,
    clip_norm: float | None = 1.0,
    reduce: str = "sum",
) -> list[float]:
    """Train ``net`` on a torchcfm matcher's conditional flow-matching loss with AdamW.

    Args:
        net: the torch velocity network, input `velocity_input`.
        matcher: a torchcfm matcher (``ConditionalFlowMatcher(sigma=0.0)``, exact OT, SB).
        draw: ``draw(step) -> (x0, x1, cond or None)`` torch tensors of one batch.
        num_steps: optimiser steps.
        lr: peak learning rate.
        weight_decay: AdamW decoupled weight decay (0: Adam).
        schedule: learning-rate factor of the step (`warmup_cosine`, `cosine`), or constant.
        clip_norm: global gradient-norm clip, or ``None``.
        reduce: ``"sum"`` (squared error summed over coordinates, averaged over the batch) or
            ``"mean"`` (averaged over both).

    Returns:
        The wall-clock seconds of every step.
    """
    import torch

    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    sched = None if schedule is None else torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    times = []
    for i in range(num_steps):
        start = time.perf_counter()
        x0, x1, cond = draw(i)
        t, xt, ut = matcher.sample_location_and_conditional_flow(x0, x1)
        err = (net(velocity_input(t, xt, cond)) - ut) ** 2
        loss = err.sum(-1).mean() if reduce == "sum" else err.mean()
        opt.zero_grad()
        loss.backward()
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip_norm)
        opt.step()
        if sched is not None:
            sched.step()
        times.append(time.perf_counter() - start)
    return times


def torch_euler(net: Any, x: Any, num_steps: int, cond: Any = None) -> Any:
    """Euler integration of ``dx/dt = net([t, x, cond])`` from t = 0 to 1 in ``num_steps``."""
    import torch

    with torch.no_grad():
        for i in range(num_steps):
            t = torch.full((x.shape[0], 1), i / num_steps, dtype=x.dtype)
            x = x + net(velocity_input(t, x, cond)) / num_steps
    return x
