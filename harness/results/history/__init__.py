"""The nightly history: every run in one DuckDB file (``store``), made from run directories
(``collect``) as typed entries (``entry``)."""
