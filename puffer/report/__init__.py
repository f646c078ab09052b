"""Reports of multiruns: per-env tables, one score across envs with honest intervals, and
comparisons (python -m puffer.report).

- tables: the jobs of a multirun, their rows, aggregates and plots.
- compare: two multiruns side by side (Welch's t per env, A's and B's curves).
- stats: intervals (Student's t, Welch, stratified bootstrap), the interquartile mean, profiles.
- references: published scores that normalize each env's return.
"""

from puffer.report.compare import compare
from puffer.report.tables import load_jobs, report, sweep_logging

__all__ = ["compare", "load_jobs", "report", "sweep_logging"]
