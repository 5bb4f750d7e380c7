"""The harness's error types. The CLI is the only place that turns them into exit codes."""


class UserError(Exception):
    """Bad input a user can fix: a regime file, a workload, a missing package. Exit code 2."""


class EngineError(Exception):
    """The engine failed: it would not start, died, or stopped answering. Exit code 3."""
