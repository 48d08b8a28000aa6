"""Orchestration of whole runs, as library calls that the CLI, the tests and plan executors share.

``spec_session.run_spec`` runs a named experiment and writes its folder; ``perf_session.run_perf``
runs a load test and writes its folder. The CLI only parses options and prints what these return.
"""

__all__: list[str] = []
