"""Model serving for the shared inference API and dedicated endpoints: `python -m
deploy.inference` (server.py) runs the process; engine.py loads, batches and counts; formats.py
writes the Ultralytics Platform's JSON. Web processes only talk to it over HTTP and never
import this package's engine (it imports torch)."""
