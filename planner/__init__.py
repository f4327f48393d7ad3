"""raycep planner package (built in a later issue)."""
