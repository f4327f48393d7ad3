"""raycep spark_ingest package (built in a later issue)."""
