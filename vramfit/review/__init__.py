"""`vramfit review`: a reviewer's eye on an upstream launch script and its configs (see reviewer.py)."""
