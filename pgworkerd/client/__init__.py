"""What an application calls: enqueue, results and waiting, cancel and retry, queue
pauses, and the operator's reads. Nothing here imports the daemon."""
