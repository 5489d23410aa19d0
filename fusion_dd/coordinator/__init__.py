"""The coordinator: the engine that runs a search against the journal, its replay and its
estimate, the training oracle, pre-flight checks and the closure of a finished search. It is the
top of the library; only the command line and the demo sit above it (docs/architecture.md 5)."""
