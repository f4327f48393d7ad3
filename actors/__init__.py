"""raycep actors package (built in a later issue)."""
