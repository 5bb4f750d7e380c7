"""One module per `bench` subcommand (asv's ``commands/*.py`` habit). Each module has:

- ``NAME``, ``SUMMARY`` (its line in ``bench --help``), ``DESCRIPTION`` and ``EXAMPLES`` (its own
  ``--help``), ``INTERRUPTED`` (what Ctrl-C leaves behind, said after "interrupted:");
- ``add_arguments(parser)``: its arguments;
- ``run(args, console) -> int``: the command, returning its exit code; errors are raised
  (``harness.core.errors.UserError``, ``EngineError``) and become messages in ``harness.cli`` only;
- optionally ``ended(args, code)``: told the final exit code, whatever ended the command.

``harness.cli`` assembles the parser from these modules; what several share is in ``common``
(parsers, the run-or-study dispatch, executor flags) and ``terminal`` (what run and show print).
"""
