"""The training entrypoint the launchers start: `<launcher> ... -m vramfit.train --run-dir RUN_DIR`.

RUN_DIR holds recipe.json (the validated recipe) and deepspeed.json (its DeepSpeed JSON with "auto"
filled for the real world size), both written by `vramfit run`.
"""
