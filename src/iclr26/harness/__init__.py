"""The harness: claims, statistics, the trial runner and its store, verdicts and the report.

Paper components never import it; it imports a paper's ``experiment`` module only to run trials.
"""
