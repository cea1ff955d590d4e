"""Jobs: many models through many targets, on this machine or a Ray cluster (issue 50).

jobfile.py reads the job (models, their flags, targets), cells.py runs one (model, target)
cell as a convert in a child process and describes it, run.py schedules the cells (a local
pool, or Ray tasks) and skips those already done with the same inputs, table.py writes the
table of every cell (JSON, Markdown, a static HTML page).
"""
