"""One training run of the demo network, in-process.

``run_training`` is what ``python -m fusion_dd.demo.train`` calls and what the
tests call directly (no subprocess, no files): it compiles the three graphs
(training step, optimizer, evaluation) through the fusion pipeline with the
rules a switch decision allows, trains for a fixed number of steps and returns
the per-step losses, the held-out accuracy and the fusion statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .data import DataSpec, make_data
from .graph_executor import Program
from .graph import Graph
from .network import (
    NetSpec,
    build_eval_graph,
    build_optimizer_graph,
    build_train_graph,
    param_specs,
)
from .passes_autofuse import AUTOFUSE_OFF, AutoFuseSwitch
from .pipeline import Faults, FusionStats, RuleDecision, compile_graph


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines one training, apart from the fusion decisions."""

    steps: int = 120
    batch: int = 128
    lr: float = 0.1
    warmup: int = 10
    seed: int = 0
    noise: float = 0.0
    repeat: int = 0
    log_every: int = 10
    net: NetSpec = field(default_factory=NetSpec)
    data: DataSpec = field(default_factory=DataSpec)


@dataclass
class TrainResult:
    """What one training produced.

    ``weights`` (the final flat parameters) and ``outputs`` (the evaluation
    graph's log-probabilities) let tests see any numerical difference between two
    runs, even one too small to move the accuracy.
    """

    losses: list[tuple[int, float]]
    accuracy: float
    stats: dict[str, FusionStats]
    weights: np.ndarray
    outputs: np.ndarray
    #: Kernels one training step launches (the compiled training and optimizer graphs):
    #: what the demo's simulated step time is made of (see :func:`simulated_samples_per_second`).
    kernels: int = 0


class _Parameters:
    """Flat fp32 master weights, gradients and momentum, with per-tensor views.

    The optimizer graph works on the flat buffers (and ApplyMomentum edits them in
    place); the training graph is fed the per-tensor views of the same memory.
    """

    def __init__(
        self, config: TrainConfig, rng: np.random.Generator, jitter: np.random.Generator | None
    ) -> None:
        specs = param_specs(config.net)
        sizes = [int(np.prod(p.shape)) for p in specs]
        self.weights = np.zeros(sum(sizes), np.float32)
        self.grads = np.zeros_like(self.weights)
        self.momentum = np.zeros_like(self.weights)
        self.views: dict[str, np.ndarray] = {}
        self.grad_views: dict[str, np.ndarray] = {}
        offset = 0
        for p, size in zip(specs, sizes):
            view = self.weights[offset : offset + size].reshape(p.shape)
            if p.init == "ones":
                view[...] = 1.0
            elif p.init.startswith("normal:"):
                std = float(p.init.split(":", 1)[1])
                view[...] = rng.normal(scale=std, size=p.shape)
                if jitter is not None:
                    view[...] *= 1.0 + config.noise * jitter.normal(size=p.shape)
            self.views[p.name] = view
            self.grad_views[p.name] = self.grads[offset : offset + size]
            offset += size

    def optimizer_feeds(self) -> dict[str, np.ndarray]:
        feeds = {"grads": self.grads, "weights": self.weights, "momentum": self.momentum}
        feeds.update({f"grad/{name}": view for name, view in self.grad_views.items()})
        return feeds

    def store_grads(self, grads: dict[str, np.ndarray]) -> None:
        for name, view in self.grad_views.items():
            g = grads.get(name)
            view[...] = 0.0 if g is None else g.reshape(-1)


class _Batches:
    """Minibatch indices in a seeded order, reshuffled every epoch."""

    def __init__(self, n: int, batch: int, rng: np.random.Generator) -> None:
        self.n, self.batch, self.rng = n, batch, rng
        self.order = rng.permutation(n)
        self.cursor = 0

    def next(self) -> np.ndarray:
        if self.cursor + self.batch > self.n:
            self.order = self.rng.permutation(self.n)
            self.cursor = 0
        idx = self.order[self.cursor : self.cursor + self.batch]
        self.cursor += self.batch
        return idx


