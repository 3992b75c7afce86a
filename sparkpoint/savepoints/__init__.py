"""Savepoints: the manifest format, creating, restoring, verifying and disposing of them, and the catalog."""
