"""`vramfit fit`: the fastest configuration that fits, searched over the knobs the planner models.

- search.py: candidates (ZeRO / offload presets, micro-batch x accumulation with the global batch kept,
  checkpointing, Liger, attention, 8-bit optimizers, the GRPO generation batch), each planned and timed;
- steptime.py: the step-time model (its equations in its docstring);
- render.py: the ranked table and the JSON; write.py: the winner as a recipe folder; cli.py: the command.
"""
