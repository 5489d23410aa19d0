"""The journal's record types, declared once.

Every line of the journal is a JSON object whose ``type`` says what happened;
replay (``fusion_dd.store.state``) folds them into the search state, the report
and the estimate are built from that state. A writer names its type with
:class:`RecordType` rather than a bare string, so that a type nobody replays
cannot be written by a typo, and a reader finds every kind here. The other
fields of each type are documented beside the state that applies them.

Nothing but the core's ``Word``: the journal and the state import it.
"""

from __future__ import annotations

from ..core.words import Word


class RecordType(Word):
    """The ``type`` of a journal record.

    A :class:`~fusion_dd.core.words.Word`: the bare word the journal has always carried,
    so journals of every earlier version read the same."""

    #: Once, first: the search's definition (candidates, settings, rule list for masks) and config.
    SEARCH_STARTED = "search_started"
    #: Each run of ``search`` or ``resume``: version, devices, launcher (what ``resume`` reuses).
    SESSION_STARTED = "session_started"
    #: A training is about to start: its configuration (a mask over the rule list), repeat, device, role.
    TRIAL_STARTED = "trial_started"
    #: Where it runs: the launcher's placement (host, boot id, job id), the supervisor's pid.
    TRIAL_LAUNCHED = "trial_launched"
    #: How it ended: its kind, metric, exit, duration, the artifacts' facts.
    TRIAL_FINISHED = "trial_finished"
    #: Given up before it finished (the search stopped, the device was lost); costs no budget.
    #: ``end_seen: false``: found orphaned by a later session, so nobody saw when it ended.
    TRIAL_CANCELLED = "trial_cancelled"
    #: The parallelism a question of the search was asked with, so that a replay asks it alike.
    QUESTION = "question"
    #: A device that broke (trainings on it end at once while others train) is used no more.
    DEVICE_RETIRED = "device_retired"
    #: The search stopped without an answer (interrupted, budget, training broken, switch ignored).
    SEARCH_STOPPED = "search_stopped"
    #: The search's answer: its status and the report without its list of trials.
    SEARCH_FINISHED = "search_finished"
    #: One comparison of a culprit set's tensor dumps (``fusion_dd.report.localize``).
    LOCALIZED = "localized"
    #: The ranking of suspects the guided strategy asked its questions by.
    GUIDE = "guide"
    #: A dumped configuration's refined ranking.
    GUIDE_REFINED = "guide_refined"
    #: Early passes withdrawn by the full trainings that proved them wrong.
    EARLY_PASSES_REVISED = "early_passes_revised"
    #: Seals the unchecksummed lines of a 0.1.0 journal with their SHA-256 (``fusion_dd.store.journal``).
    LEGACY_SEALED = "legacy_sealed"


__all__ = ["RecordType"]
