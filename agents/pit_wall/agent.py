"""The Pit Wall race-data agent as an ADK agent package, so `adk eval` and `adk web` can load it.

`adk eval agents/pit_wall data/evalsets/pit_wall_no_tools.evalset.json --config_file_path data/configs/pit_wall_no_tools.json`
Model and tool contract come from PIT_WALL_MODEL and PIT_WALL_CONTRACT (defaults: notebook 06's agent, closed contract).
"""

import os

import helpers  # registers the local/... and recorded gemini-* model classes

root_agent = helpers.build_pit_wall(
    os.environ.get("PIT_WALL_CONTRACT", "closed"), model=os.environ.get("PIT_WALL_MODEL", "local/qwen-1.5b")
)
