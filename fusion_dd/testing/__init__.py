"""Test infrastructure for fusion-dd and for the people who build on it.

``fusion_dd.testing.simulate`` is an in-memory oracle with failure models and
noise models: a search costs hours of trainings, so the strategies, the noise
guard, the benchmarks and a user's own tests of a custom strategy or oracle all
judge a search by what it would have trained, counted exactly as the engine
pays for it. It is not a test of its own: it ships with the package, as
``optuna.testing`` does, so that code outside this repository can use it too.

It sits above the search layer, whose oracle protocol it implements, and the
search layer never imports it: the strategies stay free of anything that is
only there to exercise them (docs/architecture.md 5).
"""
