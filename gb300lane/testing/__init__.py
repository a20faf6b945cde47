"""Test doubles and seams, kept apart from the code they stand in for.

`simlane.SimLane` is a lane simulated in one JSON file (a `PromotionOps`);
`crash` kills a transition at a named journal point like kill -9 would;
`free_ports.free_port` gives tests and benchmarks ports for the servers they start;
`quick_recipes` writes the quick local-v26 (one short smoke window) they boot. The
CLI uses them only when `GB300LANE_LANE_OPS=sim:<file>` or
`GB300LANE_CRASH_AT=<point>` ask for them (see `gb300lane.cli.seams`).
"""
