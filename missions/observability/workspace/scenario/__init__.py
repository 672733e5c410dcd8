"""The shop's fixed load scenario."""
