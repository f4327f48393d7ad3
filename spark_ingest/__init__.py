"""raycep Spark ingestion: PySpark jobs (on Ray through RayDP by default) that read files, map
rows to events, partition them by the cluster's routing hash and push them to the actors."""
from raycep.spark_ingest.mapping import EventMapping

__all__ = ["EventMapping"]
