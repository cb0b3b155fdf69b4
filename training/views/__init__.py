"""Training pages: the form that starts a job, the live job page, the jobs list, a project's
runs compared side by side, the model page, and downloads of checkpoints, plots and weights.
Their routes are training/urls.py."""
