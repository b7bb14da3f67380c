"""The load harness: scenarios, an open-model generator, records and reports, and baselines."""
