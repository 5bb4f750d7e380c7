"""The harness's error types. The CLI is the only place that turns them into exit codes."""

from __future__ import annotations

from collections.abc import Sequence


class UserError(Exception):
    """Bad input a user can fix: a regime file, a workload, a missing package. Exit code 2."""


class EngineError(Exception):
    """The engine failed: it would not start, died, or stopped answering. Exit code 3."""


class FieldError(ValueError):
    """One field of a user's file is wrong, raised where that is found: a model validator (pydantic
    keeps the exception, so a cross-field check can name the field it is about rather than the
    model it sits in) or a check after loading. ``path`` is relative to what is being validated
    (the model, or the whole file). ``harness.core.config_file`` is the one place that turns it into a
    UserError with the file, that field's line, its dotted path and a "did you mean": the one of
    ``choices`` closest to ``value``, what the user wrote. A ValueError, because pydantic only
    collects those from validators."""

    def __init__(
        self,
        path: str | int | tuple[str | int, ...],
        message: str,
        *,
        value: object = None,
        choices: Sequence[str] = (),
    ) -> None:
        self.path: tuple[str | int, ...] = path if isinstance(path, tuple) else (path,)
        self.message = message
        self.value = value
        self.choices = tuple(choices)
        super().__init__(message)
