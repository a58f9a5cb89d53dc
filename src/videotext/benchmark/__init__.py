"""`videotext benchmark`: every method on one data set, one budget per method, several seeds.

    definition.py  the benchmark's YAML (packaged as configs/benchmark_<name>.yaml): data, rows, tables
    runner.py      train + test each (row, seed) resumably, with its cost, into out/<row>/seed_<n>/
    table.py       the Markdown page and the R@1-against-cost plot, from the finished runs only
    figures.py     figures README.md and docs/ quote from the records: cited, checked, rewritten
"""
