"""Code that runs where DAG files are parsed (the dag-processor, and a worker before its try):
the cluster policy that validates GPU tasks and gives them their OOM retries."""
