"""The vocabulary every layer shares: rules, outcomes, verdicts against the baseline, the
artifact-hook protocol, bounded file reading and the one error a user is shown. It imports
nothing else of fusion-dd, so any layer may import it (docs/architecture.md 5)."""
