"""Running and recording: the executor measures points on sessions (pair + prompts) through the harness, and
turns results into typed records (point, record) kept in the store and sinks; tables and the peers' runners.
"""
