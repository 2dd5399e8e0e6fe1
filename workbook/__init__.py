"""The workbook's machinery, one concern per module. Notebooks import `helpers`, which maps them here.

Engine (rarely edited): settings (settings, errors), weights, llama, models, cassettes,
judge_formats, util, quiet (known noise), adk_files (ADK's own files for adk web).
Chapters (edited in workshops): agent; evalfiles, lint, inference, judging, runs, evals,
eval_views; battery, labels, widget; agreement, panel; grid, grid_dask, report_views; plots.
"""

from workbook.quiet import ignore_known_noise

ignore_known_noise()
