"""raycep gateway package (built in a later issue)."""
