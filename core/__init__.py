"""The agent itself, with no Django and nothing else of Loop: the loop, its events and history,
its guards, the interrupt that stops it, and the vocabulary it shares with the model clients and
the tools. Everything else in Loop imports from here; nothing here imports from anywhere else."""
