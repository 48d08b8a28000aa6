"""Published path of the run-sink registry for plugins (docs/extending.md); the module is ``core.runs.sinks``."""

from lmmbench.core.runs.sinks import RUN_SINKS, RunSink, flat_config, log_to_sinks

__all__ = ["RUN_SINKS", "RunSink", "flat_config", "log_to_sinks"]
