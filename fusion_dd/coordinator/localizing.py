"""Localization as the engine runs it: the dumped trainings and comparisons that name the op each culprit broke.

What to train and compare is ``fusion_dd.report.localize``'s; here it is wired
to the session's trainer, journal and budget, for the end of a search, for
``fusion-dd localize`` of a finished one, and for the guide's dump comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.status import SearchStatus
from ..report import localize as localization
from ..report.build import finished_report
from ..store.state import LOCALIZE_ROLE
from .ports import Context, Launch


class Localizing:
    """The localizer of one engine, over its ports."""

    def __init__(self, context: Context, launch: Launch) -> None:
        self._context = context
        self._launch = launch

    def localizer(self) -> localization.Localizer:
        context = self._context
        assert context.config.localize is not None
        return localization.Localizer(
            config=context.config.localize,
            state=lambda: context.state,
            state_dir=context.state_dir,
            launch=lambda keys: self._launch(keys, None, LOCALIZE_ROLE),
            append=context.append,
            remaining_budget=context.remaining_budget,
            message=context.events.message,
        )

    def localize(self, targets: Sequence[localization.Target]) -> bool:
        """Dumped trainings and comparisons for these culprit sets; False when the budget ran out."""
        done = self.localizer().run(targets)
        if not done:
            self._context.events.message("budget exhausted: localization incomplete; the search's answer stands")
        return done

    def pending(self) -> bool:
        """A finished search with culprits that a configured localization has not journaled yet."""
        state = self._context.state
        if self._context.config.localize is None or state.finished is None:
            return False
        report = finished_report(state)
        culprits, _ = localization.culprits_of(report)
        return report.get("status") == SearchStatus.FOUND and any(key not in state.localized for key in culprits)