def run_training(
    config: TrainConfig,
    decide: RuleDecision,
    faults: Faults = frozenset(),
    on_step: Callable[[int, float], None] | None = None,
    on_forward: Callable[[int, Graph, list], None] | None = None,
    *,
    autofuse: AutoFuseSwitch = AUTOFUSE_OFF,
) -> TrainResult:
    """Train once; ``decide(rule)`` says whether a fusion rule is switched on.

    ``autofuse`` is what ``AUTOFUSE_FLAGS`` switches on (CANN's default: off).

    ``on_step(step, loss)`` is called every ``log_every`` steps and at the end;
    ``on_forward(step, graph, values)`` after every forward pass of the training
    graph (the tensor dump hooks in there).
    Floating-point warnings are silenced: overflow and NaN are outcomes the demo
    reports through the loss and the accuracy, not through stderr.
    """
    with np.errstate(all="ignore"):
        return _run(config, decide, faults, on_step, on_forward, autofuse)


def _run(
    config: TrainConfig,
    decide: RuleDecision,
    faults: Faults,
    on_step: Callable[[int, float], None] | None,
    on_forward: Callable[[int, Graph, list], None] | None = None,
    autofuse: AutoFuseSwitch = AUTOFUSE_OFF,
) -> TrainResult:
    rng = np.random.default_rng([config.seed, 7])
    jitter = None
    if config.noise > 0:
        # Run-to-run jitter: its own stream per repeat, the same for a given repeat.
        jitter = np.random.default_rng([config.seed, config.repeat, 99])
    train, test = make_data(config.net, config.data, config.seed)

    stats: dict[str, FusionStats] = {}
    train_graph, stats["train"] = compile_graph(build_train_graph(config.net), decide, faults, autofuse)
    opt_graph, stats["optimizer"] = compile_graph(build_optimizer_graph(config.net), decide, faults, autofuse)
    eval_graph, stats["eval"] = compile_graph(build_eval_graph(config.net), decide, faults, autofuse)
    step_program = Program(train_graph)
    opt_program = Program(opt_graph)
    eval_program = Program(eval_graph)
    apply_node = next(n for n in opt_graph.nodes if n.op == "ApplyMomentum")

    params = _Parameters(config, rng, jitter)
    opt_feeds = params.optimizer_feeds()
    if jitter is None:
        batches = _Batches(train.labels.shape[0], config.batch, rng)
    else:
        rng.permutation(train.labels.shape[0])  # keep the unjittered stream aligned
        batches = _Batches(train.labels.shape[0], config.batch, jitter)
    _, loss_name, seed_name = train_graph.outputs
    losses: list[tuple[int, float]] = []
    for step in range(1, config.steps + 1):
        idx = batches.next()
        feeds = dict(params.views)
        feeds["readings"] = train.readings[idx]
        feeds["global"] = train.global_[idx]
        feeds["labels"] = train.labels[idx]
        values = step_program.forward(feeds)
        if on_forward is not None:
            on_forward(step, train_graph, values)
        loss = float(step_program.value(values, loss_name))
        params.store_grads(step_program.backward(seed_name))
        apply_node.attrs["lr"] = _learning_rate(config, step)
        opt_program.forward(opt_feeds)
        if step % config.log_every == 0 or step == config.steps:
            losses.append((step, loss))
            if on_step is not None:
                on_step(step, loss)

    feeds = dict(params.views)
    feeds["readings"] = test.readings
    feeds["global"] = test.global_
    outputs = eval_program.value(eval_program.forward(feeds), eval_graph.outputs[0])
    if np.all(np.isfinite(outputs)):
        accuracy = float(np.mean(np.argmax(outputs, axis=-1) == test.labels))
    else:
        accuracy = math.nan
    return TrainResult(
        losses=losses, accuracy=accuracy, stats=stats, weights=params.weights, outputs=outputs,
        kernels=len(train_graph.nodes) + len(opt_graph.nodes),
    )


#: Simulated cost of one kernel launch and of the work itself, per step (seconds): a fused
#: kernel replaces several launches with one, which is what fusion buys on a real device.
KERNEL_SECONDS = 20e-6
STEP_WORK_SECONDS = 2e-3


def simulated_samples_per_second(kernels: int, batch: int) -> float:
    """The demo's throughput in simulated time: fewer kernels per step (more fusion) is faster.

    Simulated because the numpy training's own wall time says nothing about a
    device; the figure is what ``metric.speed_pattern`` reads in the demo.
    """
    return batch / (STEP_WORK_SECONDS + KERNEL_SECONDS * max(kernels, 0))


def _learning_rate(config: TrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to zero."""
    if step <= config.warmup:
        return config.lr * step / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return config.lr * 0.5 * (1.0 + math.cos(math.pi * progress))
