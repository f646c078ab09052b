"""python -m puffer.report <multirun dir> [<other multirun dir>] [--out DIR] [--wandb]: the report of
a multirun, or the comparison of two (puffer.report.tables)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from puffer.report.compare import compare
from puffer.report.tables import report, required_runs

log = logging.getLogger("puffer.report")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", help="a multirun directory (A, with a second one)")
    parser.add_argument("other", nargs="?", help="a second multirun directory (B) to compare with A")
    parser.add_argument("--out", default=None)
    parser.add_argument("--wandb", action="store_true", help="also log the table and plots (or the comparison) to W&B")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from puffer.envs.catalog import importable

    if not args.other and not importable("matplotlib"):  # before any work: the plots need it
        sys.stderr.write("python -m puffer.report needs matplotlib for its plots (the sweeps extra): "
                         "pip install 'puffer[sweeps]'\n")
        sys.exit(2)
    for folder in filter(None, (args.sweep_dir, args.other)):
        try:
            required_runs(Path(folder))
        except FileNotFoundError as exc:  # one line, not a traceback
            sys.stderr.write(f"{exc}\n")
            sys.exit(2)
    if args.other:
        result = compare(args.sweep_dir, args.other, args.out, args.wandb)
        log.info("%s", result["markdown"].read_text())
        log.info("wrote %s", result["markdown"])
        return
    result = report(args.sweep_dir, args.out, args.wandb)
    log.info("%s", result["markdown"].read_text())
    log.info("wrote %s, %s, %s", result["markdown"], result["csv"], ", ".join(map(str, result["images"])))


if __name__ == "__main__":
    main()
