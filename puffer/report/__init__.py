"""Reports of multiruns: per-env tables, one score across envs with honest intervals, and
comparisons (python -m puffer.report).

- tables: the jobs of a multirun, their rows, aggregates, plots and comparisons.
- stats: intervals (Student's t, Welch, stratified bootstrap), the interquartile mean, profiles.
- references: published scores that normalize each env's return.
"""

from puffer.report.tables import compare, load_jobs, report, sweep_logging

__all__ = ["compare", "load_jobs", "report", "sweep_logging"]
