"""Training's process side: everything that runs an attempt of a job.

The trainer process (`python -m training.process.runner`: runner, callbacks, console, events,
spool; `--remote`: remote_trainer) runs Ultralytics and reports; it needs no Django, and this
package's __init__ imports nothing, so a machine with only the trainer's dependencies can run it.
The supervisor (supervisor, one module per phase of an attempt: lease, prepare, beat, follow,
handlers, checkpoints, finish; watchdog for a hung trainer) runs in the training worker. What a
run reports as it goes is written by one writer (writer), for supervised and external runs alike.
"""
