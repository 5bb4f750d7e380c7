"""The run side layer (docs/development.md#layout)."""
