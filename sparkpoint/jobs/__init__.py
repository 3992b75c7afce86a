"""Managed jobs: the registry and its views, the job directory that the driver-side runtime shares, and the
lifecycle (run, savepoint, stop, cancel, replace, triggers)."""
