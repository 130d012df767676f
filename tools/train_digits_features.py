"""Train the digits feature network shipped with `jaxgen.metrics` (run once; the weights are
package data, ``jaxgen/metrics/_data/digits_features.eqx``).

Recipe: `jaxgen.metrics.DigitsFeatureNet` on the ``seed=0`` training split of
`jaxgen.data.digits_split` (1437 images, ``pixel / 8 - 1``), cross-entropy with each pixel
jittered by ``U(-1/2, 1/2)`` pixel levels (so that dequantised or slightly noisy generated
digits stay in distribution), AdamW with warm-up and cosine decay (`jaxgen.core.adamw_cosine`,
peak 3e-3, weight decay 1e-4), batch 128, 600 steps, key 0, float32. It prints the held-out
accuracy on the 360 test images (0.9917 for the shipped weights;
tests/metrics/test_metrics_digits.py asserts >= 0.97).

Usage: ``python tools/train_digits_features.py [--steps N] [--out PATH]``.
"""

import argparse
import importlib.resources
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

from jaxgen.core import adamw_cosine, fit, minibatches
from jaxgen.data import digits_split
from jaxgen.metrics import DigitsFeatureNet
from jaxgen.metrics._digits import DIGITS_FEATURES_FILE


def loss(model, batch, key):
    """Cross-entropy on images jittered by U(-1/2, 1/2) pixel levels (1/8 in the input scale)."""
    x, y = batch
    x = x + jr.uniform(key, x.shape, x.dtype, -0.5, 0.5) / 8.0
    logits = jax.vmap(model)(x)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))


@eqx.filter_jit
def predict(model, x):
    """Predicted classes of a batch of images."""
    return jnp.argmax(jax.vmap(model)(x), -1)


def main() -> None:
    """Train, report the held-out accuracy, write the weights."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    default = importlib.resources.files("jaxgen.metrics") / "_data" / DIGITS_FEATURES_FILE
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path(str(default)))
    args = parser.parse_args()
    split = digits_split(seed=0)
    data = (jnp.asarray(split.x_train), jnp.asarray(split.y_train))
    net = DigitsFeatureNet(key=jr.key(0))
    res = fit(
        loss,
        net,
        minibatches(data, 128),
        adamw_cosine(3e-3, args.steps, warmup_steps=args.steps // 20),
        num_steps=args.steps,
        key=jr.key(1),
    )
    acc = float(np.mean(np.asarray(predict(res.model, jnp.asarray(split.x_test))) == split.y_test))
    print(f"final loss {np.mean(res.losses[-50:]):.4f}, held-out accuracy {acc:.4f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    eqx.tree_serialise_leaves(args.out, res.model)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
