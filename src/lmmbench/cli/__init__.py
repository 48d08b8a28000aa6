"""The ``lmmbench`` command: thin wrappers over the packages below it."""
