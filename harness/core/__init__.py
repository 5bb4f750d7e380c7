"""The foundations layer (docs/development.md#layout)."""
