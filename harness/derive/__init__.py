"""The derive layer (docs/development.md#layout)."""
