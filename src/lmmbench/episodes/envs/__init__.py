"""Environments of episodic evaluation: toy-waypoints, chat, Push-T, LIBERO, gymnasium, worker processes."""
