"""Running a plan: the scheduler, the node-side stages and what travels to and from a node."""
