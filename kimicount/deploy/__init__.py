"""The deployment planner (`kimicount plan`): hardware, placement, the engines, the plan and its answer,
the speed floor, the serve-command parser, and local llama.cpp runs (`local/`).

docs/architecture.md draws the order its modules import each other in."""
