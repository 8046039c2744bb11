"""Testing helpers: an OS-process launcher (the fault proxy and pytest fixtures come later)."""
