"""Code shared by several papers: seeding, a small torch training loop, metrics."""
