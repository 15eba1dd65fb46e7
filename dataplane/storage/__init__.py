"""Meridian storage engine: RecordBatch v2 codec, segments, indexes and partition logs."""
