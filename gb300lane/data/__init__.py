"""Data files shipped with the package: the vLLM schema snapshots recipes are validated against."""
