from . import agent  # noqa: F401  (adk's loader looks for agent.root_agent)
