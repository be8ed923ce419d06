"""Reports: a study's tables, figures and page from the results database, and comparisons.

Data flows one way: `orchestrator report` reads the database (SQL over `schema.latest_runs()`, the
cells and the refusals a sweep recorded; never result files) and writes files; `orchestrator
compare` reads the same tables, or a CSV in their format, and gives a verdict per cell.

    query.py    records of a set of sweeps (cells' statistics per metric, run states, refusals, jobs), from cell_stats.py and run_history.py
    tables.py   one table per metric (rows dataset x network x framework, columns hardware configurations),
                a cell's n/a and why
    table_files.py  a table as CSV (one file per metric, one shape for every sweep) and Markdown; a CSV read back
    speedup.py  speedups of cells that differ only in gpus, or only in threads
    figures.py  matplotlib (Agg): grouped bars, GPU and thread scaling, throughput against energy
    drawing.py  what every figure shares: its panels, colours and legend, n/a marks, log axes, its files
    page.py     one self-contained index.html
    compare.py  base against new, per cell: ratio, interval and a verdict on the repeats
    verdict.py  compare's statistics: a moderated t-test on log values, Benjamini-Hochberg over the cells
    labels.py   how a hardware configuration and a cell are named (light: the launcher's dry run reads it)
    families.py which network family (convolutional, fully connected, recurrent, Transformer) a cell is in:
                the page's sections (trainers.common.inputs.FAMILIES)

Only this package's modules import pandas and matplotlib, and only the `report` and `compare`
commands import them, so `orchestrator --help` and the launcher stay quick.
"""
