"""The indexes app's states are the exports app's: a build is a ``JobRun``
(``controlplane.exports.choices.RunState``), its values ``ValueFormat.JSON`` only."""

from controlplane.exports.choices import RunState, RunTrigger

__all__ = ["RunState", "RunTrigger"]
