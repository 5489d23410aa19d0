"""A bf16 matrix product compiled by XLA on CPU, printing its result to the last bit.

XLA:CPU has no bf16 dot kernel: its ``float-normalization-bf16`` pass rewrites
the dot to compute in f32. Switched off, the program does not compile
(``RET_CHECK failure ... dot_op_emitter.cc``), so the all-off baseline of a
search with that pass among its candidates cannot run: fusion-dd finds it
required, keeps it on, and searches the other candidates (see README.md here):

    value 2496.621826171875
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def model(x: jax.Array, w: jax.Array) -> jax.Array:
    h = jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16))
    z = (h * h + h).astype(jnp.float32)
    return jnp.sum(jnp.exp(z) / (1.0 + jnp.exp(z)) * 3.0 / 3.0)


def main() -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(64, 64)).astype(np.float32))
    w = jnp.asarray(rng.normal(size=(64, 64)).astype(np.float32) * 0.1)
    print(f"value {float(model(x, w))!r}", flush=True)


if __name__ == "__main__":
    main()
