"""The local deployment: a throwaway Airflow for tests, benches and the demo (devstack.py) and
``carma demo`` (demo.py).  Not used by the executor or the task side.  Import the modules."""
