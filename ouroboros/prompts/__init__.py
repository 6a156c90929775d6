"""Data and workloads: where a run's prompts come from (sources: files and packaged question sets; datasets:
the dataset kinds and their rendering; workloads: multi-turn editing and refinement workloads).
"""
