"""Policies of episodic evaluation: the toy and VLA-shaped policies, and users' policies as they are (adapters)."""
