"""The configuration vocabulary: the ``[carma]`` options (options.py), ``CarmaSettings`` read once at
start (settings.py), a task's ``executor_config`` (task_config.py) and its unknown keys named
with the nearest valid one (unknown_keys.py).  Import the modules; this package loads nothing."""
