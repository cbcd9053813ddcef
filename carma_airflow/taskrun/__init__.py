"""Code that runs on the task side: the launcher process and, inside each try's process, the
listener, the retry policy and the kill guard.  Nothing here writes the store or places tasks."""
