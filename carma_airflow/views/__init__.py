"""Read views for the CLI and the UI: what was learned of each task (learned.py), why tries wait
(waiting.py) and their place in the queue (queue_place.py).  Import the modules."""
