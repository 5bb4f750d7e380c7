"""The present layer (docs/development.md#layout)."""
