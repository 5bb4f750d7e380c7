"""The nightly history's analysis (derive layer): a run as a history entry (``collect``), the nights a
run is gated against (``reference``), change points (``changes``) and the trend page's series
(``trend``)."""
