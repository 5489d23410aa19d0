"""A small JAX function compiled by XLA, printing its result to the last bit.

Nothing in it knows fusion-dd: XLA reads XLA_FLAGS when it starts, and
fusion-dd hands each trial its passes to disable (--xla_disable_hlo_passes) and
its boolean flags (--xla_allow_excess_precision=false) there. The printed value
changes when a pass rewrites the arithmetic (algebraic simplification
reassociates; with bf16 math, where the intermediates are rounded depends on
float normalization and on whether excess precision is allowed):

    value 2624.939697265625
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def model(x: jax.Array) -> jax.Array:
    y = x.astype(jnp.bfloat16)
    z = (y * y + y).astype(jnp.float32)
    return jnp.sum(jnp.exp(z) / (1.0 + jnp.exp(z)) * 3.0 / 3.0)


def main() -> None:
    x = jnp.asarray(np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32))
    print(f"value {float(model(x))!r}", flush=True)


if __name__ == "__main__":
    main()
