"""The archivist as an ADK agent package, so `adk eval` and `adk web` can load it.

`adk eval agents/lore_archivist data/evalsets/final.evalset.json --config_file_path data/configs/final_reference.json`
Model and prompt version come from ARCHIVIST_MODEL and ARCHIVIST_PROMPT (defaults: the eval notebooks').
Run it with .venv's `adk`: `make` puts the repository on .venv's path, so `helpers` imports from here.
"""

import os

import helpers  # registers the local/... and recorded gemini-* model classes

root_agent = helpers.build_archivist(
    os.environ.get("ARCHIVIST_PROMPT", "v4"), model=os.environ.get("ARCHIVIST_MODEL", "local/qwen-0.5b")
)
