"""A run's log (`run.json`: schema, older layouts, writer), its sinks, headline summaries and the run store."""
