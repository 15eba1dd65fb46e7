"""Test helpers shared by every part's tests (real broker processes: ``brokers.py``)."""
