"""The config layer (docs/development.md#layout)."""
